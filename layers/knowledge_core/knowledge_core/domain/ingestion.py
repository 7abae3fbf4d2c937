"""Ingestion jobs (I-INGEST): a job, its documents and their outcomes; the doc_id rule for files. Pure."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import PurePath, PurePosixPath
from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from .models import DOC_ID_PATTERN, Document, Model

# A document's identity; every other field it has is what is stored, compared on re-ingest.
_IDENTITY = {"source_key", "doc_id"}

# A document's outcome in a job. `queued` until a worker has handled it.
DocState = Literal["queued", "done", "unchanged", "failed"]
FINAL_STATES: tuple[DocState, ...] = ("done", "unchanged", "failed")
# Per-document error codes (typed; never the document's text or a library's message). `too_large`: over
# a size bound (input, decompressed, pages, output, memory); `too_complex`: markup nested too deep or too
# many elements; `timeout`: over the extraction time bound; `extraction_failed`: the extractor failed in
# any other way; `not_a_file`: the path is no longer a regular file (a symlink, FIFO, device, directory);
# `attempts_exhausted`: the document was begun MAX_DOCUMENT_ATTEMPTS times and never finished (a worker
# died on it each time); `invalid_metadata`: its sidecar is malformed, or its combined metadata breaks §8;
# `index_rejected`: the search index refused the document, written alone, as it is (retrying would not
# change it); `too_many_fields`: the search index's field limit is reached (one field per distinct
# metadata key and value type across the deployment: OpenSearch's `index.mapping.total_fields.limit`);
# `another_tenant`: a job that writes for one tenant (a directory, an S3 prefix) met a stored document of
# that doc_id belonging to another tenant (or to none), which it never changes; `doc_id_collision`: another
# file of the job maps to the same doc_id (`a/b.md` and `a-b.md`, `x.docx` and `x.html`): each fails;
# `doc_id_taken`: a document sent with `replace: false` whose doc_id a document of another file holds.
# `too_many_metadata_keys`: its new metadata keys would take its source or tenant past its metadata key
# quota (domain/metadata_quota.py), so nothing of it was written.
# `embedding_timeout`: embedding its passages, written alone, passed the embedding deadline (settings).
ErrorCode = Literal[
    "unsupported_format",
    "corrupt",
    "encrypted",
    "empty",
    "too_large",
    "invalid_document",
    "not_found",
    "too_complex",
    "timeout",
    "extraction_failed",
    "not_a_file",
    "attempts_exhausted",
    "access_denied",
    "invalid_metadata",
    "index_rejected",
    "too_many_fields",
    "another_tenant",
    "doc_id_collision",
    "doc_id_taken",
    "too_many_metadata_keys",
    "embedding_timeout",
]
ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)
JobState = Literal["queued", "running", "completed", "cancelled"]
FINISHED_JOB_STATES: tuple[JobState, ...] = ("completed", "cancelled")
MAX_DOCUMENT_ATTEMPTS = 3  # a document whose batch was begun this often and never recorded fails
# File suffixes a job extracts (SPEC §7); anything else is `unsupported_format`.
FORMATS: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
JOB_TTL_SECONDS = 30 * 86400


class _Payload(Model):
    """What every kind of job document carries beside its content (stored as JSON; `kind` tells which)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    acl: dict[str, Any] = Field(default_factory=dict)
    title: str | None = None
    structured_source: dict[str, Any] | None = None
    status: str = "ready"
    metadata: dict[str, Any] | None = None  # given with the request (a sidecar's is read with the file)
    replace: bool = True  # False: never replace a stored document that came from another file


class TextPayload(_Payload):
    """A text document sent inline (`body`): stored as it is."""

    kind: Literal["text"] = "text"
    title: str
    body: str


class UploadPayload(_Payload):
    """A file sent inline (its bytes base64): extracted by format."""

    kind: Literal["upload"] = "upload"
    filename: str
    content_base64: str


class DirectoryFilePayload(_Payload):
    """A file of a directory the service reads (`uri`: its path inside `root`, never this machine's)."""

    kind: Literal["directory"] = "directory"
    path: str
    uri: str
    root: str | None = None
    sidecar: str | None = None  # its `.metadata.json` beside it, inside `root` (read with the file)


