"""Sentence embeddings with ONNX Runtime: BERT-style encoders read from model directories, each text embedded
by the model for its script.

A model directory (written by `kb models fetch`) holds `model.onnx`, its tokenizer (`tokenizer.json` for
Hugging Face `tokenizers`, or a sentencepiece `tokenizer.model`), optionally a normalization map, and
`model.json`:

    {"id": "bge-small-zh-v1.5-q", "pooling": "cls", "query_prefix": "...", "max_tokens": 512,
     "languages": ["zh", "en"], "dimensions": 384, "onnx_sha256": "..."}

`OnnxEmbedder(path)` takes one model directory or a directory of them (the per-user cache `kb models fetch`
fills). Text with CJK characters goes to the first model whose languages include "zh", other text to the
first whose languages include "en" (else to any model that covers it); a text no model covers gets no
vector, and its query ranks by BM25 alone. Every vector carries its model's id, and only vectors of the
same model are ever compared.

Vectors are L2-normalised and stored as int8 (`round(127 * x)`, 384 bytes for a 384-dimension model): a
quarter of float32, and the cosine of two stored vectors is their int8 dot product / 127². onnxruntime,
numpy and tokenizers are imported when the first text is embedded, never at module import, so a function
cold start pays for them only if it embeds. A directory that is missing, partial or inconsistent raises
`ModelError` (one line naming the directory and what to do) when the embedder is built; `check()` also
loads each model and verifies its output dimension and file digest (kb serve runs it at start).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..domain.analyzer import has_cjk
from ..domain.cache import BoundedCache, approx_bytes
from ..ports import Embedder, Vector, across_ids

_SCALE = 127.0
_BATCH = 32
# Characters kept per token of a model's window before tokenizing: more than any vocabulary piece spans, so
# text that fits the window is never cut, and a longer (or hostile) one is tokenized only up to the window.
_CHARS_PER_TOKEN = 16
# A title is embedded with each of its passages: at most this many characters of it, so a long title cannot
# crowd the passage's own text out of the model's window.
TITLE_CHARS = 256
QUERY_CACHE_BYTES = 4 * 1024 * 1024
logger = logging.getLogger(__name__)


class ModelError(ValueError):
    """A model directory that cannot be used; the message is one line naming it and the remedy."""


class ModelManifest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    pooling: Literal["cls", "mean"] = "cls"
    query_prefix: str = ""
    passage_prefix: str = ""
    max_tokens: int = Field(default=512, ge=8, le=8192)
    languages: tuple[str, ...] = ("en",)
    dimensions: int = Field(ge=8, le=4096)
    onnx_sha256: str | None = None
    # Every model runs on ONNX Runtime; a manifest naming another engine is refused (fetch it again).
    engine: Literal["onnx"] = "onnx"
    # The tokenizer: Hugging Face `tokenizers` JSON, or a sentencepiece model (a 250k-piece unigram vocabulary
    # loads in 0.1 s and 20 MB there, against 2 s and 280 MB as `tokenizers` JSON, measured).
    tokenizer: str = Field(default="tokenizer.json", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(json|model)$")
    tokenizer_sha256: str | None = None
    # A per-code-point normalization map (JSON {code point: replacement}) applied before tokenizing, for a
    # tokenizer whose normalizer `tokenizers` cannot express (sentencepiece's precompiled NFKC map).
    normalize: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\.json$")
    normalize_sha256: str | None = None
    # True: the mixed design's multilingual model, which scores the passages of a question's other script
    # (its vectors stored under one id per script, `across_ids`); the question's own script keeps its model.
    across: bool = False


def model_dirs(path: str | Path) -> list[Path]:
    """`path` itself when it is a model directory, else its subdirectories that hold a `model.json`
    (sorted by name): the directories an embedder is built from."""
    root = Path(path)
    if (root / "model.json").is_file():
        return [root]
    if not root.is_dir():
        raise ModelError(f"embedding model directory {root} does not exist; run `kb models fetch`")
    found = sorted(d for d in root.iterdir() if d.is_dir() and (d / "model.json").is_file())
    if not found:
        raise ModelError(f"no embedding model in {root} (no model.json); run `kb models fetch`")
    return found


class OnnxModel:
    """One model directory: its manifest (validated at construction), its tokenizer and ONNX session
    (loaded on first use)."""

    def __init__(self, model_dir: Path, manifest: ModelManifest | None = None, *, threads: int = 0) -> None:
        self.dir = model_dir
        if not (model_dir / "model.json").is_file():
            raise ModelError(
                f"embedding model {model_dir} is incomplete (no model.json); run `kb models fetch`"
            )
        self.manifest = manifest or read_manifest(model_dir)
        named = ("model.onnx", self.manifest.tokenizer, self.manifest.normalize)
        missing = [f for f in named if f and not (model_dir / f).is_file()]
        if missing:
            raise ModelError(
                f"embedding model {model_dir} is incomplete (no {', '.join(missing)}); "
                "run `kb models fetch` again"
            )
        self._threads = threads
        self._char_map: dict[int, str] | None = None
        self._tokenizer: Any = None
        self._session: Any = None
        self._inputs: set[str] = set()
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.manifest.id

    def covers(self, text: str) -> bool:
        """False for text in a script the model was not trained on (an English model and CJK text)."""
        return "zh" in self.manifest.languages or not has_cjk(text)

    def _load(self) -> tuple[Any, Any]:
        if self._session is None:
            with self._lock:
                if self._session is None:
                    # tokenizers' own thread pool would spin beside ONNX Runtime's threads on the same cores
                    # (measured: batch embedding 0.70x of raw ONNX Runtime with it, 0.92x without).
                    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                    import onnxruntime as ort

                    try:
                        tokenizer = _load_tokenizer(
                            self.dir / self.manifest.tokenizer, self.manifest.max_tokens
                        )
                        options = ort.SessionOptions()
                        # No arena: it keeps the largest batch's activations for the process's life
                        # (measured, three models after 96 window-long passages: 3.6 GB RSS with it,
                        # 0.6 GB without; one process holds the models, kb serve's embed worker).
                        options.enable_cpu_mem_arena = False
                        # Its threads sleep between runs instead of spinning: spinning took the cores the
                        # request's other hops need (measured through kb serve's embed worker on 2 cores: a
                        # query 21 -> 15 ms, with the multilingual pair 54 -> 34 ms).
                        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                        if self._threads:
                            options.intra_op_num_threads = self._threads
                        session = ort.InferenceSession(
                            str(self.dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
                        )
                    except Exception as exc:  # the libraries' own errors: corrupt or foreign files
                        raise ModelError(
                            f"embedding model {self.dir} cannot be loaded ({type(exc).__name__}); "
                            "run `kb models fetch` again"
                        ) from None
                    if self.manifest.normalize:
                        self._char_map = _read_char_map(self.dir / self.manifest.normalize, self.dir)
                    self._inputs = {i.name for i in session.get_inputs()}
                    self._tokenizer = tokenizer
                    self._session = session
        return self._tokenizer, self._session

    def prepared(self, text: str) -> str:
        """`text` as the tokenizer gets it: cut to what the model's window can hold (so a hostile text costs
        no more than a full window), then normalized by the model's map when it has one."""
        limit = self.manifest.max_tokens * _CHARS_PER_TOKEN
        # Lone surrogates (valid in JSON escapes, not in UTF-8) become "?" rather than fail the tokenizer.
        text = text[:limit].encode("utf-8", "replace").decode("utf-8")
        if self._char_map is not None:
            text = text.translate(self._char_map)[:limit]
        return text

    def token_ids(self, text: str) -> list[int]:
        """The ids the model sees for `text` (truncated to its max_tokens, no padding)."""
        tokenizer, _ = self._load()
        ids: list[int] = tokenizer.encode_batch([self.prepared(text)])[0][0]
        return ids

    def embed(self, texts: list[str]) -> list[bytes]:
        """int8 unit vectors, batches of similar lengths (little padding)."""
        import numpy as np

        tokenizer, session = self._load()
        out: list[bytes] = [b""] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), _BATCH):
            idx = order[start : start + _BATCH]
            rows = tokenizer.encode_batch([self.prepared(texts[i]) for i in idx])
            ids = np.array([row for row, _ in rows], dtype=np.int64)
            mask = np.array([m for _, m in rows], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run(None, feed)[0]
            if self.manifest.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            unit = pooled / np.maximum(norms, 1e-12)
            packed = np.clip(np.rint(unit * _SCALE), -127, 127).astype(np.int8)
            for row, i in enumerate(idx):
                out[i] = packed[row].tobytes()
        return out

    def check(self) -> None:
        """Load the model and embed a probe: its output has the manifest's dimension, and each file the
        manifest's digest (when recorded). Raises ModelError."""
        recorded = {
            "model.onnx": self.manifest.onnx_sha256,
            self.manifest.tokenizer: self.manifest.tokenizer_sha256,
            self.manifest.normalize or "": self.manifest.normalize_sha256,
        }
        for name, digest in recorded.items():
            if name and digest and file_sha256(self.dir / name) != digest:
                raise ModelError(
                    f"embedding model {self.dir}: {name} is not the one model.json names "
                    "(digest mismatch); run `kb models fetch` again"
                )
        check_probe(self)


class _HfTokenizer:
    """A Hugging Face `tokenizers` JSON: truncated to the window, padded per batch."""

    def __init__(self, path: Path, max_tokens: int) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self._tok.enable_truncation(max_tokens)
        pad_token = next((t for t in ("[PAD]", "<pad>") if self._tok.token_to_id(t) is not None), None)
        pad = self._tok.token_to_id(pad_token) if pad_token else None
        self._tok.enable_padding(pad_id=pad or 0, pad_token=pad_token or "[PAD]")

    def encode_batch(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        """Per text, its ids and attention mask, padded to the batch's longest."""
        return [(list(e.ids), list(e.attention_mask)) for e in self._tok.encode_batch(texts)]


class _SentencePieceTokenizer:
    """A sentencepiece model: its pieces between its begin and end ids, truncated to the window, padded
    with its pad id per batch."""

    def __init__(self, path: Path, max_tokens: int) -> None:
        import sentencepiece

        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self._max = max_tokens
        self._bos, self._eos, self._pad = self._sp.bos_id(), self._sp.eos_id(), max(self._sp.pad_id(), 0)

    def encode_batch(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        pieces = self._sp.encode(texts)
        rows = [[self._bos, *p[: self._max - 2], self._eos] for p in pieces]
        width = max((len(r) for r in rows), default=0)
        return [(r + [self._pad] * (width - len(r)), [1] * len(r) + [0] * (width - len(r))) for r in rows]


def _load_tokenizer(path: Path, max_tokens: int) -> _HfTokenizer | _SentencePieceTokenizer:
    """A model directory's tokenizer file by its kind: `.json` `tokenizers`, `.model` sentencepiece."""
    if path.suffix == ".model":
        return _SentencePieceTokenizer(path, max_tokens)
    return _HfTokenizer(path, max_tokens)


def _read_char_map(path: Path, model_dir: Path) -> dict[int, str]:
    """A normalization map file ({"code point": "replacement"}) as a str.translate table."""
    import json

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {int(cp): str(out) for cp, out in raw.items()}
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelError(
            f"embedding model {model_dir}: {path.name} cannot be read ({type(exc).__name__}); "
            "run `kb models fetch` again"
        ) from None


def check_probe(model: OnnxModel) -> None:
    """A probe text embeds, with the manifest's dimension. Raises ModelError."""
    try:
        got = len(model.embed(["probe"])[0])
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(
            f"embedding model {model.dir} fails on a probe text ({type(exc).__name__}); "
            "run `kb models fetch` again"
        ) from None
    if got != model.manifest.dimensions:
        raise ModelError(
            f"embedding model {model.dir} makes {got}-dimension vectors, model.json says "
            f"{model.manifest.dimensions}; run `kb models fetch` again"
        )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(model_dir: Path) -> ModelManifest:
    """A model directory's validated model.json. Raises ModelError naming the invalid fields."""
    try:
        return ModelManifest.model_validate_json((model_dir / "model.json").read_bytes())
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "model.json" for e in exc.errors())
        raise ModelError(
            f"embedding model {model_dir}: model.json is invalid ({fields}); run `kb models fetch` again"
        ) from None


def load_model(model_dir: Path, *, threads: int = 0) -> OnnxModel:
    """The model of one directory."""
    return OnnxModel(model_dir, read_manifest(model_dir), threads=threads)


def _cache_bytes(value: object) -> int:
    """What a query-cache key (the query) or value (a Vector, mostly its bytes) holds."""
    return len(value.data) + 100 if isinstance(value, Vector) else approx_bytes(value)


class OnnxEmbedder(Embedder):
    """One or more models (a model directory or a directory of them), each text embedded by the model for
    its script. Query vectors are remembered (bounded by bytes): a repeated query embeds nothing."""

    def __init__(
        self, path: str | Path | Sequence[str | Path], *, threads: int = 0, cross_script: bool = False
    ) -> None:
        paths = [path] if isinstance(path, str | Path) else list(path)
        self.cross_script = cross_script
        loaded = [load_model(d, threads=threads) for p in paths for d in model_dirs(p)]
        ids = [m.id for m in loaded]
        if len(set(ids)) != len(ids):
            raise ModelError(f"two embedding model directories name the same model id ({', '.join(ids)})")
        across = [m for m in loaded if m.manifest.across]
        if len(across) > 1:
            names = ", ".join(m.id for m in across)
            raise ModelError(f"two multilingual (across) models ({names}); keep one")
        # The mixed design needs a model per script beside the multilingual one; alone, it is a plain model.
        self._across = across[0] if across and len(loaded) > 1 else None
        self._models = [m for m in loaded if m is not self._across]
        self._by_id: dict[str, OnnxModel] = {m.id: m for m in self._models}
        if self._across is not None:
            self._by_id.update(dict.fromkeys(across_ids(self._across.id), self._across))
        self.models = tuple(self._by_id)
        self._queries: BoundedCache[str, Vector] = BoundedCache(QUERY_CACHE_BYTES, size=_cache_bytes)

    @property
    def model_id(self) -> str:
        """The models as one name, the multilingual one once (not per script)."""
        return "+".join(m.id for m in [*self._models, *([self._across] if self._across else [])])

    def dimensions(self, model: str) -> int:
        return self._by_id[model].manifest.dimensions

    def model_for(self, text: str) -> OnnxModel | None:
        """The model for `text`'s script: CJK text to a Chinese-capable model, other text to an English
        one; else any model that covers it (never the mixed design's multilingual model)."""
        want = "zh" if has_cjk(text) else "en"
        for model in self._models:
            if want in model.manifest.languages:
                return model
        return next((m for m in self._models if m.covers(text)), None)

    def embed_across(self, text: str) -> tuple[Vector, Vector] | None:
        model = self._across
        if model is None:
            return None
        key = "\x00across\x00" + text
        cached = self._queries.get(key)
        if cached is None:
            cached = Vector(model.id, model.embed([model.manifest.query_prefix + text])[0])
            self._queries.put(key, cached)
        cjk, latin = across_ids(model.id)
        own, other = (cjk, latin) if has_cjk(text) else (latin, cjk)
        return Vector(other, cached.data), Vector(own, cached.data)

    @property
    def has_across(self) -> bool:
        """Whether a multilingual model (the mixed design) answers `embed_across`."""
        return self._across is not None

    def check(self) -> None:
        for model in self._models:
            model.check()
        if self._across is not None:
            self._across.check()

    def embed_query(self, text: str) -> Vector | None:
        cached = self._queries.get(text)
        if cached is not None:
            return cached
        model = self.model_for(text)
        if model is None:
            return None
        vector = Vector(model.id, model.embed([model.manifest.query_prefix + text])[0])
        self._queries.put(text, vector)
        return vector

    def models_for(self, text: str) -> tuple[str, ...]:
        if self.cross_script:
            ids = tuple(m.id for m in self._models if m.covers(text))
        else:
            model = self.model_for(text)
            ids = (model.id,) if model else ()
        if self._across is not None:  # and the multilingual model, under its script's id
            ids += (across_ids(self._across.id)[0 if has_cjk(text) else 1],)
        return ids

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        out: list[list[Vector]] = [[] for _ in texts]
        assigned = [self.models_for(t) for t in texts]
        for model_id in models if models is not None else self.models:
            model = self._by_id[model_id]
            idx = [i for i in range(len(texts)) if model_id in assigned[i]]
            prefix = model.manifest.passage_prefix
            for i, data in zip(idx, model.embed([prefix + texts[i] for i in idx]), strict=True):
                out[i].append(Vector(model_id, data))
        return out


def matching(
    queries: Sequence[Vector], stored: Sequence[Mapping[str, Vector]]
) -> tuple[list[float | None], list[str | None]]:
    """Per candidate (its stored vectors by model), the cosine with the first query vector of a model it
    has (None: none) and that model — the scale its cosine runs on (domain.hybrid groups cosines by it):
    vectors of two models are never compared."""
    result: list[float | None] = [None] * len(stored)
    models: list[str | None] = [None] * len(stored)
    for query in queries:
        missing = [i for i, c in enumerate(result) if c is None]
        if not missing:
            break
        for i, c in zip(missing, cosines(query, [stored[i].get(query.model) for i in missing]), strict=True):
            if c is not None:
                result[i], models[i] = c, query.model
    return result, models


def matching_cosines(queries: Sequence[Vector], stored: Sequence[Mapping[str, Vector]]) -> list[float | None]:
    """The cosines of `matching`."""
    return matching(queries, stored)[0]


def passage_text(title: str, passage: str) -> str:
    """What a passage's vector embeds: its parent's title and its own text."""
    return f"{title[:TITLE_CHARS]}\n\n{passage}" if title else passage


class EmbeddingTimeout(Exception):
    """Embedding a write's passages passed its deadline (`document_vectors`)."""


DEADLINE_CHUNK = 64  # passages embedded between two looks at a write's deadline


def document_vectors(
    embedder: Embedder, documents: Sequence[tuple[str, list[str]]], deadline: float | None = None
) -> list[list[list[Vector]]]:
    """Per (title, passages) document, the vectors of each passage. With a `deadline` (time.monotonic())
    they are embedded DEADLINE_CHUNK passages at a time and EmbeddingTimeout is raised once it has passed,
    so one huge write cannot hold its caller past it."""
    texts = [passage_text(title, p) for title, ps in documents for p in ps]
    if deadline is None:
        vectors = embedder.embed_passages(texts)
    else:
        vectors = []
        for start in range(0, len(texts), DEADLINE_CHUNK):
            if time.monotonic() > deadline:
                raise EmbeddingTimeout
            vectors += embedder.embed_passages(texts[start : start + DEADLINE_CHUNK])
    flat = iter(vectors)
    return [[next(flat) for _ in ps] for _, ps in documents]


def cosines(query: Vector, vectors: Sequence[Vector | None]) -> list[float | None]:
    """The cosine of `query` and each stored vector (None where a vector is missing or of another model).
    Without numpy (a Lambda function without the inference layer), the same integer dot products in plain
    Python: the same floats."""
    try:
        import numpy as np
    except ImportError:
        return plain_cosines(query, vectors)

    q = np.frombuffer(query.data, dtype=np.int8).astype(np.int32)
    present = [
        i
        for i, v in enumerate(vectors)
        if v is not None and v.model == query.model and len(v.data) == len(query.data)
    ]
    result: list[float | None] = [None] * len(vectors)
    if present:
        matrix = np.frombuffer(b"".join(vectors[i].data for i in present), dtype=np.int8)  # type: ignore[union-attr]
        sims = matrix.reshape(len(present), len(query.data)).astype(np.int32) @ q / (_SCALE * _SCALE)
        for i, s in zip(present, sims.tolist(), strict=True):
            result[i] = float(s)
    return result


def plain_cosines(query: Vector, vectors: Sequence[Vector | None]) -> list[float | None]:
    """`cosines` without numpy: each int8 dot product summed exactly, then divided as numpy divides."""
    from array import array
    from operator import mul

    q = array("b", query.data)
    return [
        sum(map(mul, q, array("b", v.data))) / (_SCALE * _SCALE)
        if v is not None and v.model == query.model and len(v.data) == len(query.data)
        else None
        for v in vectors
    ]


class VectorMatrix:
    """The vectors of one model, one row per passage id, for the exact dense scan of the embedded backend.
    Held as float32 for BLAS: int8 products summed over up to 1,040 dimensions stay below 2^24, so the
    float32 dot product is the exact int8 one (about a millisecond per 10,000 passages here)."""

    def __init__(self, model: str, ids: list[int], vectors: list[bytes]) -> None:
        import numpy as np

        self.model = model
        self.ids = np.array(ids, dtype=np.int64)
        width = len(vectors[0]) if vectors else 0
        packed = np.frombuffer(b"".join(vectors), dtype=np.int8).reshape(len(vectors), width)
        self.matrix = packed.astype(np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    def nearest(self, query: Vector, k: int) -> list[tuple[int, float]]:
        """The `k` passage ids most similar to `query` (same model only), best first, with their cosine."""
        import numpy as np

        if (
            query.model != self.model
            or not len(self.ids)
            or k <= 0
            or self.matrix.shape[1] != len(query.data)
        ):
            return []
        q = np.frombuffer(query.data, dtype=np.int8).astype(np.float32)
        sims = self.matrix @ q
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        cosines = sims[top].astype(np.float64) / (_SCALE * _SCALE)  # (as float(sims[i]) / scale would)
        return list(zip(self.ids[top].tolist(), cosines.tolist(), strict=True))


class CachedEmbedder(Embedder):
    """Passage vectors remembered in a SQLite file by (model, sha256 of the text), a text the model does not
    cover too: re-ingesting a document whose passages did not change embeds nothing. Queries go to the inner
    embedder (which remembers them)."""

    def __init__(self, inner: Embedder, path: str | Path) -> None:
        import sqlite3

        from .private_files import private_path

        self._inner = inner
        self.models = inner.models
        self._db = sqlite3.connect(str(private_path(path)), check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS model_vectors (model TEXT, digest BLOB, vector BLOB, "
            "PRIMARY KEY (model, digest))"
        )
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    def dimensions(self, model: str) -> int:
        return self._inner.dimensions(model)

    def models_for(self, text: str) -> tuple[str, ...]:
        return self._inner.models_for(text)

    def embed_query(self, text: str) -> Vector | None:
        return self._inner.embed_query(text)

    def embed_across(self, text: str) -> tuple[Vector, Vector] | None:
        return self._inner.embed_across(text)

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        out: list[list[Vector]] = [[] for _ in texts]
        assigned = [self._inner.models_for(t) for t in texts]
        for model in models if models is not None else self.models:
            mine = [i for i in range(len(texts)) if model in assigned[i]]
            for i, vectors in zip(mine, self._embed_one(model, [texts[i] for i in mine]), strict=True):
                out[i] += vectors
        return out

    def _embed_one(self, model: str, texts: list[str]) -> list[list[Vector]]:
        """`texts` (all assigned to `model`) by `model`: remembered ones from the file, the rest embedded."""
        digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in texts]
        out: list[list[Vector]] = [[] for _ in texts]
        if texts:
            known: dict[bytes, bytes | None] = {}
            with self._lock:
                for i in range(0, len(digests), 500):
                    chunk = digests[i : i + 500]
                    marks = ",".join("?" * len(chunk))
                    known.update(
                        self._db.execute(
                            f"SELECT digest, vector FROM model_vectors WHERE model=? AND digest IN ({marks})",
                            (model, *chunk),
                        ).fetchall()
                    )
            missing = sorted({d: i for i, d in enumerate(digests) if d not in known}.values())
            if missing:
                fresh = self._inner.embed_passages([texts[i] for i in missing], [model])
                rows = [
                    (model, digests[i], vs[0].data if vs else None)
                    for i, vs in zip(missing, fresh, strict=True)
                ]
                with self._lock:
                    self._db.executemany("INSERT OR REPLACE INTO model_vectors VALUES (?,?,?)", rows)
                known.update((digest, data) for _, digest, data in rows)
            for i, digest in enumerate(digests):
                data = known[digest]
                if data is not None:
                    out[i].append(Vector(model, data))
        return out
