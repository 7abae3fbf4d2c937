"""The lexical candidate query of the embedded search index, and the passage-id ranges it relies on.

Why ranges: every source owns the passage ids `[n << 32, (n + 1) << 32)` (n its number in `source_ranges`),
so "only this source" is a rowid range that FTS5 applies while it walks its posting lists. The source is
filtered inside FTS5 with one shared table, so BM25 statistics (and so every score) stay as they were with
one table for every source, and no per-row source check or per-source table is needed. Ids are
never reused within a source (`next_id` only grows): a cached dense index can tell new passages by id.

The query takes FTS5's top `limit` rows by rank *before* any join (a MATERIALIZED CTE: SQLite cannot
flatten it into the join and sort every match joined), then joins only those rows to `passage_rows` and
`documents`, reading only what choosing needs (document, score, ACL): the caller dedups documents and
checks ACLs over those few rows (when hidden, unready or repeated documents exhaust them, one deeper fetch,
`limit=None`, never OFFSET pages), then reads the text of the passages it keeps (`passage_details`).

FTS5 scores every passage matching any query word before it takes the top-k (its posting lists carry no
impact bound to skip by), so the statement's time grows with the matches. The score is `rank.function()`'s:
kb_bm25 (rank.py), bm25() without its %_docsize read per matching row, which was most of that time (0.34x
the statement's time at 100k passages). A large source's range is
therefore read in slices at once (`SlicedCandidates`, one thread and connection each, merged exactly):
0.62-0.85x the time of one statement at 100k and 1M passages on 2 cores (bench/fts_floor_bench.py; not
0.5x: two threads give 1.3-1.4x the throughput of one here, and each statement's `bm25()` counts every
match of each query word for its IDF, whatever range it is limited to)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from . import rank
from .db import SqliteDatabase, statements
from .driver import sqlite3

SOURCE_BITS = 32  # passages per source < 2^32; sources < 2^31 (SQLite rowids are signed 64-bit)
# title_terms, body_terms (the measurements behind them: docs/archive/quality-log.md)
BM25_WEIGHTS = "2.0, 1.0"

SCHEMA = """
CREATE TABLE IF NOT EXISTS source_ranges (
  source_key TEXT PRIMARY KEY, no INTEGER NOT NULL UNIQUE, next_id INTEGER NOT NULL
)
"""

# The score is `bm25(...)` (rank.py: kb_bm25, the same scores without a %_docsize read per matching row) in
# SQLite's own ORDER BY ... LIMIT (a bounded sorter), not FTS5's `rank` column
# with `ORDER BY rank`: the same scores and order (ties by passage id), 0.6-0.9x the time per query on the
# scale corpus (bench/results/scale_plans.md: FTS5's sorted-rank cursor costs more per matching row).
_CANDIDATES_SQL = (
    "WITH top AS MATERIALIZED ("
    f"SELECT passages.rowid AS id, {{rank}}(passages, {BM25_WEIGHTS}) AS rank FROM passages "
    "WHERE passages MATCH ? AND passages.rowid BETWEEN ? AND ?{restriction} "
    "ORDER BY rank, passages.rowid LIMIT ?) "
    "SELECT r.doc_id, -top.rank AS score, d.acl, r.id FROM top JOIN passage_rows r ON r.id = top.id "
    "JOIN documents d ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
    "WHERE d.status = 'ready' ORDER BY top.rank, top.id"
)


@dataclass(frozen=True)
class Restriction:
    """An extra condition on the candidate passages, applied inside the FTS5 stage (before the top-k), so
    the top-k is the top-k of the restricted set. `sql` is a boolean SQL expression over `passages.rowid`
    (the passage id) with `?` placeholders bound to `params`, e.g. a document pre-filter:

        Restriction("passages.rowid IN (SELECT r.id FROM passage_rows r JOIN documents d "
                    "ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
                    "WHERE r.source_key = ? AND d.doc_id IN (?, ?))", (source_key, "a", "b"))

    (any condition on `documents` can replace the `IN`)."""

    sql: str
    params: tuple[object, ...] = ()


def candidates_sql(restriction: Restriction | None = None) -> str:
    """The candidate statement; parameters: match, first id, last id, *restriction params, limit (-1: all).
    Its score is `rank.function()`'s: kb_bm25 where it loads, else FTS5's bm25() (the same scores)."""
    return _CANDIDATES_SQL.format(
        rank=rank.function(), restriction=f" AND ({restriction.sql})" if restriction else ""
    )


def candidate_rows(
    conn: sqlite3.Connection,
    match: str,
    id_range: tuple[int, int],
    limit: int | None,
    restriction: Restriction | None = None,
) -> list[tuple[object, ...]]:
    """BM25's best `limit` passages (all with None) of the id range, ready documents only, best first:
    (doc_id, score, acl JSON, passage id)."""
    params = (match, *id_range, *(restriction.params if restriction else ()), -1 if limit is None else limit)
    return conn.execute(candidates_sql(restriction), params).fetchall()


_DETAILS_SQL = (
    "SELECT r.id, r.text, r.pages, d.title, d.revision, d.acl, d.structured_source, r.passage_no, "
    "d.metadata FROM passage_rows r "
    "JOIN documents d ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
    "WHERE d.status = 'ready' AND r.id IN ({marks})"
)


# A source this large is searched in slices at once when ranked by bm25(): at 100k passages 0.7-0.85x the
# time of one statement on 2 cores, at 10k a prototype's hand-off cost more than it saved (1.65x); the
# threshold lies between, not measured at 50k itself. Ranked by kb_bm25 (rank.py) slices cost more than they
# save (1.14x at 100k, 1.28x at 1M, bench/fts_floor_bench.py): each repeats the IDF count of every query
# word over the whole table, now a large share of the statement, and pays the hand-off.
SLICE_MIN_PASSAGES = 50_000
MAX_SLICES = 4


def default_slices() -> int:
    """Slices of a large source's top-k searched at once: 1 (never sliced) with kb_bm25; with bm25() the CPUs
    this process may run on, at most MAX_SLICES."""
    if rank.function() == rank.FUNCTION:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_SLICES, cpus))


class SlicedCandidates:
    """The candidate statement of a large source run over `slices` consecutive ranges of its passage ids at
    once, each on a connection of its own thread (SQLite steps a statement without Python's lock), merged
    by (score, id): the same rows, scores and order as one statement over the whole range, because FTS5's
    BM25 statistics are the table's, not the range's, and the ranges split the ids without overlap. Only
    an unrestricted statement is sliced (a restriction's subquery would be evaluated once per slice).
    Each slice stops at the caller's deadline as the caller's own statement does."""

    def __init__(self, db: SqliteDatabase, slices: int, min_passages: int = SLICE_MIN_PASSAGES) -> None:
        self._db = db
        self.slices = slices
        self.min_passages = min_passages
        self._pool = ThreadPoolExecutor(slices - 1, thread_name_prefix="kb-fts-slice") if slices > 1 else None

    def rows(
        self,
        conn: sqlite3.Connection,
        match: str,
        id_range: tuple[int, int],
        limit: int | None,
        restriction: Restriction | None = None,
        deadline: float | None = None,
        used: int = 0,
    ) -> list[tuple[object, ...]]:
        """What `candidate_rows` answers, the work shared among the slices when the source is large (`used`:
        the ids it has used, `source_extent`)."""
        spans = self.spans(id_range, used) if restriction is None else [id_range]
        if len(spans) == 1 or self._pool is None:
            return candidate_rows(conn, match, id_range, limit, restriction)
        try:
            futures: list[Future[list[tuple[object, ...]]]] = [
                self._pool.submit(self._slice, match, span, limit, deadline) for span in spans[1:]
            ]
        except RuntimeError:  # closed (the pool takes no new work): one statement, as before
            return candidate_rows(conn, match, id_range, limit, restriction)
        rows = candidate_rows(conn, match, spans[0], limit)
        for future in futures:
            rows.extend(future.result())
        rows.sort(key=_best_first)
        return rows if limit is None else rows[:limit]

    def spans(self, id_range: tuple[int, int], used: int) -> list[tuple[int, int]]:
        """The id ranges a source's passages are searched in: the whole range below `min_passages` ids used,
        else `slices` of equal width, the last reaching the end of the range (so ids written since
        `used` was read are searched too)."""
        first, last = id_range
        if used < self.min_passages or self.slices < 2:
            return [id_range]
        width = -(-used // self.slices)
        starts = [first + i * width for i in range(self.slices)]
        return [(a, b - 1) for a, b in pairwise(starts)] + [(starts[-1], last)]

    def _slice(
        self, match: str, span: tuple[int, int], limit: int | None, deadline: float | None
    ) -> list[tuple[object, ...]]:
        conn = self._db.connection()  # this thread's own
        with until(conn, deadline):
            return candidate_rows(conn, match, span, limit)

    def close(self) -> None:
        """No new slice starts (later searches run one statement); one under way ends by its deadline (its
        thread then exits)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _best_first(row: tuple[Any, ...]) -> tuple[float, int]:
    """The statement's own order: score descending, then passage id."""
    return -row[1], row[3]


@contextmanager
def until(conn: sqlite3.Connection, deadline: float | None) -> Iterator[None]:
    """`conn`'s statements in the block are interrupted (OperationalError "interrupted") once
    `time.perf_counter()` passes `deadline` (None: never); the connection is unbounded again after it."""
    if deadline is None:
        yield
        return
    conn.set_progress_handler(lambda: 1 if time.perf_counter() > deadline else 0, 10_000)
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)


def passage_details(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """Of passages still there and of ready documents: id -> (text, pages, title, revision, acl JSON,
    structured_source, passage number, metadata JSON). A passage id names one version of its document
    (ids are never reused), so the caller compares the ACL with the one it chose by and drops the hit when
    it moved in between."""
    if not ids:
        return {}
    rows = conn.execute(_DETAILS_SQL.format(marks=",".join("?" * len(ids))), list(ids))
    return {row[0]: row[1:] for row in rows}


def create_schema(conn: sqlite3.Connection) -> None:
    statements(conn, SCHEMA)


def source_range(conn: sqlite3.Connection, source_key: str) -> tuple[int, int] | None:
    """The passage ids the source may own (None: it has never had a passage)."""
    extent = source_extent(conn, source_key)
    return None if extent is None else extent[0]


def source_extent(conn: sqlite3.Connection, source_key: str) -> tuple[tuple[int, int], int] | None:
    """The source's range and how many of its ids are used (deleted passages' included), in one read."""
    row = conn.execute("SELECT no, next_id FROM source_ranges WHERE source_key = ?", (source_key,)).fetchone()
    if row is None:
        return None
    id_range = _range(row[0])
    return id_range, int(row[1]) - id_range[0]


def _range(no: int) -> tuple[int, int]:
    return no << SOURCE_BITS, ((no + 1) << SOURCE_BITS) - 1


def allocate_ids(conn: sqlite3.Connection, source_key: str, count: int) -> int:
    """The first of `count` fresh passage ids of the source (inside the caller's write transaction)."""
    row = conn.execute(
        "UPDATE source_ranges SET next_id = next_id + ? WHERE source_key = ? RETURNING next_id - ?",
        (count, source_key, count),
    ).fetchone()
    if row is not None:
        if row[0] + count - 1 > _range(_number(conn, source_key))[1]:
            raise OverflowError("a source holds fewer than 2^32 passages")
        return int(row[0])
    no = conn.execute("SELECT coalesce(max(no) + 1, 1) FROM source_ranges").fetchone()[0]
    first = _range(no)[0]
    conn.execute("INSERT INTO source_ranges VALUES (?, ?, ?)", (source_key, no, first + count))
    return first


def _number(conn: sqlite3.Connection, source_key: str) -> int:
    return int(conn.execute("SELECT no FROM source_ranges WHERE source_key = ?", (source_key,)).fetchone()[0])


def plan(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[str]:
    """`EXPLAIN QUERY PLAN` of a statement, one line per step (bench/results/scale_plans.md, the tests)."""
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
