"""`kb serve`'s ingestion worker: a thread of the serve process that claims queued jobs from the same job
store the admin function writes to (SQLite state file or DynamoDB table) and works them (I-INGEST). The
files themselves are extracted in a resource-limited child process (`extraction_sandbox`), so a hostile
file cannot grow or stall `kb serve`; the thread only waits for it, up to the wall-time bound.

A job is held under a lease that the worker renews while it lives; after a kill -9 the lease runs out and
the next `kb serve` (or another one sharing `--state`) claims the job and carries on with its queued
documents. Each batch of documents is written in one transaction, so no document is ever half-indexed."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from knowledge_core.bootstrap import Container

IDLE_POLL_SECONDS = 0.5
ERROR_PAUSE_SECONDS = 5.0


class IngestWorker:
    def __init__(self, container: Container, *, verbose: bool = False) -> None:
        self._container = container
        self._verbose = verbose
        self._stop = threading.Event()
        self.worker_id = f"kb-serve-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._thread = threading.Thread(target=self._run, name="ingest-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """After the job step under way, waiting at most `timeout` (a daemon thread: the process may end
        before it; the job's lease then runs out and the next start carries on)."""
        self._stop.set()
        self._thread.join(timeout=timeout)
        close = getattr(self._container.extractor, "close", None)
        if close is not None:  # the extraction child (it would also exit once its pipe closes)
            close()

    def _run(self) -> None:
        service = self._container.ingestion
        while not self._stop.is_set():
            try:
                job_id = service.work(self.worker_id)
            except Exception as exc:  # a storage fault: the job keeps its queued documents; try again later
                print(f"ingestion worker: {type(exc).__name__}; retrying", file=sys.stderr, flush=True)
                self._stop.wait(ERROR_PAUSE_SECONDS)
                continue
            if job_id is None:
                self._stop.wait(IDLE_POLL_SECONDS)
            elif self._verbose:
                print(f"ingestion job {job_id} worked", flush=True)
