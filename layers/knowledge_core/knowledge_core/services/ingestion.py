"""Ingestion jobs (I-INGEST): accept a batch of documents or a directory at once, then work it through
under a lease — extract, skip unchanged content, write each batch whole, record outcomes, and for a sync
delete the documents that left the directory (only those a sync of that origin wrote for that tenant).
Plain Python: the admin function submits, reports and cancels, the worker (an SQS-triggered function on
AWS, a thread of `kb serve`) calls `work`; extraction itself runs where the container puts it (a
resource-limited child process, `extraction_sandbox`), and nothing it raises stops the job."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..domain.admin_wire import (
    IngestionJobRequest,
    JobAccepted,
    JobCounts,
    JobDocumentError,
    JobDocumentRequest,
    JobList,
    JobStatus,
)
from ..domain.errors import Forbidden, InvalidRequest, NotFound, SourceFailure
from ..domain.ingestion import (
    MAX_DOCUMENT_ATTEMPTS,
    DirectoryFilePayload,
    DocumentOutcome,
    ErrorCode,
    IngestionJob,
    JobDocument,
    JobSpec,
    S3ObjectPayload,
    TextPayload,
    UploadPayload,
    another_tenants_document,
    directory_doc_id,
    encode_payload,
    fail_collisions,
    file_format,
    job_payload,
    known_payload,
    payload_json,
    replaces_another_file,
    stored_unchanged,
    sync_origin_tag,
    written_by_sync,
)
from ..domain.metadata_quota import MetadataQuota, metadata_quota_refusals
from ..domain.metadata_sources import combine_metadata
from ..domain.models import MAX_BODY_BYTES, Document, DocumentAcl
from ..domain.passages import Passage, document_passages
from ..extraction import DEFAULT_LIMITS, Extracted, ExtractionError, extract, typed_failures
from ..local_files import read_regular_file
from ..ports import Clock, JobQueue, JobStore, Registry, SearchBackend
from .metadata_sidecars import directory_sidecar, sidecar_of, split_sidecars

if TYPE_CHECKING:
    from .s3_ingestion import S3Origin

BATCH_DOCUMENTS = 50  # one atomic write (SearchBackend.put_documents) per batch
BATCH_BODY_CHARS = 4_000_000
LEASE_SECONDS = 15.0
MAX_ERRORS_SHOWN = 100
MAX_DIRECTORY_FILES = 10_000
BACKEND_RETRY_SECONDS = 30
Extractor = Callable[[str, bytes], Extracted]

logger = logging.getLogger(__name__)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _file_of(payload: UploadPayload | DirectoryFilePayload) -> tuple[str, bytes]:
    """A job document's file name and bytes: read from its directory without following links (never a
    file the job cannot take), or decoded from the request."""
    if isinstance(payload, DirectoryFilePayload):
        path = PurePath(payload.path)
        if file_format(path.name) is None:
            raise ExtractionError("unsupported_format")
        uri = payload.uri or path.name
        root = payload.root or str(path.parents[len(PurePath(uri).parts) - 1])
        return path.name, read_regular_file(root, uri, DEFAULT_LIMITS.max_input_bytes)
    try:
        return payload.filename, base64.b64decode(payload.content_base64, validate=True)
    except (binascii.Error, ValueError):
        raise ExtractionError("corrupt") from None


def _uri(document: JobDocument) -> str | None:
    """Where a failed document came from (never this machine's path: a directory's is relative)."""
    payload = known_payload(document.payload)
    if payload is None:
        return None
    uri = getattr(payload, "uri", None) or (payload.structured_source or {}).get("uri")
    return uri if isinstance(uri, str) else None


class IngestionService:
    def __init__(
        self,
        registry: Registry,
        jobs: JobStore,
        backend: SearchBackend,
        clock: Clock,
        queue: JobQueue | None = None,
        *,
        allow_directories: bool = False,
        directory_roots: tuple[str, ...] = (),
        lease_s: float = LEASE_SECONDS,
        extractor: Extractor | None = None,
        s3: S3Origin | None = None,
        compact_after_jobs: bool = True,
        metadata_quota: MetadataQuota | None = None,
    ) -> None:
        self._registry = registry
        self._jobs = jobs
        self._backend = backend
        self._clock = clock
        self._queue = queue
        self._allow_directories = allow_directories
        self._directory_roots = directory_roots
        self._lease_s = lease_s
        self._extract: Extractor = extractor or extract
        self._s3 = s3
        self._compact_after_jobs = compact_after_jobs  # KB_SEARCH_COMPACTION=manual: an operator's alone
        self._metadata_quota = metadata_quota or MetadataQuota()

    # --- admin API ------------------------------------------------------------------------------------
    def submit(self, source_key: str, request: IngestionJobRequest) -> JobAccepted:
        if self._registry.get_sources([source_key]).get(source_key) is None:
            raise NotFound(f"source {source_key} is not published", field="source")
        if request.documents is not None:
            documents = [self._inline(i, d, request.doc_id_prefix) for i, d in enumerate(request.documents)]
            spec = JobSpec()
        elif request.s3_uri is not None:
            documents, spec = self._s3_prefix(request)
        else:
            assert request.directory is not None and request.acl is not None
            if request.sync and not request.doc_id_prefix:
                # SPEC §7: an empty prefix would make every document of the source the sync's to delete.
                raise InvalidRequest("doc_id_prefix: required with sync (non-empty)", field="doc_id_prefix")
            acl = request.acl.to_acl()
            documents = self._directory(request.directory, request.doc_id_prefix, acl, request.metadata)
            spec = JobSpec(
                directory=request.directory,
                prefix=request.doc_id_prefix,
                sync=request.sync,
                tenant=acl.tenant,
                origin=request.directory,
            )
        if request.documents is not None:
            _refuse_repeated_ids(request.documents, documents)
        return self.create(source_key, documents, spec)

    def create(self, source_key: str, documents: list[JobDocument], spec: JobSpec) -> JobAccepted:
        """Store a job of ready-made documents and wake a worker (also S3 object events' single jobs)."""
        if self._registry.get_sources([source_key]).get(source_key) is None:
            raise NotFound(f"source {source_key} is not published", field="source")
        documents = fail_collisions(documents)  # a directory's or a prefix's name clash fails its files alone
        job = IngestionJob(
            job_id=str(uuid.uuid4()),
            source_key=source_key,
            created_at=self._clock.now(),
            total=len(documents),
            spec=spec,
        )
        self._jobs.create_job(job, documents)
        if self._queue is not None:
            self._queue.enqueue(job.job_id)
        return JobAccepted(job_id=job.job_id, source=source_key, state="queued", total=len(documents))

    def _sized(self, document: JobDocument) -> JobDocument:
        """A payload larger than the job store can hold fails at once (`too_large`)."""
        limit = self._jobs.max_payload_bytes
        if limit is not None and document.payload and len(encode_payload(document.payload) or b"") > limit:
            return JobDocument(document.seq, document.doc_id, None, "failed", "too_large")
        return document

    def _inline(self, seq: int, request: JobDocumentRequest, prefix: str) -> JobDocument:
        """A body over the 5 MiB limit fails here, at submit, not after a worker has queued it. A file sent
        without a doc_id gets the one its name gives under `prefix` (as a directory's file would)."""
        doc_id = request.doc_id
        if doc_id is None:
            assert request.filename is not None  # JobDocumentRequest: a doc_id is left out for files only
            doc_id = directory_doc_id(prefix, PurePath(request.filename))
        if request.body is not None and len(request.body.encode("utf-8")) > MAX_BODY_BYTES:
            return JobDocument(seq, doc_id, None, "failed", "too_large")
        fields = request.model_dump(mode="json", exclude_none=True, exclude={"doc_id"})
        payload = job_payload({**fields, "kind": "text" if request.body is not None else "upload"})
        return self._sized(JobDocument(seq, doc_id, payload_json(payload)))

    def _directory(
        self, directory: str, prefix: str, acl: DocumentAcl, metadata: dict[str, Any] | None = None
    ) -> list[JobDocument]:
        if not self._allow_directories:
            raise InvalidRequest("directory: not available on this deployment", field="directory")
        root = Path(directory)
        if not root.is_absolute() or not root.is_dir():
            raise InvalidRequest("directory: must be an absolute path to a directory", field="directory")
        if not within_roots(root, self._directory_roots):
            raise Forbidden(
                "directory: not under a directory this service may read (kb serve --ingest-root DIR)",
                field="directory",
            )
        found: list[Path] = []
        for p in root.rglob("*"):  # lazy: a huge tree is refused as soon as it passes the bound
            if p.is_symlink() or not p.is_file():
                continue
            if any(part.startswith(".") for part in p.relative_to(root).parts):
                continue
            found.append(p)
            if len(found) > MAX_DIRECTORY_FILES:
                raise InvalidRequest(f"directory: more than {MAX_DIRECTORY_FILES} files", field="directory")
        files, sidecars = split_sidecars(sorted(found))  # sidecars are not documents (SPEC §7)
        acl_json = acl.model_dump(mode="json")
        # The uri is the path inside the directory: never this machine's absolute path (agents see it).
        return [
            JobDocument(
                seq,
                directory_doc_id(prefix, PurePath(p.relative_to(root))),
                payload_json(
                    DirectoryFilePayload(
                        path=str(p),
                        root=str(root),
                        uri=p.relative_to(root).as_posix(),
                        acl=acl_json,
                        metadata=metadata,
                        sidecar=_relative(sidecar_of(p, sidecars), root),
                    )
                ),
            )
            for seq, p in enumerate(files)
        ]

    def _s3_prefix(self, request: IngestionJobRequest) -> tuple[list[JobDocument], JobSpec]:
        """An S3 prefix's objects as the job's documents; the job's origin is `s3://bucket/prefix`."""
        if self._s3 is None:
            raise InvalidRequest("s3_uri: not available on this deployment", field="s3_uri")
        assert request.s3_uri is not None and request.acl is not None
        if request.sync and not request.doc_id_prefix:  # SPEC §7, as for a directory
            raise InvalidRequest("doc_id_prefix: required with sync (non-empty)", field="doc_id_prefix")
        location = self._s3.location(request.s3_uri)
        acl = request.acl.to_acl()
        documents = self._s3.job_documents(location, request.doc_id_prefix, acl, request.metadata)
        prefix, sync = request.doc_id_prefix, request.sync
        return documents, JobSpec(prefix=prefix, sync=sync, tenant=acl.tenant, origin=location.uri)

    def _job(self, source_key: str, job_id: str) -> IngestionJob:
        job = self._jobs.get_job(job_id)
        if job is None or job.source_key != source_key:
            raise NotFound("ingestion job not found", field="job_id")
        return job

    def _status(self, job: IngestionJob) -> JobStatus:
        errors = [
            JobDocumentError(doc_id=d.doc_id, code=d.error or "failed", uri=_uri(d))
            for d in self._jobs.job_documents(job.job_id, state="failed", limit=MAX_ERRORS_SHOWN + 1)
        ]
        return JobStatus(
            job_id=job.job_id,
            source=job.source_key,
            state=job.state,
            total=job.total,
            counts=JobCounts(
                **{k: job.count(k) for k in ("queued", "done", "unchanged", "failed", "deleted")}
            ),
            passages=job.passages,
            errors=errors[:MAX_ERRORS_SHOWN],
            errors_truncated=len(errors) > MAX_ERRORS_SHOWN,
            sync=job.spec.sync,
            cancel_requested=job.cancel_requested,
            created_at=_iso(job.created_at) or "",
            started_at=_iso(job.started_at),
            updated_at=_iso(job.updated_at),
            finished_at=_iso(job.finished_at),
        )

    def status(self, source_key: str, job_id: str) -> JobStatus:
        return self._status(self._job(source_key, job_id))

    def cancel(self, source_key: str, job_id: str) -> JobStatus:
        """Stop a job after the batch it is on (at once when no worker holds it): state `cancelled`,
        counts kept, a sync's sweep not run. A finished job is answered as it is."""
        self._job(source_key, job_id)
        job = self._jobs.cancel_job(job_id, self._clock.now())
        if job is None:
            raise NotFound("ingestion job not found", field="job_id")
        return self._status(job)

    def list_jobs(self, source_key: str, limit: int = 20) -> JobList:
        return JobList(
            source=source_key, jobs=[self._status(j) for j in self._jobs.list_jobs(source_key, limit)]
        )

    # --- the worker -----------------------------------------------------------------------------------
    def work(self, worker: str, *, job_id: str | None = None, deadline: float | None = None) -> str | None:
        """Claim one job (`job_id`, or the oldest with a free lease) and work it until it completes, the
        lease is lost, the search backend fails transiently (the job waits BACKEND_RETRY_SECONDS) or
        `deadline` (clock time) passes (released too). The job id worked on, or None when nothing was
        claimed. With a queue, a job left unfinished is queued again (after a pause when the backend
        failed). A write the backend rejects (SourceFailure `rejected`) is raised: the attempt counts,
        so its batch is retried a document at a time and the one it refuses ends `attempts_exhausted`."""
        job = self._jobs.claim_job(worker, self._clock.now(), self._lease_s, job_id)
        if job is None:
            return None
        delay = 0
        with self._heartbeat(job.job_id, worker):
            try:
                finished = self._work(job, worker, deadline)
            except SourceFailure as exc:
                if not exc.transient:
                    raise
                finished, delay = False, BACKEND_RETRY_SECONDS
        if delay:
            # The search backend is down: hold the (idle) lease a while, so no worker retries at once.
            self._jobs.renew_lease(job.job_id, worker, self._clock.now(), BACKEND_RETRY_SECONDS)
        if not finished and self._queue is not None:
            self._queue.enqueue(job.job_id, delay)
        return job.job_id

    def work_message(self, worker: str, job_id: str, deadline: float) -> None:
        """A queue message for `job_id` (the AWS worker). When another worker holds the job, look again
        once its lease would have run out: if that worker died, nothing else would resume the job."""
        if self.work(worker, job_id=job_id, deadline=deadline) is not None:
            return
        job = self._jobs.get_job(job_id)
        if job is not None and job.state != "completed" and self._queue is not None:
            self._queue.enqueue(job_id, int(self._lease_s) + 1)

    def _work(self, job: IngestionJob, worker: str, deadline: float | None) -> bool:
        after = -1
        while True:
            if deadline is not None and self._clock.now() > deadline:
                self._jobs.release_job(job.job_id, worker)
                return False
            if self._cancelled(job.job_id):
                self._jobs.finish_job(job.job_id, worker, self._clock.now(), state="cancelled")
                return True
            queued = self._next_batch(job.job_id, after)
            if not queued:
                break
            seqs = [d.seq for d in queued]
            if not self._jobs.begin_documents(job.job_id, worker, seqs):
                return True  # another worker holds the job now: it carries on
            try:
                outcomes, writes = self._prepare(job, queued, deadline)
                if writes:
                    outcomes = self._write(writes, outcomes)
            except SourceFailure as exc:
                if exc.transient:  # the backend down or throttled: not these documents' fault, no attempt
                    self._jobs.begin_documents(job.job_id, worker, seqs, delta=-1)
                raise
            if not self._jobs.record_outcomes(job.job_id, worker, outcomes, self._clock.now(), self._lease_s):
                return True
            after = outcomes[-1].seq  # a batch cut short by its size leaves the rest for the next round
        deleted = self._sweep(job) if job.spec.sync else 0
        self._jobs.finish_job(job.job_id, worker, self._clock.now(), deleted)
        self._compact()
        return True

    def _write(self, writes: list[Document], outcomes: list[DocumentOutcome]) -> list[DocumentOutcome]:
        """Write a batch's documents. A refusal of a batch of several is raised (the attempt counts: each is
        then written alone); a document written alone that the backend refuses as it is fails at once with
        the refusal's typed code (`too_many_fields`, else `index_rejected`), retried no more. A document
        past its metadata key quota fails `too_many_metadata_keys` before anything is written."""
        refused = metadata_quota_refusals(writes, self._metadata_quota, self._backend.metadata_keys)
        if refused:
            logger.warning("%d document(s) refused: past the metadata key quota", len(refused))
            done = [i for i, o in enumerate(outcomes) if o.state == "done"]  # one per write, in order
            outcomes = list(outcomes)
            for j in refused:
                outcomes[done[j]] = replace(
                    outcomes[done[j]], state="failed", error="too_many_metadata_keys", passages=0
                )
            writes = [w for j, w in enumerate(writes) if j not in refused]
            if not writes:
                return outcomes
        try:
            self._backend.put_documents(writes)
        except SourceFailure as exc:
            if exc.transient or len(writes) > 1:
                raise
            known: dict[str | None, ErrorCode] = {
                "too_many_fields": "too_many_fields",
                "embedding_timeout": "embedding_timeout",
            }
            code = known.get(exc.cause, "index_rejected")
            logger.warning("a document was refused by the search index: %s", code)
            return [
                replace(o, state="failed", error=code, passages=0) if o.state == "done" else o
                for o in outcomes
            ]
        return outcomes

    def _compact(self) -> None:
        """A job's writes are done: the search backend merges its index's segments in the background when
        they are fragmented (`domain.segments`), so searches stay fast as the corpus grows. A failure here
        never fails the finished job: the next job's end checks again."""
        if not self._compact_after_jobs:
            return
        try:
            self._backend.compact()
        except SourceFailure as exc:
            logger.warning("search index not compacted after a job: %s", exc.kind)

    def _cancelled(self, job_id: str) -> bool:
        current = self._jobs.get_job(job_id)
        return current is None or current.cancel_requested

    def _next_batch(self, job_id: str, after: int) -> list[JobDocument]:
        """The next queued documents. A document begun before and never recorded (its worker died on
        it) is worked alone, so a poison document fails by itself (`attempts_exhausted` once begun
        MAX_DOCUMENT_ATTEMPTS times) and never takes its batch down with it."""
        queued = self._jobs.job_documents(job_id, state="queued", after_seq=after, limit=BATCH_DOCUMENTS)
        return queued[:1] if queued and queued[0].attempts > 0 else queued

    def _prepare(
        self, job: IngestionJob, queued: list[JobDocument], deadline: float | None = None
    ) -> tuple[list[DocumentOutcome], list[Document]]:
        """Each queued document as an outcome; those to write (new or changed) as Documents, cut so one
        write stays within BATCH_BODY_CHARS and the worker's deadline (the rest waits for the next
        round; the first document is always handled, so every round moves on)."""
        outcomes: list[DocumentOutcome] = []
        writes: list[Document] = []
        chars = 0
        for item in queued:
            if outcomes and deadline is not None and self._clock.now() > deadline:
                break
            payload = known_payload(item.payload)
            stored = self._backend.get_document(job.source_key, item.doc_id)
            if another_tenants_document(stored, job.spec.tenant):  # neither read nor written
                outcomes.append(DocumentOutcome(item.seq, "failed", "another_tenant"))
                continue
            if self._s3 is not None and isinstance(payload, S3ObjectPayload):
                expected_tag = sync_origin_tag(job.spec.sync_origin or "") if job.spec.sync else None
                if self._s3.unchanged(stored, payload, expected_tag):  # ETag, size: no read
                    assert stored is not None
                    outcomes.append(DocumentOutcome(item.seq, "unchanged", passages=len(_passages(stored))))
                    continue
            try:
                document = self._document_of(job, item)
            except ExtractionError as exc:
                outcomes.append(DocumentOutcome(item.seq, "failed", exc.code))
                continue
            if payload is not None and not payload.replace and replaces_another_file(stored, document):
                outcomes.append(DocumentOutcome(item.seq, "failed", "doc_id_taken"))
                continue
            passages = len(_passages(document))
            if stored_unchanged(stored, document):
                outcomes.append(DocumentOutcome(item.seq, "unchanged", passages=passages))
                continue
            if writes and chars + len(document.body) > BATCH_BODY_CHARS:
                break
            chars += len(document.body)
            writes.append(document)
            outcomes.append(DocumentOutcome(item.seq, "done", passages=passages))
        return outcomes, writes

    def _document_of(self, job: IngestionJob, item: JobDocument) -> Document:
        """The Document of a job document, or ExtractionError — whatever failed while making it (SPEC §7:
        one document's failure, of any kind, is that document's typed error and the job goes on)."""
        if item.attempts >= MAX_DOCUMENT_ATTEMPTS:
            raise ExtractionError("attempts_exhausted")
        origin = job.spec.sync_origin if job.spec.sync else None
        item, file, sidecar = self._s3_object(item)  # outside the try: S3 being down is no document's error
        with typed_failures():
            payload = known_payload(item.payload)
            if isinstance(payload, DirectoryFilePayload):
                sidecar = directory_sidecar(payload)
            return self.document(
                job.source_key, item, extractor=self._extract, sync_origin=origin, file=file, sidecar=sidecar
            )

    def _s3_object(
        self, item: JobDocument
    ) -> tuple[JobDocument, tuple[str, bytes] | None, dict[str, Any] | None]:
        """An S3 job document's object and sidecar, read (its uri, ETag, size and metadata origin go to
        its structured_source); any other job document as it is. ExtractionError per object;
        SourceFailure when S3 is down."""
        payload = known_payload(item.payload)
        if not isinstance(payload, S3ObjectPayload):
            return item, None, None
        if self._s3 is None:
            raise ExtractionError("not_found")
        name, data, s3_source = self._s3.read(payload)
        sidecar, origin_tag = self._s3.read_sidecar(payload)
        structured = {**(payload.structured_source or {}), **s3_source}
        if origin_tag is not None:
            structured["metadata_origin"] = origin_tag
        kept = payload.model_copy(update={"structured_source": structured})
        return replace(item, payload=payload_json(kept)), (name, data), sidecar

    @staticmethod
    def document(
        source_key: str,
        item: JobDocument,
        *,
        extractor: Extractor = extract,
        sync_origin: str | None = None,
        file: tuple[str, bytes] | None = None,
        sidecar: dict[str, Any] | None = None,
    ) -> Document:
        """The Document a job document stands for; ExtractionError when it cannot be made. A sync records
        its origin (as a digest) in `structured_source.sync_origin`: its sweep deletes only those. `file`:
        the name and bytes already read (an S3 object); `sidecar`: its sidecar's attributes, combined
        with the payload's `metadata` (which wins, key by key)."""
        payload = job_payload(item.payload or {})
        structured: dict[str, Any] = dict(payload.structured_source or {})
        if isinstance(payload, TextPayload):
            title, body = payload.title, payload.body
        else:
            if file is not None:
                name, data = file
            elif isinstance(payload, S3ObjectPayload):
                raise ExtractionError("not_found")  # an S3 object is read before (`_s3_object`)
            else:
                name, data = _file_of(payload)
            if isinstance(payload, DirectoryFilePayload):
                structured.setdefault("uri", payload.uri or name)
            extracted = extractor(name, data)
            title = payload.title or extracted.title or PurePath(name).stem or item.doc_id
            body = extracted.body
            structured["format"] = extracted.format
            if extracted.page_starts:
                structured["page_starts"] = extracted.page_starts
        if sync_origin is not None:
            structured["sync_origin"] = sync_origin_tag(sync_origin)
        try:
            return Document(
                source_key=source_key,
                doc_id=item.doc_id,
                title=title[:4096],
                body=body,
                structured_source=structured or None,
                acl=DocumentAcl.model_validate(payload.acl),
                status=payload.status,
                metadata=combine_metadata(sidecar, payload.metadata),
            )
        except ValidationError as exc:
            invalid = any(e["loc"][:1] == ("metadata",) for e in exc.errors())
            raise ExtractionError("invalid_metadata" if invalid else "too_large") from None

    def _sweep(self, job: IngestionJob) -> int:
        """A sync's last step (idempotent, so a resumed job repeats it safely)."""
        origin = job.spec.sync_origin
        if not origin or not job.spec.prefix or not job.spec.tenant:
            return 0  # a job from before sync scoping: it never recorded what it wrote, so it deletes nothing
        keep = {d.doc_id for d in self._all_documents(job.job_id)}
        return self.sweep_sync(job.source_key, origin, job.spec.prefix, job.spec.tenant, keep)

    def sweep_sync(self, source_key: str, origin: str, prefix: str, tenant: str, keep: set[str]) -> int:
        """Delete what left a synced origin (SPEC §7): documents of `source_key` under `prefix-`, of
        `tenant`, that a sync of `origin` (a directory, `s3://bucket/prefix`) wrote, and not in `keep`.
        Never another tenant's, never one ingested another way; an empty prefix deletes nothing."""
        if not prefix:
            return 0
        deleted = 0
        for doc_id in self._backend.document_ids(source_key, f"{prefix}-"):
            if doc_id in keep:
                continue
            stored = self._backend.get_document(source_key, doc_id)
            if stored is None or stored.acl.tenant != tenant:
                continue
            if written_by_sync(stored.structured_source, origin) and self._backend.delete_document(
                source_key, doc_id
            ):
                deleted += 1
        return deleted

    def _all_documents(self, job_id: str) -> Iterator[JobDocument]:
        after = -1
        while True:
            page = self._jobs.job_documents(job_id, after_seq=after, limit=1000)
            yield from page
            if len(page) < 1000:
                return
            after = page[-1].seq

    def _heartbeat(self, job_id: str, worker: str) -> _Beating:
        return _Beating(self, job_id, worker)

    def renew(self, job_id: str, worker: str) -> bool:
        return self._jobs.renew_lease(job_id, worker, self._clock.now(), self._lease_s)

    @property
    def lease_seconds(self) -> float:
        return self._lease_s


def _refuse_repeated_ids(requested: list[JobDocumentRequest], documents: list[JobDocument]) -> None:
    """Documents sent inline are the caller's list: one doc_id twice in it is a mistake in the request,
    refused whole, naming both documents (their file names, else their places) and the id."""
    seen: dict[str, int] = {}
    for i, document in enumerate(documents):
        first = seen.setdefault(document.doc_id, i)
        if first != i:
            a, b = (requested[j].filename or f"documents[{j}]" for j in (first, i))
            raise InvalidRequest(
                f"documents: {a} and {b} would both be document {document.doc_id}", field="documents"
            )


def within_roots(directory: Path, roots: tuple[str, ...]) -> bool:
    """G-LOCAL: whether `directory`, links and `..` resolved, is one of `roots` or inside one (none: no
    directory may be read)."""
    real = directory.resolve()
    return any(real.is_relative_to(Path(root).resolve()) for root in roots if root)


def _relative(path: Path | None, root: Path) -> str | None:
    return path.relative_to(root).as_posix() if path is not None else None


class _Beating:
    """Renews a job's lease every third of its length while the worker is alive (a batch with hybrid
    embedding can take longer than a lease)."""

    def __init__(self, service: IngestionService, job_id: str, worker: str) -> None:
        self._service = service
        self._job_id = job_id
        self._worker = worker
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id[:8]}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._service.lease_seconds / 3):
            try:
                if not self._service.renew(self._job_id, self._worker):
                    return
            except Exception:  # a storage fault: the next beat (or the batch's own write) tries again
                continue

    def __enter__(self) -> _Beating:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _passages(document: Document) -> list[Passage]:
    """The passages the search backends index for `document` (the job's reported counts are theirs)."""
    return document_passages(document.body, document.title, document.structured_source)
