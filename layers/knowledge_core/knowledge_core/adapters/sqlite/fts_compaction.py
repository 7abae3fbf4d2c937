"""Keeping the embedded full-text index in few segments.

FTS5 is log-structured: every write transaction adds a segment and its automerge keeps up to three of each
size, so an index written in many batches (an ingestion job writes one transaction per batch of documents)
is read as 8-21 segments, each looked up and merged for every query term: on the scale corpus the raw
top-k takes 0.74x the time compacted at 10k passages, 0.96-0.97x at 100k and 1M, where scoring the matching
postings dominates (bench/fts_compaction_bench.py, bench/results/fts_compaction.json).

So, in the background, a `Compactor` merges the index towards one segment (FTS5's incremental `optimize`:
`'merge', -N`) when it is fragmented (`domain.segments.fragmented`: the segments besides the largest hold
at least 5 % of its pages, so a few small writes after a compaction never rewrite a large index) —
`QUIET_S` after this process's last write (so after an ingestion job, not between its batches) and when
`kb serve` warms. Each slice merges about `SLICE_PAGES` pages in its own short write transaction: a writer
waits at most one slice, a reader never (WAL), and a process stopped mid-way leaves a consistent index whose
next compaction goes on from there. Compaction changes no passage id, term or score: only how they are
stored."""

from __future__ import annotations

import logging
import threading
import time

from ...domain.segments import fragmented
from .db import SqliteDatabase
from .driver import sqlite3

logger = logging.getLogger(__name__)

QUIET_S = 30.0  # longer than the pause between an ingestion job's batches, even while it embeds
SLICE_PAGES = 256
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
_MERGE_SQL = "INSERT INTO passages(passages, rank) VALUES('merge', ?)"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """An SQLite varint at `data[i]`: (value, index after it)."""
    value = 0
    for n in range(9):
        byte = data[i + n]
        if n == 8:
            return (value << 8) | byte, i + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i + n + 1
    raise AssertionError("unreachable")


def segment_pages(conn: sqlite3.Connection) -> list[int] | None:
    """The leaf pages of each segment of the `passages` index, from FTS5's structure record (None: no
    record, or one this code cannot read — the index then counts as not fragmented)."""
    row = conn.execute("SELECT block FROM passages_data WHERE id = 10").fetchone()
    if row is None or not isinstance(row[0], bytes):
        return None
    data: bytes = row[0]
    try:
        v2 = data[4:8] == _STRUCTURE_V2
        i = 8 if v2 else 4
        levels, i = _varint(data, i)
        _segments, i = _varint(data, i)
        _writes, i = _varint(data, i)
        pages = []
        for _ in range(levels):
            _merging, i = _varint(data, i)
            count, i = _varint(data, i)
            for _ in range(count):
                _segid, i = _varint(data, i)
                first, i = _varint(data, i)
                last, i = _varint(data, i)
                for _ in range(5 if v2 else 0):  # origins, tombstone pages and entries, entries
                    _, i = _varint(data, i)
                pages.append(last - first + 1)
    except IndexError:
        return None
    return pages if len(pages) == _segments else None


def compact(db: SqliteDatabase, stop: threading.Event | None = None) -> int:
    """Merge the index into one segment, slice by slice (each its own write transaction), until done or
    `stop` is set: the slices that merged something."""
    slices = 0
    while stop is None or not stop.is_set():
        with db.transaction() as conn:
            before = conn.total_changes
            conn.execute(_MERGE_SQL, (-SLICE_PAGES,))
            if conn.total_changes - before < 2:  # FTS5's "nothing left to merge"
                return slices
        slices += 1
    return slices


class Compactor:
    """A background thread, while a check is pending or running, that compacts the index when it is
    fragmented: `QUIET_S` after the last `written()`, or at once on `check()` (`force`: whenever it has more
    than one segment, as an operator asks); `close()` stops it within a slice."""

    def __init__(self, db: SqliteDatabase, quiet_s: float | None = None) -> None:
        self._db = db
        self._quiet_s = QUIET_S if quiet_s is None else quiet_s
        self._wake = threading.Condition()
        self._due: float | None = None  # monotonic time of the next check
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        self._force = False  # the pending check compacts whatever the share (an operator asked)
        self.compactions = 0  # compactions run (tests, benchmarks)

    def written(self) -> None:
        """Passages were written: check once writes have been quiet for `quiet_s`."""
        self._schedule(time.monotonic() + self._quiet_s)

    def check(self, force: bool = False) -> None:
        """Check (and compact) now, in the background (`force`: compact any index of two or more segments)."""
        self._schedule(time.monotonic(), force)

    @property
    def busy(self) -> bool:
        """A check is pending or a compaction runs."""
        with self._wake:
            return self._due is not None or self._running

    def _schedule(self, due: float, force: bool = False) -> None:
        with self._wake:
            if self._stop.is_set():
                return
            self._force = self._force or force
            self._due = due  # the latest wins: a write postpones a pending check until writes are quiet
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fts-compact", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stop.is_set() and self._due is not None and self._due > time.monotonic():
                    self._wake.wait(self._due - time.monotonic())
                if self._stop.is_set() or self._due is None:  # nothing pending: the next write starts one
                    self._thread = None
                    return
                self._due, self._running, force, self._force = None, True, self._force, False
            try:
                pages = segment_pages(self._db.connection())
                if fragmented(pages) or (force and pages is not None and len(pages) > 1):
                    compact(self._db, self._stop)
                    self.compactions += 1
            except sqlite3.Error as exc:  # a busy or broken file: the next write or start tries again
                logger.warning("full-text index not compacted: %s", type(exc).__name__)
            finally:
                with self._wake:
                    self._running = False

    def idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until no check is pending or running (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.busy:
                return True
            time.sleep(0.01)
        return False

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop: a compaction under way ends after its current slice (the index stays consistent)."""
        with self._wake:
            self._stop.set()
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
