"""Ingestion jobs (I-INGEST): accept a batch of documents or a directory at once, then work it through
under a lease — extract, skip unchanged content, write each batch whole, record outcomes, and for a sync
delete the documents that left the directory. Plain Python: the admin function submits and reports, the
worker (an SQS-triggered function on AWS, a thread of `kb serve`) calls `work`."""

from __future__ import annotations

import base64
import binascii
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePath

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
from ..domain.errors import InvalidRequest, NotFound, SourceFailure
from ..domain.ingestion import (
    DocumentOutcome,
    IngestionJob,
    JobDocument,
    JobSpec,
    directory_doc_id,
    encode_payload,
    file_format,
)
from ..domain.models import Document, DocumentAcl
from ..domain.passages import split_passages
from ..extraction import ExtractionError, extract
from ..ports import Clock, JobQueue, JobStore, Registry, SearchBackend

BATCH_DOCUMENTS = 50  # one atomic write (SearchBackend.put_documents) per batch
BATCH_BODY_CHARS = 4_000_000
LEASE_SECONDS = 15.0
MAX_ERRORS_SHOWN = 100
MAX_DIRECTORY_FILES = 10_000
BACKEND_RETRY_SECONDS = 30


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


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
        lease_s: float = LEASE_SECONDS,
    ) -> None:
        self._registry = registry
        self._jobs = jobs
        self._backend = backend
        self._clock = clock
        self._queue = queue
        self._allow_directories = allow_directories
        self._lease_s = lease_s

    # --- admin API ------------------------------------------------------------------------------------
    def submit(self, source_key: str, request: IngestionJobRequest) -> JobAccepted:
        if self._registry.get_sources([source_key]).get(source_key) is None:
            raise NotFound(f"source {source_key} is not published", field="source")
        if request.documents is not None:
            documents = [self._inline(i, d) for i, d in enumerate(request.documents)]
            spec = JobSpec()
        else:
            assert request.directory is not None and request.acl is not None
            documents = self._directory(request.directory, request.doc_id_prefix, request.acl.to_acl())
            spec = JobSpec(directory=request.directory, prefix=request.doc_id_prefix, sync=request.sync)
        if len({d.doc_id for d in documents}) != len(documents):
            origin = "documents" if request.documents is not None else "directory"
            what = (
                "doc_id must be unique within a job"
                if origin == "documents"
                else "two files map to one doc_id"
            )
            raise InvalidRequest(f"{origin}: {what}", field=origin)
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

    def _inline(self, seq: int, request: JobDocumentRequest) -> JobDocument:
        payload = request.model_dump(mode="json", exclude_none=True, exclude={"doc_id"})
        return self._sized(JobDocument(seq, request.doc_id, payload))

    def _directory(self, directory: str, prefix: str, acl: DocumentAcl) -> list[JobDocument]:
        if not self._allow_directories:
            raise InvalidRequest("directory: not available on this deployment", field="directory")
        root = Path(directory)
        if not root.is_absolute() or not root.is_dir():
            raise InvalidRequest("directory: must be an absolute path to a directory", field="directory")
        found: list[Path] = []
        for p in root.rglob("*"):  # lazy: a huge tree is refused as soon as it passes the bound
            if p.is_symlink() or not p.is_file():
                continue
            if any(part.startswith(".") for part in p.relative_to(root).parts):
                continue
            found.append(p)
            if len(found) > MAX_DIRECTORY_FILES:
                raise InvalidRequest(f"directory: more than {MAX_DIRECTORY_FILES} files", field="directory")
        files = sorted(found)
        acl_json = acl.model_dump(mode="json")
        # The uri is the path inside the directory: never this machine's absolute path (agents see it).
        return [
            JobDocument(
                seq,
                directory_doc_id(prefix, PurePath(p.relative_to(root))),
                {"path": str(p), "uri": p.relative_to(root).as_posix(), "acl": acl_json},
            )
            for seq, p in enumerate(files)
        ]

    def _job(self, source_key: str, job_id: str) -> IngestionJob:
        job = self._jobs.get_job(job_id)
        if job is None or job.source_key != source_key:
            raise NotFound("ingestion job not found", field="job_id")
        return job

    def _status(self, job: IngestionJob) -> JobStatus:
        errors = [
            JobDocumentError(doc_id=d.doc_id, code=d.error or "failed")
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
            created_at=_iso(job.created_at) or "",
            started_at=_iso(job.started_at),
            updated_at=_iso(job.updated_at),
            finished_at=_iso(job.finished_at),
        )

    def status(self, source_key: str, job_id: str) -> JobStatus:
        return self._status(self._job(source_key, job_id))

    def list_jobs(self, source_key: str, limit: int = 20) -> JobList:
        return JobList(
            source=source_key, jobs=[self._status(j) for j in self._jobs.list_jobs(source_key, limit)]
        )

    # --- the worker -----------------------------------------------------------------------------------
    def work(self, worker: str, *, job_id: str | None = None, deadline: float | None = None) -> str | None:
        """Claim one job (`job_id`, or the oldest with a free lease) and work it until it completes, the
        lease is lost, the search backend fails (the job waits BACKEND_RETRY_SECONDS) or `deadline`
        (clock time) passes (released too). The job id worked on, or None when nothing was claimed.
        With a queue, a job left unfinished is queued again (after a pause when the backend failed)."""
        job = self._jobs.claim_job(worker, self._clock.now(), self._lease_s, job_id)
        if job is None:
            return None
        delay = 0
        with self._heartbeat(job.job_id, worker):
            try:
                finished = self._work(job, worker, deadline)
            except SourceFailure:
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
            queued = self._jobs.job_documents(
                job.job_id, state="queued", after_seq=after, limit=BATCH_DOCUMENTS
            )
            if not queued:
                break
            outcomes, writes = self._prepare(job, queued)
            if writes:
                self._backend.put_documents(writes)
            if not self._jobs.record_outcomes(job.job_id, worker, outcomes, self._clock.now(), self._lease_s):
                return True  # another worker holds the job now: it carries on
            after = outcomes[-1].seq  # a batch cut short by its size leaves the rest for the next round
        deleted = self._sweep(job) if job.spec.sync else 0
        self._jobs.finish_job(job.job_id, worker, self._clock.now(), deleted)
        return True

    def _prepare(
        self, job: IngestionJob, queued: list[JobDocument]
    ) -> tuple[list[DocumentOutcome], list[Document]]:
        """Each queued document as an outcome; those to write (new or changed) as Documents, cut so one
        write stays within BATCH_BODY_CHARS (the rest waits for the next round)."""
        outcomes: list[DocumentOutcome] = []
        writes: list[Document] = []
        chars = 0
        for item in queued:
            try:
                document = self.document(job.source_key, item)
            except ExtractionError as exc:
                outcomes.append(DocumentOutcome(item.seq, "failed", exc.code))
                continue
            passages = len(split_passages(document.body))
            stored = self._backend.get_document(job.source_key, item.doc_id)
            if stored is not None and stored.revision == document.revision:
                outcomes.append(DocumentOutcome(item.seq, "unchanged", passages=passages))
                continue
            if writes and chars + len(document.body) > BATCH_BODY_CHARS:
                break
            chars += len(document.body)
            writes.append(document)
            outcomes.append(DocumentOutcome(item.seq, "done", passages=passages))
        return outcomes, writes

    @staticmethod
    def document(source_key: str, item: JobDocument) -> Document:
        """The Document a job document stands for; ExtractionError when it cannot be made."""
        payload = dict(item.payload or {})
        structured: dict = dict(payload.get("structured_source") or {})
        if "body" in payload:
            title, body = payload["title"], payload["body"]
        else:
            if "path" in payload:
                path = Path(payload["path"])
                name = path.name
                structured.setdefault("uri", payload.get("uri", name))
                if file_format(name) is None:  # never read a file the job cannot take
                    raise ExtractionError("unsupported_format")
                try:
                    data = path.read_bytes()
                except OSError:
                    raise ExtractionError("not_found") from None
            else:
                name = payload["filename"]
                try:
                    data = base64.b64decode(payload["content_base64"], validate=True)
                except (binascii.Error, ValueError):
                    raise ExtractionError("corrupt") from None
            extracted = extract(name, data)
            title = payload.get("title") or extracted.title or PurePath(name).stem or item.doc_id
            body = extracted.body
            structured["format"] = extracted.format
            if extracted.page_starts:
                structured["page_starts"] = extracted.page_starts
        try:
            return Document(
                source_key=source_key,
                doc_id=item.doc_id,
                title=title[:4096],
                body=body,
                structured_source=structured or None,
                acl=DocumentAcl.model_validate(payload.get("acl") or {}),
                status=payload.get("status", "ready"),
            )
        except ValidationError:
            raise ExtractionError("too_large") from None

    def _sweep(self, job: IngestionJob) -> int:
        """A sync's last step (idempotent, so a resumed job repeats it safely): delete the source's
        documents under the prefix that are not in the job."""
        keep = {d.doc_id for d in self._all_documents(job.job_id)}
        prefix = f"{job.spec.prefix}-" if job.spec.prefix else ""
        deleted = 0
        for doc_id in self._backend.document_ids(job.source_key, prefix):
            if doc_id not in keep and self._backend.delete_document(job.source_key, doc_id):
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
