"""Embedded state on SQLite: ingestion jobs and their documents (I-INGEST)."""

from __future__ import annotations

import json
from typing import Any

from ...domain.errors import Conflict
from ...domain.ingestion import (
    JOB_TTL_SECONDS,
    DocState,
    DocumentOutcome,
    IngestionJob,
    JobDocument,
    JobSpec,
    JobState,
    decode_payload,
    encode_payload,
    initial_counts,
    outcome_deltas,
    spec_json,
)
from ...ports import (
    JobStore,
)
from .store import (
    SqliteStore,
)


class SqliteJobStore(SqliteStore, JobStore):
    """Ingestion jobs on the state file: every change of a job and its documents is one transaction."""

    _JOB = (
        "job_id, source_key, spec, state, total, queued, done, unchanged, failed, deleted, passages, "
        "created_at, started_at, updated_at, finished_at, worker, lease_until, cancel_requested"
    )

    @staticmethod
    def _job(row: tuple[Any, ...]) -> IngestionJob:
        (job_id, source_key, spec, state, total, queued, done, unchanged, failed, deleted, passages,
         created_at, started_at, updated_at, finished_at, worker, lease_until, cancel) = row  # fmt: skip
        return IngestionJob(
            job_id=job_id,
            source_key=source_key,
            created_at=created_at,
            total=total,
            spec=JobSpec(**json.loads(spec)),
            state=state,
            counts={
                "queued": queued,
                "done": done,
                "unchanged": unchanged,
                "failed": failed,
                "deleted": deleted,
            },
            passages=passages,
            started_at=started_at,
            updated_at=updated_at,
            finished_at=finished_at,
            worker=worker,
            lease_until=lease_until,
            cancel_requested=bool(cancel),
        )

    def create_job(self, job: IngestionJob, documents: list[JobDocument]) -> None:
        counts = initial_counts(documents)
        expires_at = int(job.created_at) + JOB_TTL_SECONDS
        spec = spec_json(job.spec)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM ingestion_jobs WHERE job_id = ?", (job.job_id,)).fetchone():
                raise Conflict("job already exists")
            conn.execute(
                f"INSERT INTO ingestion_jobs ({self._JOB}, expires_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,?)",
                (
                    job.job_id,
                    job.source_key,
                    spec,
                    job.state,
                    len(documents),
                    counts["queued"],
                    counts["done"],
                    counts["unchanged"],
                    counts["failed"],
                    0,
                    0,
                    job.created_at,
                    None,
                    job.created_at,
                    None,
                    None,
                    0.0,
                    expires_at,
                ),
            )
            conn.executemany(
                "INSERT INTO ingestion_documents "
                "(job_id, seq, doc_id, payload, state, error, passages, expires_at) VALUES (?,?,?,?,?,?,?,?)",
                [
                    (
                        job.job_id,
                        d.seq,
                        d.doc_id,
                        encode_payload(d.payload) if d.state in ("queued", "failed") else None,
                        d.state,
                        d.error,
                        d.passages,
                        expires_at,
                    )
                    for d in documents
                ],
            )

    def get_job(self, job_id: str) -> IngestionJob | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {self._JOB} FROM ingestion_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        return self._job(row) if row else None

    def list_jobs(self, source_key: str, limit: int = 20) -> list[IngestionJob]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {self._JOB} FROM ingestion_jobs WHERE source_key = ? "
                "ORDER BY created_at DESC, job_id DESC LIMIT ?",
                (source_key, limit),
            ).fetchall()
        return [self._job(row) for row in rows]

    def job_documents(
        self, job_id: str, *, state: DocState | None = None, after_seq: int = -1, limit: int = 100
    ) -> list[JobDocument]:
        only = "" if state is None else " AND state = ?"
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, doc_id, payload, state, error, passages, attempts FROM ingestion_documents "
                f"WHERE job_id = ? AND seq > ?{only} ORDER BY seq LIMIT ?",
                (job_id, after_seq, *((state,) if state else ()), limit),
            ).fetchall()
        return [
            JobDocument(seq, doc_id, decode_payload(payload), doc_state, error, passages, attempts)
            for seq, doc_id, payload, doc_state, error, passages, attempts in rows
        ]

    def claim_job(
        self, worker: str, now: float, lease_s: float, job_id: str | None = None
    ) -> IngestionJob | None:
        which = "" if job_id is None else " AND job_id = ?"
        with self._write() as conn:
            row = conn.execute(
                "SELECT job_id FROM ingestion_jobs WHERE state NOT IN ('completed', 'cancelled') "
                f"AND lease_until < ?{which} "
                "ORDER BY created_at, job_id LIMIT 1",
                (now, *((job_id,) if job_id else ())),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE ingestion_jobs SET state = 'running', worker = ?, lease_until = ?, "
                "started_at = coalesce(started_at, ?), updated_at = ? WHERE job_id = ?",
                (worker, now + lease_s, now, now, row[0]),
            )
            claimed = conn.execute(
                f"SELECT {self._JOB} FROM ingestion_jobs WHERE job_id = ?", (row[0],)
            ).fetchone()
        return self._job(claimed)

    def renew_lease(self, job_id: str, worker: str, now: float, lease_s: float) -> bool:
        with self._write() as conn:
            return (
                conn.execute(
                    "UPDATE ingestion_jobs SET lease_until = ? "
                    "WHERE job_id = ? AND worker = ? AND state = 'running'",
                    (now + lease_s, job_id, worker),
                ).rowcount
                > 0
            )

    def record_outcomes(
        self, job_id: str, worker: str, outcomes: list[DocumentOutcome], now: float, lease_s: float
    ) -> bool:
        deltas, passages = outcome_deltas(outcomes)
        with self._write() as conn:
            held = conn.execute(
                "UPDATE ingestion_jobs SET queued = queued + ?, done = done + ?, unchanged = unchanged + ?, "
                "failed = failed + ?, passages = passages + ?, updated_at = ?, lease_until = ? "
                "WHERE job_id = ? AND worker = ? AND state = 'running'",
                (
                    deltas["queued"],
                    deltas["done"],
                    deltas["unchanged"],
                    deltas["failed"],
                    passages,
                    now,
                    now + lease_s,
                    job_id,
                    worker,
                ),
            ).rowcount
            if not held:
                return False
            # A failed document keeps its payload: its error names the file or object it came from.
            changed = conn.executemany(
                "UPDATE ingestion_documents SET state = ?, error = ?, passages = ?, "
                "payload = CASE WHEN ? = 'failed' THEN payload END "
                "WHERE job_id = ? AND seq = ? AND state = 'queued'",
                [(o.state, o.error, o.passages, o.state, job_id, o.seq) for o in outcomes],
            ).rowcount
            if changed != len(outcomes):  # a document handled twice would count twice: refuse it all
                raise Conflict("job documents already handled")
        return True

    def finish_job(
        self, job_id: str, worker: str, now: float, deleted: int = 0, state: JobState = "completed"
    ) -> bool:
        with self._write() as conn:
            return (
                conn.execute(
                    "UPDATE ingestion_jobs SET state = ?, deleted = ?, finished_at = ?, "
                    "updated_at = ?, lease_until = 0 WHERE job_id = ? AND worker = ? AND state = 'running'",
                    (state, deleted, now, now, job_id, worker),
                ).rowcount
                > 0
            )

    def begin_documents(self, job_id: str, worker: str, seqs: list[int], delta: int = 1) -> bool:
        with self._write() as conn:
            held = conn.execute(
                "SELECT 1 FROM ingestion_jobs WHERE job_id = ? AND worker = ? AND state = 'running'",
                (job_id, worker),
            ).fetchone()
            if held is None:
                return False
            conn.executemany(
                "UPDATE ingestion_documents SET attempts = max(attempts + ?, 0) "
                "WHERE job_id = ? AND seq = ? AND state = 'queued'",
                [(delta, job_id, seq) for seq in seqs],
            )
        return True

    def cancel_job(self, job_id: str, now: float) -> IngestionJob | None:
        with self._write() as conn:
            conn.execute(
                "UPDATE ingestion_jobs SET cancel_requested = 1, updated_at = ? "
                "WHERE job_id = ? AND state NOT IN ('completed', 'cancelled')",
                (now, job_id),
            )
            # No live holder (queued, or its worker died): cancelled now; else the holder stops.
            conn.execute(
                "UPDATE ingestion_jobs SET state = 'cancelled', finished_at = ?, lease_until = 0 "
                "WHERE job_id = ? AND cancel_requested = 1 AND state NOT IN ('completed', 'cancelled') "
                "AND lease_until < ?",
                (now, job_id, now),
            )
            row = conn.execute(
                f"SELECT {self._JOB} FROM ingestion_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        return self._job(row) if row else None

    def release_job(self, job_id: str, worker: str) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE ingestion_jobs SET lease_until = 0 WHERE job_id = ? AND worker = ?", (job_id, worker)
            )
