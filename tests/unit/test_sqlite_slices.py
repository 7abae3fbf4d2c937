"""A-SEARCH (SQLite): a large source's FTS5 top-k is read in slices of its id range at once, one thread and
connection each, with the same rows, scores and order as one statement; and every embedded store of a
process uses one SQLite library (adapters/sqlite/driver.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite import candidates, driver
from knowledge_core.adapters.sqlite.candidates import SlicedCandidates
from knowledge_core.adapters.sqlite.db import SqliteDatabase
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery

from bench.scale_corpus import Corpus

VIEWER = Viewer(tenant="acme", subject="alice")


def _doc(source: str, doc_id: str, body: str, tenant: str = "acme", title: str = "t") -> Document:
    return Document(source_key=source, doc_id=doc_id, title=title, body=body, acl=DocumentAcl(tenant=tenant))


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Corpus]:
    """2,000 passages of the scale corpus in one source, a few of another tenant, and a second source
    written after them (its ids lie in its own range)."""
    corpus = Corpus(2_000, seed=11)
    path = tmp_path_factory.mktemp("slices") / "search.sqlite3"
    backend = SqliteFtsBackend(path, slices=1)
    docs = [
        _doc("s@1", d.doc_id, d.body, title=d.title, tenant="other" if i % 7 == 0 else "acme")
        for i, d in enumerate(corpus.documents())
    ]
    backend.put_documents(docs)
    backend.put_documents([_doc("other@1", "x", corpus.document(0).body)])
    backend.close()
    return path, corpus


def _matches(corpus: Corpus, n: int = 40) -> list[str]:
    return [" OR ".join(f'"{w}"' for w in q.text.split()) for q in corpus.queries(n)]


def test_slices_split_the_used_ids_without_overlap_the_last_to_the_range_end() -> None:
    db = SqliteDatabase(":memory:")
    sliced = SlicedCandidates(db, 3, min_passages=10)
    try:
        assert sliced.spans((100, 999), 9) == [(100, 999)]  # below the threshold: one statement
        spans = sliced.spans((100, 999), 10)
        assert spans == [(100, 103), (104, 107), (108, 999)]
        assert SlicedCandidates(db, 1, min_passages=1).spans((0, 99), 50) == [(0, 99)]
    finally:
        sliced.close()


@pytest.mark.parametrize("slices", [2, 3, 4])
def test_sliced_top_k_equals_one_statement(corpus_file: tuple[Path, Corpus], slices: int) -> None:
    """Every depth, every query: the same (doc, score, acl, passage id) rows in the same order, the
    deeper fetch (every match) included."""
    path, corpus = corpus_file
    backend = SqliteFtsBackend(path, slices=1)
    conn = backend._conn()
    extent = candidates.source_extent(conn, "s@1")
    assert extent is not None
    id_range, used = extent
    assert used >= 1_500
    sliced = SlicedCandidates(backend._db, slices, min_passages=1)
    assert len(sliced.spans(id_range, used)) == slices
    compared = 0
    try:
        for match in _matches(corpus):
            for limit in (1, 5, 40, None):
                expected = candidates.candidate_rows(conn, match, id_range, limit)
                assert sliced.rows(conn, match, id_range, limit, used=used) == expected
                compared += len(expected)
    finally:
        sliced.close()
        backend.close()
    assert compared > 2_000


def test_sliced_search_answers_as_one_statement(corpus_file: tuple[Path, Corpus]) -> None:
    """Through the backend: the same hits (documents, scores, cited passages), hidden documents of another
    tenant skipped and the deeper fetch taken alike."""
    path, corpus = corpus_file
    one = SqliteFtsBackend(path, slices=1)
    sliced = SqliteFtsBackend(path, slices=3)
    sliced._sliced = SlicedCandidates(sliced._db, 3, min_passages=1)
    try:
        for q in corpus.queries(30):
            for top_k in (1, 3, 10):
                query = SourceQuery("s@1", top_k, 0.0)
                [a] = one.search([query], QueryAnalysis(q.text), VIEWER)
                [b] = sliced.search([query], QueryAnalysis(q.text), VIEWER)
                assert a.error is None and b.error is None
                assert [(h.doc_id, h.score, h.passage) for h in b.hits] == [
                    (h.doc_id, h.score, h.passage) for h in a.hits
                ]
    finally:
        one.close()
        sliced.close()


def test_a_slice_past_the_deadline_is_a_typed_timeout(corpus_file: tuple[Path, Corpus]) -> None:
    """A slice in another thread stops at the caller's deadline too: the statement is interrupted there
    (an OperationalError the search types as `timeout`), never an answer from fewer slices."""
    path, corpus = corpus_file
    backend = SqliteFtsBackend(path, slices=2)
    backend._sliced = SlicedCandidates(backend._db, 2, min_passages=1)
    conn = backend._conn()
    extent = candidates.source_extent(conn, "s@1")
    assert extent is not None
    words = [w for q in corpus.queries(20) for w in q.text.split()]
    match = " OR ".join(f'"{w}"' for w in words)
    try:
        with pytest.raises(driver.sqlite3.OperationalError, match="interrupt"):
            past = time.perf_counter() - 1
            backend._sliced.rows(conn, match, extent[0], None, deadline=past, used=extent[1])
        query = SourceQuery("s@1", 10, 0.0, timeout_s=0.0)
        [result] = backend.search([query], QueryAnalysis(" ".join(words)), VIEWER)
        assert result.error is not None and result.error.kind == "timeout"
    finally:
        backend.close()


def test_a_closed_slicer_answers_with_one_statement(corpus_file: tuple[Path, Corpus]) -> None:
    path, corpus = corpus_file
    backend = SqliteFtsBackend(path, slices=1)
    conn = backend._conn()
    extent = candidates.source_extent(conn, "s@1")
    assert extent is not None
    sliced = SlicedCandidates(backend._db, 2, min_passages=1)
    sliced.close()
    match = _matches(corpus, 1)[0]
    try:
        assert sliced.rows(conn, match, extent[0], 10, used=extent[1]) == candidates.candidate_rows(
            conn, match, extent[0], 10
        )
    finally:
        backend.close()


def test_default_slices_are_the_usable_cpus_at_most_four_with_bm25_and_one_with_kb_bm25(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slices pay with bm25() (0.62-0.85x one statement at 100k-1M), not with kb_bm25 (1.14-1.28x)."""
    from knowledge_core.adapters.sqlite import rank

    monkeypatch.setattr(rank, "function", lambda: rank.BUILTIN)
    assert 1 <= candidates.default_slices() <= candidates.MAX_SLICES
    monkeypatch.setattr(rank, "function", lambda: rank.FUNCTION)
    assert candidates.default_slices() == 1


