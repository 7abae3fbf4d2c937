"""A-SEARCH: the embedded full-text index is compacted in the background when writes leave it fragmented —
the structure record read right, the answers unchanged, small writes after a compaction never rewriting
the index, writers never blocked for long, and a stop honoured within a slice."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite import fts_compaction
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.fts_compaction import Compactor, compact, fragmented, segment_pages
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.ports import QueryAnalysis, SourceQuery

from tests.unit.test_sqlite_scale import VIEWER, _doc

SOURCE = "s@1"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


@pytest.fixture(autouse=True)
def _no_background(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's own compactor waits an hour: each test drives compaction itself."""
    monkeypatch.setattr(fts_compaction, "QUIET_S", 3600.0)


def _body(n: int) -> str:
    return " ".join(WORDS[(n * 7 + i) % len(WORDS)] + str(i % 5) for i in range(60))


def _fragmented_backend(path: Path, batches: int = 12, per_batch: int = 20) -> SqliteFtsBackend:
    """A file written in `batches` transactions (one FTS5 segment each, before automerge)."""
    backend = SqliteFtsBackend(path)
    for b in range(batches):
        backend.put_documents([_doc(SOURCE, f"d{b}-{i}", _body(b * per_batch + i)) for i in range(per_batch)])
    return backend


def _leaf_pages(conn: sqlite3.Connection) -> list[int]:
    """Leaf pages per segment counted from the data table itself (rowid = segid << 37 | dlidx/height bits
    << 31 | page): what the structure record must agree with."""
    rows = conn.execute(
        "SELECT id >> 37, count(*) FROM passages_data WHERE id > 10 AND ((id >> 31) & 63) = 0 GROUP BY 1"
    ).fetchall()
    return sorted(n for _, n in rows)


def _answers(backend: SqliteFtsBackend) -> list[list[tuple[str, float, str]]]:
    out = []
    for words in (["alpha0", "beta1"], ["gamma2"], ["kappa4", "lambda3", "zeta0"]):
        [result] = backend.search(
            [SourceQuery(SOURCE, 10, 0.0, 15.0)], QueryAnalysis(" ".join(words)), VIEWER
        )
        out.append([(h.doc_id, h.score, h.passage) for h in result.hits])
    return out


def test_structure_record_gives_each_segments_leaf_pages(tmp_path: Path) -> None:
    backend = _fragmented_backend(tmp_path / "s.sqlite3")
    conn = backend._conn()
    pages = segment_pages(conn)
    assert pages is not None and len(pages) > 2
    assert sorted(pages) == _leaf_pages(conn)


def test_compaction_merges_into_one_segment_and_changes_no_answer(tmp_path: Path) -> None:
    backend = _fragmented_backend(tmp_path / "s.sqlite3")
    conn = backend._conn()
    before = _answers(backend)
    ids = conn.execute("SELECT rowid FROM passages ORDER BY rowid").fetchall()
    assert fragmented(segment_pages(conn))
    assert compact(backend._db) >= 1
    assert segment_pages(conn) == _leaf_pages(conn) and len(_leaf_pages(conn)) == 1
    assert not fragmented(segment_pages(conn))
    assert _answers(backend) == before
    assert conn.execute("SELECT rowid FROM passages ORDER BY rowid").fetchall() == ids
    conn.execute("INSERT INTO passages(passages) VALUES('integrity-check')")  # raises on a damaged index
    assert compact(backend._db) == 0  # nothing left: a no-op


def test_a_small_write_after_a_compaction_does_not_rewrite_the_index(tmp_path: Path) -> None:
    backend = _fragmented_backend(tmp_path / "s.sqlite3", batches=12, per_batch=40)
    compact(backend._db)
    backend.put_documents([_doc(SOURCE, "late", _body(999))])
    pages = segment_pages(backend._conn())
    assert pages is not None and len(pages) == 2
    assert not fragmented(pages)  # one document's segment beside the index: not worth a rewrite


def test_unreadable_structure_counts_as_not_fragmented() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE passages_data (id INTEGER PRIMARY KEY, block BLOB)")
    assert segment_pages(conn) is None
    conn.execute("INSERT INTO passages_data VALUES (10, x'0000000105')")  # cut short
    assert segment_pages(conn) is None
    assert not fragmented(None) and not fragmented([]) and not fragmented([7])


