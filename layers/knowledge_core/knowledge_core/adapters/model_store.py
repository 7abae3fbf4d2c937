"""The embed function's models from an S3 prefix (SPEC §0): they do not fit a Lambda layer beside their
runtime (docs/ranking.md, "On Lambda"), so the directory `kb models fetch` fills is copied under a prefix
once per deployment and each embed instance copies it into its /tmp at its cold start. The files are checked
against the digests each model.json records when the models are checked (OnnxEmbedder.check)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ..domain.s3_source import parse_s3_uri
from ..ports import ObjectStore

MAX_OBJECTS = 200
MAX_OBJECT_BYTES = 1 << 30


def fetch_models(store: ObjectStore, uri: str, dest: str | Path) -> Path:
    """Copy the objects under `uri` (s3://bucket/prefix/) into `dest`, keeping their paths below the
    prefix; a file already there with the object's size is kept (a warm instance copies nothing)."""
    location = parse_s3_uri(uri, field="KB_EMBED_MODELS_S3_URI")
    root = Path(dest)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for obj in store.list_objects(location.bucket, location.prefix, MAX_OBJECTS):
        relative = obj.key[len(location.prefix) :].lstrip("/")
        parts = relative.split("/")
        if not relative or relative.endswith("/") or any(p in ("", ".", "..") for p in parts):
            continue  # a folder marker, or a key that would leave dest
        path = root.joinpath(*parts)
        if path.is_file() and path.stat().st_size == obj.size:
            continue
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data, _ = store.get_object(location.bucket, obj.key, MAX_OBJECT_BYTES)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    return root