class S3ObjectPayload(_Payload):
    """An object of an S3 prefix (`s3`: bucket, key, listing ETag and size; `uri`: s3://bucket/key)."""

    kind: Literal["s3"] = "s3"
    s3: dict[str, Any]
    uri: str
    sidecar: dict[str, Any] | None = None  # its `.metadata.json` as listed: key, etag, size


JobPayload = Annotated[
    TextPayload | UploadPayload | DirectoryFilePayload | S3ObjectPayload, Field(discriminator="kind")
]


@cache
def _payloads() -> TypeAdapter[JobPayload]:
    return TypeAdapter(JobPayload)  # built on first use, like the payload models


def job_payload(raw: dict[str, Any]) -> JobPayload:
    """A stored payload as its kind. Payloads written before `kind` existed are told apart by their keys,
    here and nowhere else. A payload of no kind raises pydantic's ValidationError."""
    if "kind" not in raw:
        legacy = (
            "text" if "body" in raw else "directory" if "path" in raw else "s3" if "s3" in raw else "upload"
        )
        raw = {**raw, "kind": legacy}
    return _payloads().validate_python(raw)


def known_payload(raw: dict[str, Any] | None) -> JobPayload | None:
    """`job_payload`, or None for a missing or malformed payload (the document then fails, typed, where it
    is made)."""
    try:
        return job_payload(raw) if raw else None
    except ValidationError:
        return None


def payload_json(payload: JobPayload) -> dict[str, Any]:
    """A payload as stored (JSON, with its `kind`)."""
    return payload.model_dump(mode="json", exclude_none=True)


@dataclass(frozen=True)
class JobDocument:
    """One document of a job: what to ingest (`payload`, JSON; dropped once handled) and its outcome."""

    seq: int
    doc_id: str
    payload: dict[str, Any] | None
    state: DocState = "queued"
    error: ErrorCode | None = None
    passages: int = 0
    attempts: int = 0  # batches begun with this document in them (a worker may die on one)


@dataclass(frozen=True)
class DocumentOutcome:
    seq: int
    state: DocState
    error: ErrorCode | None = None
    passages: int = 0


@dataclass(frozen=True)
class JobSpec:
    """How a job was asked for: inline documents, or a directory to read (and, with `sync`, to mirror:
    the documents under `prefix` that are not in the directory, of `tenant`, and written by a sync of
    this same origin, are deleted at the end; SPEC §7). `origin` names what is mirrored (the directory,
    or `s3://bucket/prefix`); None means the directory."""

    directory: str | None = None
    prefix: str = ""
    sync: bool = False
    tenant: str | None = None
    origin: str | None = None

    @property
    def sync_origin(self) -> str | None:
        return self.origin or self.directory


@dataclass(frozen=True)
class IngestionJob:
    job_id: str
    source_key: str
    created_at: float
    total: int
    spec: JobSpec = JobSpec()
    state: JobState = "queued"
    counts: dict[str, int] = field(default_factory=dict)  # queued, done, unchanged, failed, deleted
    passages: int = 0
    started_at: float | None = None
    updated_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    lease_until: float = 0.0
    cancel_requested: bool = False

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES


def initial_counts(documents: list[JobDocument]) -> dict[str, int]:
    counts = {"queued": 0, "done": 0, "unchanged": 0, "failed": 0, "deleted": 0}
    for doc in documents:
        counts[doc.state] += 1
    return counts


def fail_collisions(documents: list[JobDocument]) -> list[JobDocument]:
    """A job's documents with those sharing a doc_id (files whose names map to one id) failed
    `doc_id_collision`, each with its payload kept so its error names its file: one name clash never
    blocks the rest of a job, nor a sync's deletions, and neither file replaces the other."""
    shared = {doc_id for doc_id, n in Counter(d.doc_id for d in documents).items() if n > 1}
    return [
        replace(d, state="failed", error="doc_id_collision")
        if d.doc_id in shared and d.state == "queued"
        else d
        for d in documents
    ]


def outcome_deltas(outcomes: list[DocumentOutcome]) -> tuple[dict[str, int], int]:
    """What handling `outcomes` (all queued before) adds to a job's counters, and its passages."""
    deltas = {"queued": -len(outcomes), "done": 0, "unchanged": 0, "failed": 0}
    for outcome in outcomes:
        deltas[outcome.state] += 1
    return deltas, sum(o.passages for o in outcomes)