def test_every_embedded_store_uses_the_one_driver() -> None:
    """One SQLite library per process (two copies would drop each other's POSIX locks on a shared file):
    every adapter module's `sqlite3` is the driver's, the newer of pysqlite3 and the standard library's."""
    from knowledge_core.adapters.sqlite import (
        db,
        dense_cache,
        filters,
        fts_compaction,
        ledger,
        search,
        state,
        store,
        turns,
    )

    for module in (candidates, db, dense_cache, filters, fts_compaction, ledger, search, state, store, turns):
        assert module.sqlite3 is driver.sqlite3, module.__name__
    try:
        from pysqlite3 import dbapi2
    except ImportError:
        assert driver.sqlite3 is sys.modules["sqlite3"]
    else:
        import sqlite3 as stdlib

        newer = dbapi2.sqlite_version_info >= stdlib.sqlite_version_info
        assert driver.sqlite3 is (dbapi2 if newer else stdlib)


def test_driver_falls_back_to_the_standard_library(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3 as stdlib

    monkeypatch.setitem(sys.modules, "pysqlite3", None)  # an import of it fails
    assert driver._choose() is stdlib  # (the module's own choice, made at import, stays)


def test_driver_keeps_the_standard_library_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3 as stdlib

    monkeypatch.setenv("KB_SQLITE_LIBRARY", "stdlib")
    assert driver._choose() is stdlib


@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_citing_reads_the_passages_its_search_already_ranked(
    corpus_file: tuple[Path, Corpus], top_k: int
) -> None:
    """`passage_candidates` after a search in the same thread: a document with at least `per_doc` passages
    among the search's top rows (or a search that read every match) is answered from them — no full-text
    statement — with the same passages, scores and order as asking the index; the others are asked."""
    path, corpus = corpus_file
    backend = SqliteFtsBackend(path, slices=1)
    fresh = SqliteFtsBackend(path, slices=1)  # never searched: always asks the index
    conn = backend._conn()
    answered_from_rows = 0
    try:
        for q in corpus.queries(30):
            analysis = QueryAnalysis(q.text)
            [result] = backend.search([SourceQuery("s@1", top_k, 0.0)], analysis, VIEWER)
            hits = result.hits
            statements: list[str] = []
            conn.set_trace_callback(statements.append)
            try:
                got = backend.passage_candidates(hits, analysis, 3, 5.0)
            finally:
                conn.set_trace_callback(None)
            expected = fresh.passage_candidates(hits, analysis, 3, 5.0)
            assert {k: [(h.passage, h.score, c) for h, c in v] for k, v in got.items()} == {
                k: [(h.passage, h.score, c) for h, c in v] for k, v in expected.items()
            }
            asked = sum("MATCH" in s for s in statements)
            assert asked <= len(hits)
            answered_from_rows += len(hits) - asked
    finally:
        backend.close()
        fresh.close()
    assert answered_from_rows > 0


def test_citing_after_another_search_asks_the_index(corpus_file: tuple[Path, Corpus]) -> None:
    """The rows kept are the thread's last search's, by source and query: another query's hits (or a
    search of another thread) are never answered from them."""
    path, corpus = corpus_file
    backend = SqliteFtsBackend(path, slices=1)
    first, second = corpus.queries(2)
    try:
        [result] = backend.search([SourceQuery("s@1", 3, 0.0)], QueryAnalysis(first.text), VIEWER)
        backend.search([SourceQuery("s@1", 3, 0.0)], QueryAnalysis(second.text), VIEWER)
        assert backend._remembered(("s@1", result.hits[0].doc_id), "x", 1) is None
        conn = backend._conn()
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            backend.passage_candidates(result.hits, QueryAnalysis(first.text), 3, 5.0)
        finally:
            conn.set_trace_callback(None)
        assert sum("MATCH" in s for s in statements) == len(result.hits)
    finally:
        backend.close()
