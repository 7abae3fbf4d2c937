"""The embedded search backend's storage faults on writes (I-INGEST, R-ADMIN): a file locked past its busy
timeout, full, or failing I/O is a typed transient `SourceFailure` (an ingestion job waits and retries it
without counting an attempt, the admin API answers 503) that writes nothing and leaves the connection
usable; an error of the statement itself (a schema bug) is not hidden behind a retry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite.db import SqliteDatabase, write_faults
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery

KEY = "docs@1.0.0"
VIEWER = Viewer(tenant="acme", subject="a")


def _doc(doc_id: str, body: str) -> Document:
    return Document(source_key=KEY, doc_id=doc_id, title=doc_id, body=body, acl=DocumentAcl(tenant="acme"))


def _found(backend: SqliteFtsBackend, text: str) -> list[str]:
    (result,) = backend.search([SourceQuery(KEY, 5, 0.0)], QueryAnalysis(text), VIEWER)
    return [h.doc_id for h in result.hits]


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[SqliteFtsBackend, sqlite3.Connection]]:
    """A backend with a short busy timeout, its file's write lock held by another connection."""
    path = tmp_path / "search.sqlite3"
    backend = SqliteFtsBackend(path, busy_timeout_s=0.1)
    backend.put_documents([_doc("old", "the capybara grazes by the river")])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    yield backend, holder
    if holder.in_transaction:
        holder.execute("ROLLBACK")
    holder.close()
    backend.close()


def test_i_ingest_locked_file_write_is_transient_and_writes_nothing(locked) -> None:
    backend, holder = locked
    for write in (
        lambda: backend.put_documents([_doc("new", "the okapi sleeps in the forest")]),
        lambda: backend.delete_document(KEY, "old"),
        lambda: backend.set_document_status(KEY, "old", "disabled"),
    ):
        with pytest.raises(SourceFailure) as caught:
            write()
        assert caught.value.kind == "unavailable" and caught.value.transient
        assert "SQLITE_BUSY" in str(caught.value) and "okapi" not in str(caught.value)
    assert _found(backend, "okapi") == [] and _found(backend, "capybara") == ["old"]
    holder.execute("ROLLBACK")  # free again: the same backend writes
    backend.put_documents([_doc("new", "the okapi sleeps in the forest")])
    assert _found(backend, "okapi") == ["new"]


def test_i_ingest_full_file_is_transient_and_the_connection_stays_usable(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "small.sqlite3")
    with db.transaction() as conn:
        conn.execute("CREATE TABLE blobs (b BLOB)")
    db.connection().execute("PRAGMA max_page_count = 8")  # a disk that is full after a few pages
    with pytest.raises(SourceFailure) as caught, write_faults(), db.transaction() as conn:
        conn.execute("INSERT INTO blobs VALUES (zeroblob(1000000))")
    assert caught.value.transient and "SQLITE_FULL" in str(caught.value)
    assert not db.connection().in_transaction
    with db.transaction() as conn:  # rolled back whole: the next transaction starts and commits
        conn.execute("INSERT INTO blobs VALUES (x'00')")
    assert db.connection().execute("SELECT count(*) FROM blobs").fetchone() == (1,)


def test_i_ingest_schema_error_is_not_a_retried_failure(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    backend = SqliteFtsBackend(path)
    with sqlite3.connect(path) as other:
        other.execute("DROP TABLE documents")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        backend.put_documents([_doc("new", "the okapi sleeps")])
    backend.close()