def file_format(name: str) -> str | None:
    return FORMATS.get(PurePath(name).suffix.lower())


def path_doc_id(name: str) -> str:
    """A file's doc_id: its name when that is a valid id, else a readable ASCII slug of it (transliterated:
    `阀门检修` -> `FaMenJianXiu`) plus a digest of the original, which keeps two names apart that read alike
    (a directory may hold `阀门.md` or `my notes.md`). The name is NFC-normalised first: one name spelt
    composed (`é`, as Linux and Windows write it) or decomposed (`e` + `◌́`, as macOS may) is one id."""
    from anyascii import anyascii  # a pure-Python table, loaded only when a name needs it

    name = unicodedata.normalize("NFC", name)
    if re.fullmatch(DOC_ID_PATTERN, name):
        return name
    slug = re.sub(r"[^A-Za-z0-9._:-]+", "-", anyascii(name)).strip("-._:")[:180]
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    return f"{slug}-{digest}" if slug else digest


def directory_doc_id(prefix: str, relative: PurePath) -> str:
    """The doc_id of a file inside a synced directory: the prefix, then its path without suffix. The id of
    the path is made on its own, so a file whose name is not a valid id (`阀门.md`) gets the same suffix
    under any prefix."""
    own = path_doc_id("-".join(relative.with_suffix("").parts))
    return path_doc_id(f"{prefix}-{own}") if prefix else own


def stored_unchanged(stored: Document | None, document: Document) -> bool:
    """A re-ingest is "unchanged" (skipped) only when everything stored is equal (SPEC §1): title, body,
    ACL, status and structured source, not only the revision (a tenant or ACL change is an update)."""
    return stored is not None and stored.model_dump(exclude=_IDENTITY) == document.model_dump(
        exclude=_IDENTITY
    )


def another_tenants_document(stored: Document | None, tenant: str | None) -> bool:
    """Whether a job writing for `tenant` (a directory's or an S3 prefix's; None: inline documents, each
    with its own ACL) would change a stored document that is not that tenant's: it never does."""
    return tenant is not None and stored is not None and stored.acl.tenant != tenant


def _file_name(document: Document) -> str | None:
    uri = (document.structured_source or {}).get("uri")
    return unicodedata.normalize("NFC", PurePosixPath(uri).name) if isinstance(uri, str) else None


def replaces_another_file(stored: Document | None, document: Document) -> bool:
    """Whether writing `document` replaces a stored document of its doc_id that came from another file
    (`empty.md` stored, `empty.txt` written: both `empty`): the file names of their uris differ, or one
    has none. The same file from another folder (`docs/a.md`, `old/a.md`) is the same file: an update."""
    return stored is not None and _file_name(stored) != _file_name(document)


def sync_origin_tag(origin: str) -> str:
    """What a sync records in each document it writes (`structured_source.sync_origin`): a digest of its
    origin, so the sweep can tell its own documents apart, and agents never see this machine's paths."""
    return "sha256:" + hashlib.sha256(origin.encode("utf-8")).hexdigest()


def written_by_sync(structured_source: dict[str, Any] | None, origin: str) -> bool:
    """Whether a stored document was written by a sync of `origin` (SPEC §7: only those are swept)."""
    return bool(structured_source) and structured_source.get("sync_origin") == sync_origin_tag(origin)  # type: ignore[union-attr]


def spec_json(spec: JobSpec) -> str:
    """A job's spec as the job stores keep it (every field; old rows without the new ones still load)."""
    return json.dumps(
        {
            "directory": spec.directory,
            "prefix": spec.prefix,
            "sync": spec.sync,
            "tenant": spec.tenant,
            "origin": spec.origin,
        }
    )


def encode_payload(payload: dict[str, Any] | None) -> bytes | None:
    """A job document's payload as stored: compact JSON, zlib-compressed (bodies can be large)."""
    if payload is None:
        return None
    return zlib.compress(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def decode_payload(blob: bytes | None) -> dict[str, Any] | None:
    return json.loads(zlib.decompress(blob)) if blob is not None else None
