"""The dense indexes of one embedded search file, per (source, model), kept in process memory and never
built in a request.

A search asks `DenseIndexes.index` for the index of its source's current version (`source_versions`, bumped
in the same transaction as every write of its passages, so several processes on one file stay consistent):

- up to `EXACT_MAX` vectors: the exact matrix, read whole (milliseconds);
- past it, a graph in memory follows writes by delta (passage ids are never reused: new ids are added,
  gone ones removed) when the delta is small (`INLINE_ADD_MAX`);
- on first use in a process, the graph saved beside the file (dense_store.py) is loaded and brought up to
  date by the same delta, instead of a rebuild (26 s at 100k vectors, ~3 min at 1M);
- otherwise (no usable saved graph, or a delta too large to add in a request) the search is answered
  exactly (`ExactScan` over the snapshot's int8 rows) while one background thread builds or catches the
  graph up from that snapshot, holding no SQLite lock (it reads nothing: the snapshot is its input); the
  graph is swapped in when ready, at the snapshot's version, so the next search adds the writes made during
  the build by delta; it is then saved.

One lock per (source, model): a second searcher waits for the first one's load instead of loading twice,
and never starts a second build; searches of other sources go on. Across the processes of one file (`kb
serve` and its instances) a build holds a claim (dense_store.py, a lock file): a process whose build finds
it taken waits for it (answering exactly meanwhile) and loads the graph the other one saved.

Graphs changed by delta are saved by one background thread, at most `SAVE_DELAY_S` after a change goes
quiet and `SAVE_MAX_DELAY_S` after the first unsaved one (a save of a 1M graph writes ~1 GB, and a search
needing a delta meanwhile waits for it), and at shutdown (`close`, bounded: `kb serve` and its instances);
a process that stops before its save ends loses nothing but that save: the next one applies the same writes
by delta from the older graph. A build under way at shutdown (`close`, or the interpreter's exit) stops at
its next chunk of vectors (`dense_index.ADD_CHUNK`) and is dropped: a thread still inside usearch's add when
the interpreter exits aborts the process ("terminate called without an active exception", status 134)."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Collection
from typing import Any

from . import candidates, dense_index
from .db import SqliteDatabase
from .dense_index import BuildStopped, DenseIndex, ExactScan, HnswIndex
from .dense_store import GraphStore, SavedGraph
from .driver import sqlite3

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (source key, model)

# A request adds at most this many vectors to a graph (~0.5 s on this 2-core machine at 384 dimensions);
# a larger delta is folded in by the background thread while the request is answered exactly.
INLINE_ADD_MAX = 2_000
# Background builds leave a core to the searches (usearch's add releases the GIL).
BUILD_THREADS = max(1, (os.cpu_count() or 2) - 1)
BUILD_RETRY_S = 300.0  # after a failed build (memory), the exact answer stays this long before a retry
SAVE_DELAY_S = 10.0
SAVE_MAX_DELAY_S = 60.0
STOP_BUILDS_AT_EXIT_S = 5.0  # at interpreter exit, how long the builds under way get to stop (one chunk each)
_CHECKED_VECTORS = 128  # saved vectors compared with the stored ones: the highest ids and as many random

# The stored vectors of one model in a passage id range, in id order: (low, high, model).
_VECTORS_IN_RANGE = (
    "FROM passage_vectors WHERE passage_id BETWEEN ? AND ? AND model = ? AND vector IS NOT NULL "
    "ORDER BY passage_id"
)
_IDS_SQL = "SELECT passage_id " + _VECTORS_IN_RANGE
_ROWS_SQL = "SELECT passage_id, vector " + _VECTORS_IN_RANGE


def source_version(conn: sqlite3.Connection, source_key: str) -> int:
    row = conn.execute("SELECT version FROM source_versions WHERE source_key=?", (source_key,)).fetchone()
    return int(row[0]) if row else 0


def dense_vectors(
    conn: sqlite3.Connection, low: int, high: int, model: str, only: Any | None
) -> tuple[Any, Any]:
    """Passage ids and int8 vector rows of `model` with ids in [low, high] (just those in `only`)."""
    import numpy as np

    rows = conn.execute(_ROWS_SQL, (low, high, model)).fetchall()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    width = len(rows[0][1]) if rows else 0
    vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.int8).reshape(len(rows), width)
    if only is not None:
        keep = np.isin(ids, only)
        ids, vectors = ids[keep], vectors[keep]
    return ids, vectors


def _added_vectors(conn: sqlite3.Connection, high: int, model: str, added: Any) -> tuple[Any, Any]:
    """The rows of the `added` ids (sorted), read from the first of them on."""
    first = int(added[0]) if len(added) else high + 1
    return dense_vectors(conn, first, high, model, added)


class DenseIndexes:
    """Every dense index of one search file, by (source, model), with its source version."""

    def __init__(self, db: SqliteDatabase, store: GraphStore | None) -> None:
        self._db = db
        self._store = store
        self.indexes: dict[Key, tuple[int, DenseIndex]] = {}
        self._guard = threading.Lock()  # over the maps below, held for dictionary steps only
        self._locks: dict[Key, threading.Lock] = {}
        self._builds: dict[Key, threading.Thread] = {}
        self._failed_at: dict[Key, float] = {}
        self._saver = _Saver(self) if store is not None else None
        self._stopping = threading.Event()  # set by `stop_builds`: builds under way end at their next chunk
        _LIVE.add(self)

    # --- the request path ---------------------------------------------------------------------------
    def index(self, conn: sqlite3.Connection, source_key: str, model: str) -> DenseIndex:
        """The dense index of the source's passage vectors of `model`, at the source's current version."""
        key = (source_key, model)
        version = source_version(conn, source_key)
        cached = self.indexes.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        with self._lock_of(key):
            cached = self.indexes.get(key)
            if cached is not None and cached[0] == version:
                return cached[1]
            version, index = self._refresh(key, cached[1] if cached else None)
            self.indexes[key] = (version, index)
        return index

    def _lock_of(self, key: Key) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _refresh(self, key: Key, previous: DenseIndex | None) -> tuple[int, DenseIndex]:
        """The index at the version of one snapshot (rows and version agree), from `previous` by delta where
        that is cheap; past EXACT_MAX without a graph to catch up cheaply, an exact scan while the
        background builds it."""
        import numpy as np

        source_key, model = key
        saved = self._saved(key) if previous is None else None
        with self._db.snapshot() as snap:
            version = source_version(snap, source_key)
            low, high = candidates.source_range(snap, source_key) or (1, 0)
            ids = np.fromiter((r[0] for r in snap.execute(_IDS_SQL, (low, high, model))), dtype=np.int64)
            if len(ids) <= dense_index.EXACT_MAX:
                ids, vectors = dense_vectors(snap, low, high, model, None)
                return version, dense_index.build(model, ids, vectors)
            if saved is not None and self._still_valid(snap, saved, version, model):
                previous = saved.index
            if isinstance(previous, ExactScan):  # a build is under way (or failed): the exact scan follows
                added = np.setdiff1d(ids, previous.ids)
                removed = np.setdiff1d(previous.ids, ids, assume_unique=True)
                exact = previous.updated(*_added_vectors(snap, high, model, added), removed)
                self._start_build(key, version, exact, None)
                return version, exact
            base = None
            if isinstance(previous, HnswIndex):
                old = previous.keys()
                added = np.setdiff1d(ids, old, assume_unique=True)
                removed = np.setdiff1d(old, ids, assume_unique=True)
                if len(added) <= INLINE_ADD_MAX and 2 * len(removed) <= len(old):
                    previous.update(*_added_vectors(snap, high, model, added), removed)
                    if len(added) or len(removed):
                        self._changed(key)
                    return version, previous
                base = previous if 2 * len(removed) <= len(old) else None  # else mostly gone: rebuilt
            ids, vectors = dense_vectors(snap, low, high, model, None)
        exact = ExactScan(model, ids, vectors)
        self._start_build(key, version, exact, base)
        return version, exact

    def _saved(self, key: Key) -> SavedGraph | None:
        return self._store.load(*key) if self._store is not None else None

    @staticmethod
    def _still_valid(snap: sqlite3.Connection, saved: SavedGraph, version: int, model: str) -> bool:
        """A saved graph of this file: not from the future (a file restored from a backup, or recreated),
        and its vectors at sampled ids (the highest ones, where such a file would reuse ids, and random
        ones) are the stored ones."""
        import numpy as np

        if saved.version > version:
            logger.warning("saved dense graph of %s is newer than its file: rebuilt", model)
            return False
        keys = np.sort(saved.index.keys())
        if not len(keys):
            return True
        rng = np.random.default_rng()
        sample = np.unique(np.concatenate([keys[-_CHECKED_VECTORS:], rng.choice(keys, _CHECKED_VECTORS)]))
        marks = ",".join("?" * len(sample))
        stored = dict(
            snap.execute(
                f"SELECT passage_id, vector FROM passage_vectors WHERE model = ? AND passage_id IN ({marks})",
                (model, *(int(i) for i in sample)),
            ).fetchall()
        )
        present = [i for i in sample if stored.get(int(i)) is not None]
        graph = saved.index.vectors_of(present)
        if all(bytes(row) == stored[int(i)] for i, row in zip(present, graph, strict=True)):
            return True
        logger.warning("saved dense graph of %s does not hold the stored vectors: rebuilt", model)
        return False

    # --- the background build ----------------------------------------------------------------------
    def _start_build(self, key: Key, version: int, exact: ExactScan, base: HnswIndex | None) -> None:
        """One background build per (source, model): the graph of the exact scan's rows (from `base` by
        delta when given). Not again within BUILD_RETRY_S of a failed one."""
        with self._guard:
            if (
                key in self._builds
                or self._stopping.is_set()
                or time.monotonic() - self._failed_at.get(key, -BUILD_RETRY_S) < BUILD_RETRY_S
            ):
                return
            thread = threading.Thread(
                target=self._build,
                args=(key, version, exact, base),
                name=f"dense-build {key[0]}",
                daemon=True,
            )
            self._builds[key] = thread
        thread.start()

    def _build(self, key: Key, version: int, exact: ExactScan, base: HnswIndex | None) -> None:
        started = time.perf_counter()
        try:
            if self._store is None:
                graph = self._graph_of(exact, base)
                self._install(key, version, graph)
            else:
                with self._store.build_claim(*key) as waited:
                    found = self._saved_by_another(key) if waited else None
                    version, graph = found or (version, self._graph_of(exact, base))
                    self._install(key, version, graph)
                    if found is None:
                        self.save_current(key)  # under the claim: processes waiting for it load this save
            logger.info(
                "dense graph of %s (%s) ready in the background",
                key[0],
                key[1],
                extra={"vectors": len(graph), "s": round(time.perf_counter() - started, 1)},
            )
        except BuildStopped:  # shutting down: the exact answer stays, the next process builds (or loads)
            logger.info("background build of the dense graph of %s (%s) stopped at shutdown", *key)
        except Exception:  # a failed build leaves the exact answer (correct, slower); logged, retried later
            logger.exception("background build of the dense graph of %s (%s) failed", *key)
            with self._guard:
                self._failed_at[key] = time.monotonic()
        finally:
            with self._guard:
                self._builds.pop(key, None)

    def _graph_of(self, exact: ExactScan, base: HnswIndex | None) -> HnswIndex:
        """The graph of the exact scan's rows: built, or `base` (installed nowhere: the exact scan is)
        brought to them by delta. BuildStopped when `stop_builds` is called meanwhile."""
        import numpy as np

        stop = self._stopping
        if base is None:
            return HnswIndex(exact.model, exact.ids, exact.vectors, threads=BUILD_THREADS, stop=stop)
        old = base.keys()
        rows = np.isin(exact.ids, old, invert=True)
        gone = np.setdiff1d(old, exact.ids)
        base.update(exact.ids[rows], exact.vectors[rows], gone, threads=BUILD_THREADS, stop=stop)
        return base

    def stop_builds(self, timeout_s: float) -> None:
        """Stop the background builds under way (each at its next chunk) and wait for them, at most
        `timeout_s`; none starts after. At shutdown: a thread still inside usearch's add when the
        interpreter exits aborts the process."""
        self._stopping.set()
        deadline = time.monotonic() + timeout_s
        with self._guard:
            builds = list(self._builds.values())
        for thread in builds:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _saved_by_another(self, key: Key) -> tuple[int, HnswIndex] | None:
        """The graph another process saved while this one waited for its claim, when valid here."""
        saved = self._saved(key)
        if saved is None:
            return None
        with self._db.snapshot() as snap:
            if not self._still_valid(snap, saved, source_version(snap, key[0]), key[1]):
                return None
        return saved.version, saved.index

    def _install(self, key: Key, version: int, graph: HnswIndex) -> None:
        """Swap the graph in for the interim exact scan (the next search adds later writes by delta)."""
        with self._lock_of(key):
            current = self.indexes.get(key)
            if current is not None and isinstance(current[1], ExactScan):
                self.indexes[key] = (version, graph)

    def settle(self, timeout_s: float | None = None) -> bool:
        """Wait for the background builds under way (tests, benchmarks); whether none is left."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._guard:
                running = list(self._builds.values())
            if not running:
                return True
            for thread in running:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if deadline is not None and time.monotonic() >= deadline:
                with self._guard:
                    return not self._builds

    # --- saving ------------------------------------------------------------------------------------
    def _changed(self, key: Key) -> None:
        if self._saver is not None:
            self._saver.schedule(key)

    def _save(self, key: Key, version: int, graph: HnswIndex) -> None:
        if self._store is None:
            return
        try:
            self._store.save(key[0], key[1], version, graph)
        except (OSError, RuntimeError, ValueError) as exc:  # a full or read-only disk: kept in memory only
            logger.warning("dense graph of %s (%s) not saved: %s", key[0], key[1], exc)

    def save_current(self, key: Key) -> None:
        """Save the graph of `key` as it is now (none while a delta changes it)."""
        with self._lock_of(key):
            current = self.indexes.get(key)
            if current is not None and isinstance(current[1], HnswIndex):
                self._save(key, current[0], current[1])

    def flush(self) -> None:
        """Save every graph changed since its last save now, and wait for a save under way (tests, and
        `close`)."""
        if self._saver is not None:
            self._saver.flush()

    def close(self, timeout_s: float) -> None:
        """At shutdown: stop the builds under way (`stop_builds`), then `flush` within what is left of
        `timeout_s`. A save still running then is left to the process's end (written beside its graph and
        renamed, so an older graph stays whole), and a failed one is logged: either way the next process
        brings the older saved graph up to date by delta. Never raises."""
        started = time.monotonic()
        self.stop_builds(timeout_s)
        timeout_s = max(0.0, timeout_s - (time.monotonic() - started))
        if self._saver is None:
            return

        def run() -> None:
            try:
                self.flush()
            except Exception:  # shutdown goes on: the next start catches up by delta
                logger.warning("dense graphs not saved at shutdown: the next start catches up by delta")
                logger.debug("dense graph save at shutdown failed", exc_info=True)

        saving = threading.Thread(target=run, name="dense-save-at-close", daemon=True)
        saving.start()
        saving.join(timeout_s)
        if saving.is_alive():
            logger.warning(
                "dense graphs still being saved after %.0f s at shutdown: left unfinished (the next start "
                "catches up by delta)",
                timeout_s,
            )

    # --- warming -----------------------------------------------------------------------------------
    def warm(self, models: Collection[str]) -> threading.Thread:
        """Load (or start building) the dense index of every source of the file and each of `models` it
        has vectors of, in the background (`kb serve` at start): the first searches find them loaded, or
        their graph under way. (Vectors of another model are never searched here: not loaded.)"""

        def run() -> None:
            conn = self._db.connection()
            try:
                for (source_key,) in conn.execute("SELECT source_key FROM source_ranges").fetchall():
                    low, high = candidates.source_range(conn, source_key) or (1, 0)
                    stored = conn.execute(
                        "SELECT DISTINCT model FROM passage_vectors WHERE passage_id BETWEEN ? AND ?",
                        (low, high),
                    ).fetchall()
                    for (model,) in stored:
                        if model in models:
                            self.index(conn, source_key, model)
            except sqlite3.Error as exc:  # the first search reports a broken file in its own words
                logger.warning("dense indexes not warmed: %s", exc)

        thread = threading.Thread(target=run, name="dense-warm", daemon=True)
        thread.start()
        return thread


