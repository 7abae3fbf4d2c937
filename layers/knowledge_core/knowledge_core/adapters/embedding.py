"""Sentence embeddings with ONNX Runtime: a BERT-style encoder read from a model directory.

A model directory (written by `kb models fetch`) holds `model.onnx`, `tokenizer.json` and `model.json`:

    {"id": "bge-small-en-v1.5-q", "pooling": "cls", "query_prefix": "...", "max_tokens": 512,
     "languages": ["en"]}

Vectors are L2-normalised and stored as int8 (`round(127 * x)`, 384 bytes for a 384-dimension model):
a quarter of float32, and the cosine of two stored vectors is their int8 dot product / 127².
onnxruntime and numpy are imported when the first text is embedded, never at module import, so a function
cold start pays for them only if it embeds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..domain.analyzer import has_cjk
from ..domain.hybrid import HybridRanking
from ..ports import Embedder, Hit, SourceQuery
from .wordpiece import WordPieceTokenizer

_SCALE = 127.0
_BATCH = 16


class OnnxEmbedder(Embedder):
    def __init__(self, model_dir: str | Path, *, threads: int = 0) -> None:
        self._dir = Path(model_dir)
        manifest = json.loads((self._dir / "model.json").read_text(encoding="utf-8"))
        self.model_id: str = manifest["id"]
        self._pooling: str = manifest.get("pooling", "cls")
        if self._pooling not in ("cls", "mean"):
            raise ValueError(f"{self._dir}: pooling must be cls or mean")
        self._query_prefix: str = manifest.get("query_prefix", "")
        self._max_tokens = int(manifest.get("max_tokens", 512))
        self._languages = frozenset(manifest.get("languages", ["en"]))
        self._threads = threads
        self._tokenizer: WordPieceTokenizer | None = None
        self._session: Any = None
        self._inputs: set[str] = set()
        self._lock = threading.Lock()

    def _load(self) -> tuple[WordPieceTokenizer, Any]:
        """Tokenizer and ONNX session, built on the first embedding (a function that never embeds, such
        as read, never pays for them)."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    import onnxruntime as ort

                    self._tokenizer = WordPieceTokenizer.from_file(self._dir / "tokenizer.json")

                    options = ort.SessionOptions()
                    if self._threads:
                        options.intra_op_num_threads = self._threads
                    session = ort.InferenceSession(
                        str(self._dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
                    )
                    self._inputs = {i.name for i in session.get_inputs()}
                    self._session = session
        assert self._tokenizer is not None
        return self._tokenizer, self._session

    def supports(self, text: str) -> bool:
        """False for text in a script the model was not trained on (an English model and CJK text)."""
        return "zh" in self._languages or not has_cjk(text)

    def embed_query(self, text: str) -> bytes | None:
        if not self.supports(text):
            return None
        return self._embed([self._query_prefix + text])[0]

    def embed_passages(self, texts: Sequence[str]) -> list[bytes]:
        return self._embed(list(texts))

    def _embed(self, texts: list[str]) -> list[bytes]:
        import numpy as np

        tokenizer, session = self._load()
        encoded = [tokenizer.encode(t, self._max_tokens) for t in texts]
        out: list[bytes] = [b""] * len(texts)
        # Similar lengths share a batch, so little of each batch is padding.
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), _BATCH):
            idx = order[start : start + _BATCH]
            width = max(len(encoded[i]) for i in idx)
            ids = np.full((len(idx), width), tokenizer.pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, : len(encoded[i])] = encoded[i]
                mask[row, : len(encoded[i])] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run(None, feed)[0]
            if self._pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            unit = pooled / np.maximum(norms, 1e-12)
            packed = np.clip(np.rint(unit * _SCALE), -127, 127).astype(np.int8)
            for row, i in enumerate(idx):
                out[i] = packed[row].tobytes()
        return out


def passage_text(title: str, passage: str) -> str:
    """What a passage's vector embeds: its parent's title and its own text."""
    return f"{title}\n\n{passage}" if title else passage


def document_vectors(embedder: Embedder, documents: Sequence[tuple[str, list[str]]]) -> list[list[bytes]]:
    """Per (title, passages) document, the vector of each passage, embedded in one batch."""
    flat = iter(embedder.embed_passages([passage_text(title, p) for title, ps in documents for p in ps]))
    return [[next(flat) for _ in ps] for _, ps in documents]


def cosines(query: bytes, vectors: Sequence[bytes | None]) -> list[float | None]:
    """The cosine of `query` and each stored vector (None where a vector is missing or of another size)."""
    import numpy as np

    q = np.frombuffer(query, dtype=np.int8).astype(np.int32)
    present = [i for i, v in enumerate(vectors) if v is not None and len(v) == len(query)]
    result: list[float | None] = [None] * len(vectors)
    if present:
        matrix = np.frombuffer(b"".join(vectors[i] for i in present), dtype=np.int8)  # type: ignore[misc]
        sims = matrix.reshape(len(present), len(query)).astype(np.int32) @ q / (_SCALE * _SCALE)
        for i, s in zip(present, sims.tolist(), strict=True):
            result[i] = float(s)
    return result


def rescore(
    hits: list[Hit], query: bytes, vectors: Sequence[bytes | None], hybrid: HybridRanking, q: SourceQuery
) -> list[Hit]:
    """One source's BM25 candidates (best first) with blended scores: those at or above the source's
    `minScore`, best first (ties keep BM25 order), at most its `topK`."""
    blended = hybrid.blend([h.score for h in hits], cosines(query, vectors))
    ranked = sorted(range(len(hits)), key=lambda i: -blended[i])
    return [replace(hits[i], score=blended[i]) for i in ranked if blended[i] >= q.min_score][: q.top_k]


class CachedEmbedder(Embedder):
    """Passage vectors remembered in a SQLite file by (model, sha256 of the text): re-ingesting a document
    whose passages did not change embeds nothing. Queries are not cached."""

    def __init__(self, inner: Embedder, path: str | Path) -> None:
        import sqlite3

        self._inner = inner
        self.model_id = inner.model_id
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors "
            "(model TEXT, digest BLOB, vector BLOB, PRIMARY KEY (model, digest))"
        )
        self._lock = threading.Lock()

    def embed_query(self, text: str) -> bytes | None:
        return self._inner.embed_query(text)

    def embed_passages(self, texts: Sequence[str]) -> list[bytes]:
        import hashlib

        digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in texts]
        with self._lock:
            known: dict[bytes, bytes] = {}
            for i in range(0, len(digests), 500):
                chunk = digests[i : i + 500]
                marks = ",".join("?" * len(chunk))
                known.update(
                    self._db.execute(
                        f"SELECT digest, vector FROM vectors WHERE model=? AND digest IN ({marks})",
                        (self.model_id, *chunk),
                    ).fetchall()
                )
        missing = [i for i, d in enumerate(digests) if d not in known]
        if missing:
            fresh = self._inner.embed_passages([texts[i] for i in missing])
            with self._lock:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?,?,?)",
                    [(self.model_id, digests[i], v) for i, v in zip(missing, fresh, strict=True)],
                )
            known.update((digests[i], v) for i, v in zip(missing, fresh, strict=True))
        return [known[d] for d in digests]
