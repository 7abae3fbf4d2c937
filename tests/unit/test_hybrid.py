"""Hybrid ranking (issue 6): the blend, the re-scoring of one source's candidates, the int8 cosine, the
WordPiece tokenizer on a hand-made vocabulary, and the vector cache. No model file needed here;
tests/integration/test_embedding_model.py runs the real model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from knowledge_core.adapters.embedding import CachedEmbedder, cosines, rescore
from knowledge_core.adapters.wordpiece import WordPieceTokenizer
from knowledge_core.domain.hybrid import HybridRanking
from knowledge_core.ports import Embedder, Hit, SourceQuery


def vec(*values: int) -> bytes:
    return bytes(v & 0xFF for v in values)


def hit(doc_id: str, score: float) -> Hit:
    return Hit("s@1", doc_id, doc_id.upper(), "rev", score, f"passage of {doc_id}")


def test_r_hybrid_blend_by_hand() -> None:
    """score = w·bm25 + (1−w)·bm25_max·cosine; a missing vector counts cosine 0."""
    ranking = HybridRanking(weight=0.5, pool=30)
    assert ranking.blend([10.0, 6.0, 2.0], [0.2, 0.9, None]) == pytest.approx([6.0, 7.5, 1.0])
    assert HybridRanking(weight=1.0).blend([3.0, 1.0], [0.0, 1.0]) == [3.0, 1.0]  # w = 1: BM25 alone
    assert ranking.blend([], []) == []


def test_r_hybrid_pool_is_at_least_top_k() -> None:
    assert HybridRanking(pool=30).depth(5) == 30
    assert HybridRanking(pool=3).depth(10) == 10


def test_r_hybrid_int8_cosine() -> None:
    q = vec(127, 0, 0)
    got = cosines(q, [vec(127, 0, 0), vec(0, 127, 0), vec(-127, 0, 0), None, vec(1, 2)])
    assert got[:3] == pytest.approx([1.0, 0.0, -1.0])
    assert got[3:] == [None, None]  # missing, or a vector of another model size


def test_r_hybrid_rescore_orders_thresholds_and_cuts() -> None:
    """minScore applies to the blended score (never lowered); ties keep BM25 order; at most topK."""
    hits = [hit("a", 10.0), hit("b", 8.0), hit("c", 6.0), hit("d", 1.0)]
    q = vec(127, 0)
    vectors = [vec(0, 127), vec(127, 0), vec(127, 0), vec(127, 0)]
    ranking = HybridRanking(weight=0.5)
    # blended: a 5.0, b 9.0, c 8.0, d 5.5
    out = rescore(hits, q, vectors, ranking, SourceQuery("s@1", top_k=3, min_score=5.2))
    assert [(h.doc_id, h.score) for h in out] == [("b", 9.0), ("c", 8.0), ("d", 5.5)]
    tie = rescore(hits[:2], q, [vec(0, 127), vec(0, 127)], ranking, SourceQuery("s@1", 5, 0.0))
    assert [h.doc_id for h in tie] == ["a", "b"]
    assert rescore([], q, [], ranking, SourceQuery("s@1", 5, 0.0)) == []


# --- WordPiece on a hand-made vocabulary --------------------------------------------------------------
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "cafe", "naive", ",", "!"]
TOKENS += ["中", "文", "x"]
VOCAB = {t: i for i, t in enumerate(TOKENS)}


def test_r_hybrid_wordpiece_pieces_punctuation_accents_cjk() -> None:
    tok = WordPieceTokenizer(VOCAB, lowercase=True, strip_accents=True)
    ids = tok.encode("Unaffable, CAFÉ naïve!中文 zz", 64)
    names = {i: t for t, i in VOCAB.items()}
    assert [names[i] for i in ids] == [
        "[CLS]",
        "un",
        "##aff",
        "##able",
        ",",
        "cafe",
        "naive",
        "!",
        "中",
        "文",
        "[UNK]",  # no piece matches "zz": the whole word is unknown
        "[SEP]",
    ]


def test_r_hybrid_wordpiece_truncates_with_the_separator_kept() -> None:
    tok = WordPieceTokenizer(VOCAB, lowercase=True, strip_accents=True)
    ids = tok.encode("x " * 50, 8)
    assert len(ids) == 8 and ids[0] == VOCAB["[CLS]"] and ids[-1] == VOCAB["[SEP]"]
    assert tok.encode("x" * 101, 8)[1] == VOCAB["[UNK]"]  # longer than max_word_chars


def test_r_hybrid_wordpiece_drops_controls_and_keeps_case_when_asked() -> None:
    tok = WordPieceTokenizer({**VOCAB, "Cafe": 99}, lowercase=False, strip_accents=False)
    assert tok.normalize("Ca\x00fe\u200b\t") == "Cafe "  # NUL and format characters go, a tab is a space
    assert tok.encode("Cafe", 8)[1] == 99


# --- the vector cache -----------------------------------------------------------------------------------
class CountingEmbedder(Embedder):
    model_id = "toy"

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed_query(self, text: str) -> bytes | None:
        return vec(len(text))

    def embed_passages(self, texts: Sequence[str]) -> list[bytes]:
        self.embedded += list(texts)
        return [vec(len(t), 1) for t in texts]


def test_r_hybrid_cache_embeds_each_passage_text_once(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path / "cache.sqlite3")
    assert cached.embed_passages(["aa", "b"]) == [vec(2, 1), vec(1, 1)]
    assert cached.embed_passages(["b", "ccc", "aa"]) == [vec(1, 1), vec(3, 1), vec(2, 1)]
    assert inner.embedded == ["aa", "b", "ccc"]
    again = CachedEmbedder(CountingEmbedder(), tmp_path / "cache.sqlite3")  # persists across processes
    assert again.embed_passages(["ccc"]) == [vec(3, 1)]
