"""An S3 prefix as an ingestion origin (I-INGEST): its `s3://bucket/prefix` form, which keys under it are
documents (not sidecars, not "folders"), and the doc_id of each. Pure: no boto3, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from .errors import InvalidRequest
from .ingestion import directory_doc_id

# Bucket names as S3 allows them today (3-63 chars, lower case, digits, dots, hyphens).
BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
SIDECAR_SUFFIX = ".metadata.json"  # Amazon Bedrock Knowledge Bases' metadata files: never documents
MAX_KEY_CHARS = 1024
# An object larger than this is a `too_large` document before it is read (PDFs are big; bodies ≤ 5 MiB).
MAX_OBJECT_BYTES = 50 * 1024 * 1024
# More objects under one prefix than a job takes (a job's documents are stored when it is submitted).
MAX_PREFIX_OBJECTS = 20_000

# Why the object store refused: typed, never the store's own message (it can quote keys of other prefixes).
ObjectStoreErrorCode = Literal[
    "bucket_not_found", "access_denied", "no_credentials", "unavailable", "not_found", "too_large"
]


class ObjectStoreError(Exception):
    """An object store call failed for a reason worth a typed answer (ObjectStoreErrorCode)."""

    def __init__(self, code: ObjectStoreErrorCode) -> None:
        super().__init__(code)
        self.code: ObjectStoreErrorCode = code


@dataclass(frozen=True)
class StoredObject:
    """One object as a listing shows it: what a sync compares before it reads anything."""

    key: str
    etag: str
    size: int


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix inside it ("" = the whole bucket)."""

    bucket: str
    prefix: str = ""

    @property
    def uri(self) -> str:
        """The origin string of a sync (SPEC §7: `s3://bucket/prefix`)."""
        return f"s3://{self.bucket}/{self.prefix}"

    def object_uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def contains(self, key: str) -> bool:
        return key.startswith(self.prefix)

    def within(self, other: S3Location) -> bool:
        """True when every key of this location is also under `other` (the same bucket, a longer prefix)."""
        return self.bucket == other.bucket and self.prefix.startswith(other.prefix)


def parse_s3_uri(uri: str, field: str = "s3_uri") -> S3Location:
    """`s3://bucket/prefix` -> S3Location; InvalidRequest naming `field` when it is not one."""
    match = re.fullmatch(r"s3://([^/]+)(?:/(.*))?", uri, flags=re.DOTALL)
    if match is None:
        raise InvalidRequest(f"{field}: must look like s3://bucket/prefix/", field=field)
    bucket, prefix = match.group(1), match.group(2) or ""
    if not BUCKET_PATTERN.fullmatch(bucket) or ".." in bucket:
        raise InvalidRequest(f"{field}: not a valid bucket name", field=field)
    if len(prefix) > MAX_KEY_CHARS or any(ord(c) < 32 for c in prefix):
        raise InvalidRequest(f"{field}: not a valid key prefix", field=field)
    return S3Location(bucket, prefix)


def is_document_key(location: S3Location, key: str) -> bool:
    """A key under the location that stands for a document: not a sidecar, not a folder marker, no part
    hidden (like a directory's dot files), not the prefix itself."""
    if not location.contains(key) or key.endswith("/") or key.endswith(SIDECAR_SUFFIX):
        return False
    relative = key[len(location.prefix) :].lstrip("/")
    if not relative:
        return False
    return not any(part.startswith(".") for part in PurePosixPath(relative).parts)


def object_doc_id(location: S3Location, doc_id_prefix: str, key: str) -> str:
    """The doc_id of an object: as for a file of a synced directory, its key relative to the prefix."""
    relative = key[len(location.prefix) :].lstrip("/")
    return directory_doc_id(doc_id_prefix, PurePosixPath(relative))


def sidecar_key(key: str) -> str:
    return key + SIDECAR_SUFFIX


# --- object events (AWS): what reaches the ingestion queue besides job ids ----------------------------------

SYNC_MESSAGE = {"s3_sync": True}  # the scheduled full sync's message (template.yaml: S3FullSyncRule)


@dataclass(frozen=True)
class ObjectEvent:
    """An object created (with its ETag and size) or removed, as S3 reports it."""

    kind: Literal["created", "removed"]
    bucket: str
    key: str
    etag: str = ""
    size: int = 0


def object_events(message: dict[str, Any]) -> list[ObjectEvent] | None:
    """The object events of a queue message — S3 through EventBridge (`detail-type` "Object Created" /
    "Object Deleted", plain keys) or S3's own notifications (`Records`, URL-encoded keys; the test event
    has none) — or None when the message is neither."""
    from urllib.parse import unquote_plus

    if message.get("source") == "aws.s3" and isinstance(message.get("detail"), dict):
        kind = {"Object Created": "created", "Object Deleted": "removed"}.get(str(message.get("detail-type")))
        detail = message["detail"]
        obj, bucket = detail.get("object") or {}, (detail.get("bucket") or {}).get("name")
        if kind is None or not bucket or not isinstance(obj.get("key"), str):
            return []
        return [_event(kind, bucket, obj["key"], obj.get("etag"), obj.get("size"))]
    if message.get("Event") == "s3:TestEvent":
        return []
    records = message.get("Records")
    if not isinstance(records, list):
        return None
    events = []
    for record in records:
        s3 = record.get("s3") if isinstance(record, dict) else None
        name = str(record.get("eventName", "")) if isinstance(record, dict) else ""
        if record.get("eventSource") != "aws:s3" or not isinstance(s3, dict) or ":" not in name:
            continue
        kind = (
            "created"
            if name.startswith("ObjectCreated")
            else "removed"
            if name.startswith("ObjectRemoved")
            else None
        )
        obj, bucket = s3.get("object") or {}, (s3.get("bucket") or {}).get("name")
        if kind and bucket and isinstance(obj.get("key"), str):
            events.append(_event(kind, bucket, unquote_plus(obj["key"]), obj.get("eTag"), obj.get("size")))
    return events


def _event(kind: str, bucket: str, key: str, etag: object, size: object) -> ObjectEvent:
    return ObjectEvent(
        "created" if kind == "created" else "removed",
        bucket,
        key,
        str(etag or "").strip('"'),
        int(size) if isinstance(size, int) else 0,
    )
