"""A deterministic synthetic corpus for scale benchmarks: any size, any backend, no embedding.

Why synthetic: embedding a million passages on 2 cores takes days, and a fixed public corpus does not grow
to order. The shape is the one measured: files of ~10 passages, words drawn from a Zipf law over
a fixed vocabulary (mostly pseudo-English words, ~10% two-character Chinese words), queries of 2–3
mid-frequency words. Each document has a topic; its passages carry a few of the topic's words and their
vectors lie near the topic's centre, so the dense stage sees clustered data (as real embeddings are) and
queries near a centre have true near neighbours.

Everything is a pure function of (seed, index): document `i` is the same whatever size the corpus has, so a
100k corpus is the first 100k passages of the 1M one and documents can be generated in any order.

API (small on purpose; the OpenSearch bench reuses it):

    corpus = Corpus(passages=100_000, seed=7)
    for doc in corpus.documents():          # SyntheticDocument: doc_id, title, passages, topic
        doc.body                            # passages joined by blank lines: split_passages gives them back
        corpus.vectors(doc)                 # int8 (n_passages, 384) array, unit vectors * 127
    corpus.queries(200)                     # SyntheticQuery: text (2-3 mid-frequency words), int8 vector

`MODEL` names the synthetic vector space; `python bench/scale_corpus.py --passages 1000` prints a sample.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

DIMENSIONS = 384
MODEL = "synthetic-zipf-384"  # the model id stored with the vectors (any id the backend does not embed with)
SCALE = 127  # int8 = round(127 * x) of a unit vector, as adapters/embedding.py stores them
VOCABULARY = 50_000
ZIPF_S = 1.0
CHINESE_SHARE = 0.1
PASSAGES_PER_DOC = 10
TOPICS = 1024
TOPIC_WORDS = 24  # per topic, drawn from the mid-frequency band
MID_BAND = (200, 3000)  # Zipf ranks of "mid-frequency" words (a query's words are drawn from here)
PASSAGE_CHARS = (450, 760)  # one paragraph per passage: two never pack into one 800-char passage
# Vector geometry: passage = centre + DOC_SPREAD * doc offset + PASSAGE_SPREAD * noise (each a unit-ish
# Gaussian), normalised; a query = centre + QUERY_SPREAD * noise. Cosines to the own centre ~0.6-0.7.
DOC_SPREAD = 0.6
PASSAGE_SPREAD = 0.6
QUERY_SPREAD = 0.5

_CONSONANTS = "bdfgklmnprtvz"
_VOWELS = "aiou"  # no trailing e or y: the Snowball stemmer leaves the pseudo-words whole


@dataclass(frozen=True)
class SyntheticDocument:
    doc_id: str
    title: str
    passages: tuple[str, ...]
    topic: int
    index: int

    @property
    def body(self) -> str:
        return "\n\n".join(self.passages)


@dataclass(frozen=True)
class SyntheticQuery:
    text: str
    vector: bytes  # int8, DIMENSIONS bytes
    topic: int


def _word(rank: int) -> str:
    """The vocabulary word of Zipf rank `rank`: a Chinese two-character word for ~10% of ranks, else a
    pseudo-English word of 2-4 consonant-vowel syllables (the rank's digits, so unique per rank)."""
    if (rank * 2654435761) % 1000 < CHINESE_SHARE * 1000:
        first, second = divmod(rank, 20_000)
        return chr(0x4E00 + (rank * 7919) % 20_000) + chr(0x4E00 + (first * 131 + second * 17) % 20_000)
    syllables = []
    n = rank + 52  # at least two syllables
    while n:
        n, digit = divmod(n, len(_CONSONANTS) * len(_VOWELS))
        c, v = divmod(digit, len(_VOWELS))
        syllables.append(_CONSONANTS[c] + _VOWELS[v])
    return "".join(syllables)


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[list[str], np.ndarray]:
    words = [_word(r) for r in range(VOCABULARY)]
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** ZIPF_S
    return words, np.cumsum(weights / weights.sum())


@functools.lru_cache(maxsize=4)
def _centres(seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1])
    centres = rng.standard_normal((TOPICS, DIMENSIONS)).astype(np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def _noise(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Gaussian rows of norm ~1."""
    return rng.standard_normal((rows, DIMENSIONS)).astype(np.float32) / np.sqrt(DIMENSIONS)


def quantize(unit: np.ndarray) -> np.ndarray:
    """Unit float rows to the int8 the embedded backend stores."""
    unit = unit / np.linalg.norm(unit, axis=-1, keepdims=True)
    return np.clip(np.rint(unit * SCALE), -127, 127).astype(np.int8)


def topic_words(topic: int, seed: int = 0) -> list[str]:
    """The mid-frequency words a topic's passages carry a few of."""
    words, _ = _vocabulary()
    rng = np.random.default_rng([seed, 2, topic])
    return [words[int(r)] for r in rng.integers(MID_BAND[0], MID_BAND[1], TOPIC_WORDS)]


class Corpus:
    """`passages` passages in documents of `PASSAGES_PER_DOC` (the last one may be shorter)."""

    def __init__(self, passages: int, seed: int = 0, source_key: str = "scale") -> None:
        self.passages = passages
        self.seed = seed
        self.source_key = source_key
        self.document_count = -(-passages // PASSAGES_PER_DOC)

    def __len__(self) -> int:
        return self.document_count

    def document(self, index: int) -> SyntheticDocument:
        """Document `index` (0-based): the same in every corpus of the same seed that has it."""
        words, cdf = _vocabulary()
        rng = np.random.default_rng([self.seed, 3, index])
        topic = int(rng.integers(TOPICS))
        own = topic_words(topic, self.seed)
        count = min(PASSAGES_PER_DOC, self.passages - index * PASSAGES_PER_DOC)
        ranks = np.searchsorted(cdf, rng.random((count, 140)))
        passages = []
        for row in ranks:
            picked = [words[int(r)] for r in row]
            for slot in rng.integers(0, len(picked), 3):  # three topic words per passage
                picked[int(slot)] = own[int(rng.integers(TOPIC_WORDS))]
            passages.append(_paragraph(picked))
        title = " ".join([own[0], own[1], words[int(ranks[0][0])]])
        return SyntheticDocument(f"doc-{index:07d}", title, tuple(passages), topic, index)

    def documents(self, start: int = 0, stop: int | None = None) -> Iterator[SyntheticDocument]:
        for index in range(start, self.document_count if stop is None else min(stop, self.document_count)):
            yield self.document(index)

    def vectors(self, doc: SyntheticDocument) -> np.ndarray:
        """int8 vectors of the document's passages, near its topic's centre (and near each other)."""
        return self.vectors_of(doc.index)

    def vectors_of(self, index: int) -> np.ndarray:
        """`vectors` of document `index` without generating its text (10x faster: bulk vector loads)."""
        topic = int(np.random.default_rng([self.seed, 3, index]).integers(TOPICS))
        count = min(PASSAGES_PER_DOC, self.passages - index * PASSAGES_PER_DOC)
        rng = np.random.default_rng([self.seed, 4, index])
        centre = _centres(self.seed)[topic]
        offset = DOC_SPREAD * _noise(rng, 1)
        return quantize(centre + offset + PASSAGE_SPREAD * _noise(rng, count))

    def queries(self, count: int, seed: int = 1) -> list[SyntheticQuery]:
        """`count` queries: 2-3 mid-frequency words (one a topic word) and a vector near that topic."""
        words, _ = _vocabulary()
        rng = np.random.default_rng([self.seed, 5, seed])
        out = []
        for _ in range(count):
            topic = int(rng.integers(TOPICS))
            picked = [topic_words(topic, self.seed)[int(rng.integers(TOPIC_WORDS))]]
            picked += [words[int(r)] for r in rng.integers(MID_BAND[0], MID_BAND[1], int(rng.integers(1, 3)))]
            vector = quantize(_centres(self.seed)[topic] + QUERY_SPREAD * _noise(rng, 1))[0]
            out.append(SyntheticQuery(" ".join(picked), vector.tobytes(), topic))
        return out


def _paragraph(words: list[str]) -> str:
    """Words joined into one paragraph of PASSAGE_CHARS characters (sentences of ~12 words)."""
    out: list[str] = []
    length = 0
    for i, word in enumerate(words):
        if length + len(word) + 2 > PASSAGE_CHARS[1]:
            break
        out.append(word + ("." if i % 12 == 11 else ""))
        length += len(word) + 1
        if length >= PASSAGE_CHARS[0] and i % 12 == 11:
            break
    return " ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    corpus = Corpus(args.passages, args.seed)
    doc = corpus.document(0)
    print(doc.doc_id, "|", doc.title, "|", len(doc.passages), "passages")
    print(doc.passages[0][:300])
    for q in corpus.queries(5):
        print("query:", q.text, "topic", q.topic)


if __name__ == "__main__":
    main()
