"""Where a document's metadata comes from (SPEC §7, §8): a sidecar `<file>.metadata.json` beside a file, in
Amazon Bedrock Knowledge Bases' shape (`{"metadataAttributes": {…}}`), and `kb ingest --meta KEY=VALUE`.
This module parses both and combines them; what a valid metadata value is (§8: keys, types, sizes) is the
Document's own rule (`domain/filters.py`), checked once the combination is made. Pure: no I/O."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

SIDECAR_SUFFIX = ".metadata.json"  # as Bedrock names them: `A.txt` -> `A.txt.metadata.json`
MAX_SIDECAR_BYTES = 10 * 1024  # Bedrock's quota for one metadata file
# Bedrock's typed attribute form: {"value": {"type": "NUMBER", "numberValue": 3}, "includeForEmbedding": …}
_TYPED_VALUE_FIELDS = {
    "STRING": "stringValue",
    "NUMBER": "numberValue",
    "BOOLEAN": "booleanValue",
    "STRING_LIST": "stringListValue",
}
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class MetadataError(ValueError):
    """A sidecar or a `--meta` value that is not metadata; the message names what, never the file's text."""


def is_sidecar(name: str) -> bool:
    """A file (or object key) that carries another file's metadata: never a document itself."""
    return name.endswith(SIDECAR_SUFFIX)


def sidecar_name(name: str) -> str:
    """The sidecar of a file name, path or key (`manual.pdf` -> `manual.pdf.metadata.json`)."""
    return name + SIDECAR_SUFFIX


def parse_sidecar(data: bytes) -> dict[str, Any]:
    """The attributes of a sidecar's bytes: `{"metadataAttributes": {key: value}}`, each value plain
    (`"eu"`, `2024`, `true`, `["a", "b"]`) or in Bedrock's typed form. MetadataError otherwise (the
    values' own rules — key pattern, sizes — are checked on the combined metadata)."""
    if len(data) > MAX_SIDECAR_BYTES:
        raise MetadataError(f"sidecar: larger than {MAX_SIDECAR_BYTES} bytes")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise MetadataError("sidecar: not UTF-8 JSON") from None
    if not isinstance(parsed, dict) or set(parsed) != {"metadataAttributes"}:
        raise MetadataError('sidecar: must be {"metadataAttributes": {…}} and nothing else')
    attributes = parsed["metadataAttributes"]
    if not isinstance(attributes, dict):
        raise MetadataError("sidecar: metadataAttributes must be an object")
    return {key: _plain(key, value) for key, value in attributes.items()}


def _plain(key: str, value: Any) -> Any:
    """A sidecar value as plain JSON: Bedrock's typed form unwrapped, anything else as it is."""
    if not isinstance(value, dict):
        return value
    typed = value.get("value")
    if set(value) - {"value", "includeForEmbedding"} or not isinstance(typed, dict):
        raise MetadataError(f"sidecar: metadataAttributes.{key}: an object must be Bedrock's typed value")
    field = _TYPED_VALUE_FIELDS.get(str(typed.get("type")))
    if field is None or set(typed) != {"type", field}:
        raise MetadataError(f"sidecar: metadataAttributes.{key}.value: unknown type or missing {field}")
    return typed[field]


def parse_meta_flag(text: str) -> tuple[str, Any]:
    """One `--meta KEY=VALUE`: `true`/`false` are booleans, a JSON number is a number, `[…]` a JSON list
    and `"…"` a JSON string (to keep `"2024"` a string); anything else is the string as typed."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise MetadataError(f"{text!r}: expected KEY=VALUE")
    if raw in ("true", "false"):
        return key, raw == "true"
    if _JSON_NUMBER.fullmatch(raw):
        number = json.loads(raw)
        if isinstance(number, float) and not math.isfinite(number):
            raise MetadataError(f"{key}: a number must be finite")
        return key, number
    if raw.startswith(("[", '"')):
        try:
            return key, json.loads(raw)
        except ValueError:
            raise MetadataError(f"{key}: {raw[:1]}… is not valid JSON") from None
    return key, raw


def combine_metadata(sidecar: dict[str, Any] | None, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """A document's metadata from its sidecar and what was given with the request (`kb ingest --meta`,
    the job's or the document's `metadata`): key by key, the given value wins — an operator's explicit
    flag overrides a file, as command lines override configuration files. None when neither has any."""
    if not sidecar and not given:
        return None
    return {**(sidecar or {}), **(given or {})}


def metadata_origin_tag(sidecar_etag: str | None, given: dict[str, Any] | None) -> str | None:
    """What an S3 document records of where its metadata came from (`structured_source.metadata_origin`):
    a digest of its sidecar's ETag and of the metadata given with the job, so a listing tells a changed
    sidecar or changed `--meta` without reading anything. None when there is neither."""
    if not sidecar_etag and not given:
        return None
    canonical = json.dumps([sidecar_etag or "", given or {}], sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