_LIVE: weakref.WeakSet[DenseIndexes] = weakref.WeakSet()


@atexit.register
def _stop_builds_at_exit() -> None:
    """Before the interpreter ends its daemon threads (atexit runs first): stop every build under way, so
    none is inside usearch's add then (which would abort the process after its work was done)."""
    deadline = time.monotonic() + STOP_BUILDS_AT_EXIT_S
    for indexes in list(_LIVE):
        indexes.stop_builds(max(0.0, deadline - time.monotonic()))


class _Saver:
    """One background thread saving changed graphs, debounced (`SAVE_DELAY_S`, `SAVE_MAX_DELAY_S`)."""

    def __init__(self, indexes: DenseIndexes) -> None:
        self._indexes = indexes
        self._wake = threading.Condition()
        self._pending: dict[Key, tuple[float, float]] = {}  # key -> (first unsaved change, last change)
        self._saving = 0  # saves the thread has taken from `_pending` and not finished
        self._thread: threading.Thread | None = None

    def schedule(self, key: Key) -> None:
        now = time.monotonic()
        with self._wake:
            first, _ = self._pending.get(key, (now, now))
            self._pending[key] = (first, now)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dense-save", daemon=True)
                self._thread.start()
            self._wake.notify_all()  # (a flush may be waiting on the same condition)

    def _due(self, now: float) -> tuple[list[Key], float]:
        """The keys due now and the seconds until the next one is."""
        due, wait = [], SAVE_MAX_DELAY_S
        for key, (first, last) in self._pending.items():
            at = min(last + SAVE_DELAY_S, first + SAVE_MAX_DELAY_S)
            if at <= now:
                due.append(key)
            else:
                wait = min(wait, at - now)
        return due, wait

    def _run(self) -> None:
        while True:
            with self._wake:
                due, wait = self._due(time.monotonic())
                while not due:
                    self._wake.wait(wait)
                    due, wait = self._due(time.monotonic())
                for key in due:
                    del self._pending[key]
                self._saving += 1
            try:
                for key in due:
                    self._indexes.save_current(key)
            finally:
                with self._wake:
                    self._saving -= 1
                    self._wake.notify_all()

    def flush(self) -> None:
        """Save the pending graphs now, then wait for the saves the thread has under way."""
        with self._wake:
            keys = list(self._pending)
            self._pending.clear()
        for key in keys:
            self._indexes.save_current(key)
        with self._wake:
            while self._saving:
                self._wake.wait()