def test_compactor_runs_once_writes_are_quiet(tmp_path: Path) -> None:
    backend = _fragmented_backend(tmp_path / "s.sqlite3")
    compactor = Compactor(backend._db, quiet_s=0.2)
    compactor.written()
    time.sleep(0.05)
    compactor.written()  # a later write postpones the check
    assert len(segment_pages(backend._conn()) or []) > 1
    assert compactor.idle(30)
    assert compactor.compactions == 1
    assert len(segment_pages(backend._conn()) or []) == 1
    compactor.check()  # not fragmented now: nothing to do
    assert compactor.idle(30) and compactor.compactions == 1
    compactor.close()


def test_warm_compacts_a_fragmented_file(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    _fragmented_backend(path)
    backend = SqliteFtsBackend(path)  # as `kb serve` opens a file an ingest left fragmented
    assert backend._compactor is not None
    backend.warm()
    assert backend._compactor.idle(30)
    assert len(segment_pages(backend._conn()) or []) == 1
    assert backend._compactor._thread is None  # nothing pending: no thread waits
    backend.put_documents([_doc(SOURCE, "late", "omega")])
    thread = backend._compactor._thread
    assert thread is not None and thread.is_alive()  # waiting for writes to be quiet (an hour here)
    backend.close()  # a stopping process: the waiting thread ends at once
    assert not thread.is_alive()


def test_writers_proceed_during_a_compaction_and_stop_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fts_compaction, "SLICE_PAGES", 1)  # many slices: the writer lands between two
    backend = _fragmented_backend(tmp_path / "s.sqlite3", batches=16, per_batch=30)
    compactor = Compactor(backend._db, quiet_s=0.0)
    compactor.check()
    writer = SqliteFtsBackend(tmp_path / "s.sqlite3")
    errors: list[BaseException] = []

    def write() -> None:
        try:
            writer.put_documents([_doc(SOURCE, "during", "omega omicron")])
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and not errors
    running = compactor._thread
    compactor.close(timeout_s=10)
    assert running is None or not running.is_alive()
    [result] = backend.search([SourceQuery(SOURCE, 3, 0.0, 15.0)], QueryAnalysis("omega"), VIEWER)
    assert [h.doc_id for h in result.hits] == ["during"]
    backend._conn().execute("INSERT INTO passages(passages) VALUES('integrity-check')")


def test_fragmented_rule_keeps_the_target_largest() -> None:
    """`domain.segments`, one rule for both backends: segments beside the `keep` largest must hold 5 % of
    them; a shard gets one segment per started 5 GiB (Lucene's largest merged segment)."""
    from knowledge_core.domain.segments import MAX_SEGMENT_BYTES, target_segments

    assert fragmented([100, 5]) and not fragmented([100, 4])
    assert not fragmented([100, 100], keep=2) and fragmented([100, 100, 10], keep=2)
    assert not fragmented([100, 100, 9], keep=2)
    assert target_segments(0) == 1 and target_segments(MAX_SEGMENT_BYTES) == 1
    assert target_segments(MAX_SEGMENT_BYTES + 1) == 2 and target_segments(11 * 1024**3) == 3


def test_index_states_and_an_operators_compaction(tmp_path: Path) -> None:
    """`GET /admin/v1/search-indices`' view of the embedded index, and `compact(force=True)`: it merges an
    index of more than one segment even below the fragmented share, in the background."""
    backend = _fragmented_backend(tmp_path / "s.sqlite3", batches=12, per_batch=40)
    [state] = backend.index_states()
    assert state.index == "passages" and state.shards == 1 and state.target_segments == 1
    assert state.segments == len(segment_pages(backend._conn()) or []) > 1
    assert state.fragmented and state.size_bytes > 0
    assert state.merging  # pending: the writes' check waits for them to be quiet (an hour here)
    before = _answers(backend)
    assert backend.compact() is True
    assert backend._compactor is not None and backend._compactor.idle(30)
    [state] = backend.index_states()
    assert (state.segments, state.fragmented, state.merging) == (1, False, False)
    assert backend.compact() is False and backend.compact(force=True) is False  # at its target: nothing
    backend.put_documents([_doc(SOURCE, "late", _body(999))])  # a small segment beside the large one
    [state] = backend.index_states()
    assert state.segments == 2 and not state.fragmented
    assert backend.compact() is False  # the rule: not worth a rewrite
    assert backend.compact(force=True) is True  # an operator asked
    assert backend._compactor.idle(30)
    assert backend.index_states()[0].segments == 1
    assert _answers(backend) == before
    backend.close()


def test_an_in_memory_index_is_not_compacted() -> None:
    backend = SqliteFtsBackend(":memory:")
    assert backend.compact(force=True) is False
    assert backend.index_states()[0].merging is False
