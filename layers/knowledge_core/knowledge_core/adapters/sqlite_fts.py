"""Embedded search backend: SQLite FTS5 on a local file, BM25 over passages rolled up to parent documents."""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time
from pathlib import Path

from ..domain.analyzer import index_terms, query_terms
from ..domain.errors import SourceFailure
from ..domain.models import Document, DocumentAcl, Viewer
from ..domain.passages import split_passages
from ..ports import Hit, SearchBackend, SourceQuery, SourceResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
  source_key TEXT NOT NULL, doc_id TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL,
  revision TEXT NOT NULL, status TEXT NOT NULL, acl TEXT NOT NULL, structured_source TEXT,
  updated_at REAL NOT NULL, PRIMARY KEY (source_key, doc_id)
);
CREATE TABLE IF NOT EXISTS passage_rows (
  id INTEGER PRIMARY KEY, source_key TEXT NOT NULL, doc_id TEXT NOT NULL, passage_no INTEGER NOT NULL,
  text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS passage_rows_doc ON passage_rows (source_key, doc_id);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
  title_terms, body_terms, tokenize = 'unicode61 remove_diacritics 0'
);
"""
# BM25 column weights: title_terms, body_terms (bench/QUALITY.md has the measurements behind them).
_WEIGHTS = "2.0, 1.0"
# Bumped whenever index analysis changes: an index written by an older analyzer is rebuilt on open.
ANALYZER_VERSION = 2
CJK_UNIGRAMS = False
_CANDIDATES_PER_DOC = 8
_SEARCH_SQL = (
    f"SELECT r.doc_id, r.text, -bm25(passages, {_WEIGHTS}) AS score, d.title, d.revision, d.acl, "
    "d.structured_source FROM passages JOIN passage_rows r ON r.id = passages.rowid "
    "JOIN documents d ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
    "WHERE passages MATCH ? AND r.source_key = ? AND d.status = 'ready' "
    f"ORDER BY bm25(passages, {_WEIGHTS}) LIMIT ? OFFSET ?"
)


def _match_expression(query: str) -> str | None:
    tokens = query_terms(query, CJK_UNIGRAMS)
    if not tokens:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)


class SqliteFtsBackend(SearchBackend):
    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._local = threading.local()
        self._write_lock = threading.Lock()
        with self._write_lock:
            conn = self._conn()
            conn.executescript(_SCHEMA)
            if conn.execute("PRAGMA user_version").fetchone()[0] != ANALYZER_VERSION:
                self._reindex(conn)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    # --- search -----------------------------------------------------------------------------------
    def search(self, queries: list[SourceQuery], text: str, viewer: Viewer) -> list[SourceResult]:
        match = _match_expression(text)
        return [self._search_one(q, match, viewer) for q in queries]

    def _search_one(self, q: SourceQuery, match: str | None, viewer: Viewer) -> SourceResult:
        started = time.perf_counter()
        result = SourceResult(key=q.key)
        if match is None:
            return result
        conn = self._conn()
        deadline = started + q.timeout_s
        conn.set_progress_handler(lambda: 1 if time.perf_counter() > deadline else 0, 10_000)
        best: dict[str, Hit] = {}
        hidden: set[str] = set()
        page = q.top_k * _CANDIDATES_PER_DOC + 16
        try:
            # Passages the viewer may not see, or more passages of documents already kept, must not crowd
            # out visible documents: keep paging (best score first) until top_k documents or no more rows.
            for offset in itertools.count(0, page):
                rows = conn.execute(_SEARCH_SQL, (match, q.key, page, offset)).fetchall()
                for doc_id, passage, score, title, revision, acl, structured in rows:
                    if score < q.min_score:
                        break
                    if doc_id in best or doc_id in hidden:
                        continue
                    if not DocumentAcl.model_validate_json(acl).visible_to(viewer):
                        hidden.add(doc_id)
                        continue
                    best[doc_id] = Hit(
                        q.key,
                        doc_id,
                        title,
                        revision,
                        float(score),
                        passage,
                        json.loads(structured) if structured else None,
                    )
                    if len(best) == q.top_k:
                        break
                else:
                    if len(rows) == page:
                        continue
                break
        except sqlite3.OperationalError as exc:
            kind = "timeout" if "interrupt" in str(exc) else "unavailable"
            result.error = SourceFailure(kind)
            return result
        finally:
            conn.set_progress_handler(None, 0)
        result.hits = list(best.values())
        result.ms = (time.perf_counter() - started) * 1000
        return result

    # --- documents ------------------------------------------------------------------------------
    def get_document(self, source_key: str, doc_id: str) -> Document | None:
        try:
            row = (
                self._conn()
                .execute(
                    "SELECT title, body, status, acl, structured_source FROM documents "
                    "WHERE source_key=? AND doc_id=?",
                    (source_key, doc_id),
                )
                .fetchone()
            )
        except sqlite3.Error:
            raise SourceFailure("unavailable") from None
        if row is None:
            return None
        title, body, status, acl, structured = row
        return Document(
            source_key=source_key,
            doc_id=doc_id,
            title=title,
            body=body,
            status=status,
            acl=DocumentAcl.model_validate_json(acl),
            structured_source=json.loads(structured) if structured else None,
        )

    def put_documents(self, documents: list[Document]) -> None:
        with self._write_lock:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for doc in documents:
                    self._delete(conn, doc.source_key, doc.doc_id)
                    conn.execute(
                        "INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?)",
                        (
                            doc.source_key,
                            doc.doc_id,
                            doc.title,
                            doc.body,
                            doc.revision,
                            doc.status,
                            doc.acl.model_dump_json(),
                            json.dumps(doc.structured_source) if doc.structured_source else None,
                            time.time(),
                        ),
                    )
                    self._index(conn, doc.source_key, doc.doc_id, doc.title, doc.body)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _index(conn: sqlite3.Connection, source_key: str, doc_id: str, title: str, body: str) -> None:
        title_terms = " ".join(index_terms(title, CJK_UNIGRAMS))
        for i, passage in enumerate(split_passages(body)):
            row_id = conn.execute(
                "INSERT INTO passage_rows (source_key, doc_id, passage_no, text) VALUES (?,?,?,?)",
                (source_key, doc_id, i, passage),
            ).lastrowid
            conn.execute(
                "INSERT INTO passages (rowid, title_terms, body_terms) VALUES (?,?,?)",
                (row_id, title_terms, " ".join(index_terms(passage, CJK_UNIGRAMS))),
            )

    def _reindex(self, conn: sqlite3.Connection) -> None:
        """Re-split and re-analyze every stored document (the analyzer or the splitter changed)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM passages")
            conn.execute("DELETE FROM passage_rows")
            for source_key, doc_id, title, body in conn.execute(
                "SELECT source_key, doc_id, title, body FROM documents"
            ).fetchall():
                self._index(conn, source_key, doc_id, title, body)
            conn.execute(f"PRAGMA user_version = {ANALYZER_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _delete(conn: sqlite3.Connection, source_key: str, doc_id: str) -> int:
        conn.execute(
            "DELETE FROM passages WHERE rowid IN "
            "(SELECT id FROM passage_rows WHERE source_key=? AND doc_id=?)",
            (source_key, doc_id),
        )
        conn.execute("DELETE FROM passage_rows WHERE source_key=? AND doc_id=?", (source_key, doc_id))
        return conn.execute(
            "DELETE FROM documents WHERE source_key=? AND doc_id=?", (source_key, doc_id)
        ).rowcount

    def delete_document(self, source_key: str, doc_id: str) -> bool:
        with self._write_lock:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            deleted = self._delete(conn, source_key, doc_id)
            conn.execute("COMMIT")
        return deleted > 0

    def set_document_status(self, source_key: str, doc_id: str, status: str) -> bool:
        with self._write_lock:
            cur = self._conn().execute(
                "UPDATE documents SET status=?, updated_at=? WHERE source_key=? AND doc_id=?",
                (status, time.time(), source_key, doc_id),
            )
        return cur.rowcount > 0

    def healthy(self, timeout_s: float = 1.0) -> bool:
        try:
            self._conn().execute("SELECT 1 FROM documents LIMIT 1").fetchall()
            return True
        except sqlite3.Error:
            return False
