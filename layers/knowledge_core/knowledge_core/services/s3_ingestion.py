"""An S3 prefix as the origin of an ingestion job (I-INGEST): which prefixes a deployment may read, the
job documents a listing becomes, the skip of an object whose ETag and size a stored document already has,
and reading an object for extraction. The job itself (lease, batches, outcomes, the sync sweep) is the
directory job's: IngestionService calls in here only where an S3 object differs from a file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.errors import (
    Forbidden,
    InvalidRequest,
    KnowledgeError,
    KnowledgeUnavailable,
    NotFound,
    SourceFailure,
)
from ..domain.ingestion import ErrorCode, JobDocument, S3ObjectPayload, file_format, payload_json
from ..domain.metadata_sources import (
    MAX_SIDECAR_BYTES,
    MetadataError,
    is_sidecar,
    metadata_origin_tag,
    parse_sidecar,
    sidecar_name,
)
from ..domain.models import Document, DocumentAcl
from ..domain.s3_source import (
    MAX_OBJECT_BYTES,
    MAX_PREFIX_OBJECTS,
    ObjectStoreError,
    S3Location,
    StoredObject,
    is_document_key,
    object_doc_id,
    parse_s3_uri,
)
from ..extraction import ExtractionError
from ..ports import ObjectStore

# A listing's failure -> the job's typed refusal (the store's own message is never passed on).
_JOB_ERRORS: dict[str, Callable[[], KnowledgeError]] = {
    "bucket_not_found": lambda: NotFound("s3_uri: the bucket does not exist", field="s3_uri"),
    "access_denied": lambda: Forbidden("s3_uri: access to the prefix is denied", field="s3_uri"),
    "no_credentials": lambda: Forbidden("s3_uri: no valid credentials for S3", field="s3_uri"),
}
# An object's read failure -> its per-document error (`unavailable` is no error: the job tries again).
_DOCUMENT_ERRORS: dict[str, ErrorCode] = {
    "not_found": "not_found",
    "too_large": "too_large",
    "access_denied": "access_denied",
    "no_credentials": "access_denied",
    "bucket_not_found": "not_found",
}


class S3Origin:
    """What IngestionService needs to take an `s3_uri` job: the store and the prefixes it may read —
    any (`kb serve`, whose admin API answers on loopback only) or those under `allowed` (AWS: the bucket
    and prefix the template grants the worker, nothing else)."""

    def __init__(self, store: ObjectStore, *, allow_any: bool = False, allowed: S3Location | None = None):
        self._store = store
        self._allow_any = allow_any
        self._allowed = allowed

    def location(self, uri: str) -> S3Location:
        location = parse_s3_uri(uri)
        if self._allow_any:
            return location
        if self._allowed is None:
            raise InvalidRequest("s3_uri: not available on this deployment", field="s3_uri")
        if not location.within(self._allowed):
            raise Forbidden(f"s3_uri: outside {self._allowed.uri}", field="s3_uri")
        return location

    def job_documents(
        self,
        location: S3Location,
        doc_id_prefix: str,
        acl: DocumentAcl,
        metadata: dict[str, Any] | None = None,
    ) -> list[JobDocument]:
        """The prefix's objects as job documents, in key order (what is read, and compared, later is the
        listing's ETag and size). Sidecars (`.metadata.json`) are not documents."""
        return self.documents(location, doc_id_prefix, acl, self._list(location), metadata)

    @staticmethod
    def documents(
        location: S3Location,
        doc_id_prefix: str,
        acl: DocumentAcl,
        listed: list[StoredObject],
        metadata: dict[str, Any] | None = None,
    ) -> list[JobDocument]:
        """Listed (or notified) objects as job documents: the document keys only, in the order given,
        each with its sidecar when that is listed too."""
        objects = [o for o in listed if is_document_key(location, o.key)]
        sidecars = {o.key: o for o in listed if is_sidecar(o.key)}
        acl_json = acl.model_dump(mode="json")
        return [
            JobDocument(
                seq,
                object_doc_id(location, doc_id_prefix, obj.key),
                payload_json(
                    S3ObjectPayload(
                        s3={"bucket": location.bucket, "key": obj.key, "etag": obj.etag, "size": obj.size},
                        uri=location.object_uri(obj.key),
                        acl=acl_json,
                        metadata=metadata,
                        sidecar=_listed(sidecars.get(sidecar_name(obj.key))),
                    )
                ),
            )
            for seq, obj in enumerate(objects)
        ]

    def _list(self, location: S3Location) -> list[StoredObject]:
        try:
            objects = self._store.list_objects(location.bucket, location.prefix, MAX_PREFIX_OBJECTS)
        except ObjectStoreError as exc:
            make = _JOB_ERRORS.get(exc.code)
            raise (make() if make else KnowledgeUnavailable("s3_uri: S3 is unavailable")) from None
        if not objects:
            # A sync of an empty listing would delete everything it made before: a typo is not "empty".
            raise NotFound("s3_uri: no objects under the prefix", field="s3_uri")
        if len(objects) > MAX_PREFIX_OBJECTS:
            raise InvalidRequest(f"s3_uri: more than {MAX_PREFIX_OBJECTS} objects", field="s3_uri")
        return objects

    @staticmethod
    def unchanged(stored: Document | None, payload: S3ObjectPayload, sync_tag: str | None = None) -> bool:
        """True when the stored document came from this very object (uri, ETag, size) with the same ACL,
        is ready and carries the sync mark this job would give it (`sync_tag`): equal ETag and size mean
        equal bytes, so nothing needs reading (SPEC §1's stored-equality rule then holds: title, body
        and structure come from those bytes; metadata from the sidecar's ETag and the job's `metadata`,
        whose digest the document records as `metadata_origin`)."""
        if stored is None or stored.status != "ready":
            return False
        source = stored.structured_source or {}
        if source.get("sync_origin") != sync_tag:
            return False
        s3 = payload.s3
        same_object = (
            source.get("uri") == payload.uri
            and source.get("etag") == s3["etag"]
            and source.get("size") == s3["size"]
            and bool(s3["etag"])
        )
        same_metadata = source.get("metadata_origin") == _listed_origin(payload)
        return same_object and same_metadata and stored.acl == DocumentAcl.model_validate(payload.acl)

    def head(self, bucket: str, key: str) -> StoredObject | None:
        """The object as it is now (ETag, size), or None; S3 unavailable is SourceFailure (retried)."""
        try:
            return self._store.head_object(bucket, key)
        except ObjectStoreError as exc:
            raise SourceFailure("unavailable", f"S3 head failed: {exc.code}") from None

    def exists(self, bucket: str, key: str) -> bool:
        """Whether the object is there now; S3 unavailable is SourceFailure (the message is retried)."""
        try:
            return self._store.head_object(bucket, key) is not None
        except ObjectStoreError as exc:
            raise SourceFailure("unavailable", f"S3 head failed: {exc.code}") from None

    def read(self, payload: S3ObjectPayload) -> tuple[str, bytes, dict[str, object]]:
        """The object's name (its key), bytes, and what its document's structured_source records.
        ExtractionError for a per-document failure; SourceFailure when S3 is unavailable (the job
        waits and resumes, like a search backend that is down)."""
        s3 = payload.s3
        if file_format(s3["key"]) is None:  # never read an object the job cannot take
            raise ExtractionError("unsupported_format")
        if s3["size"] > MAX_OBJECT_BYTES:  # nor one too large to hold (before any byte arrives)
            raise ExtractionError("too_large")
        try:
            data, etag = self._store.get_object(s3["bucket"], s3["key"], MAX_OBJECT_BYTES)
        except ObjectStoreError as exc:
            code = _DOCUMENT_ERRORS.get(exc.code)
            if code is None:
                raise SourceFailure("unavailable", "S3 read failed") from None
            raise ExtractionError(code) from None
        # The ETag of the bytes read (the object may have changed since it was listed).
        return s3["key"], data, {"uri": payload.uri, "etag": etag or s3["etag"], "size": len(data)}

    def read_sidecar(self, payload: S3ObjectPayload) -> tuple[dict[str, Any] | None, str | None]:
        """The object's sidecar attributes (None without one, or when it was removed since the listing)
        and the `metadata_origin` its document records. ExtractionError("invalid_metadata") for a sidecar
        that is not one; SourceFailure when S3 is unavailable."""
        listed = payload.sidecar
        if listed is None:
            return None, metadata_origin_tag(None, payload.metadata)
        try:
            data, etag = self._store.get_object(payload.s3["bucket"], listed["key"], MAX_SIDECAR_BYTES)
        except ObjectStoreError as exc:
            if exc.code == "not_found":
                return None, metadata_origin_tag(None, payload.metadata)
            code = _DOCUMENT_ERRORS.get(exc.code)
            if code is None:
                raise SourceFailure("unavailable", "S3 read failed") from None
            raise ExtractionError(
                "access_denied" if code == "access_denied" else "invalid_metadata"
            ) from None
        try:
            attributes = parse_sidecar(data)
        except MetadataError:
            raise ExtractionError("invalid_metadata") from None
        return attributes, metadata_origin_tag(etag or listed["etag"], payload.metadata)


def _listed(sidecar: StoredObject | None) -> dict[str, Any] | None:
    return {"key": sidecar.key, "etag": sidecar.etag, "size": sidecar.size} if sidecar else None


def _listed_origin(payload: S3ObjectPayload) -> str | None:
    """The `metadata_origin` a document of this listing would record (the sidecar's listed ETag)."""
    return metadata_origin_tag((payload.sidecar or {}).get("etag"), payload.metadata)
