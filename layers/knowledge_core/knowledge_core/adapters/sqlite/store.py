"""Embedded state on SQLite: registry, sessions, runs, turn records and the budget ledger in one file
(`state.sqlite3` beside the search index under `kb serve --state`).

Same contracts as the DynamoDB table (tests/contract/test_state_contract.py runs both): every
read-modify-write is one `BEGIN IMMEDIATE` transaction, so conditional writes, the turn claim and the
ledger's "whole chain or nothing, never overspent" hold across threads and processes sharing the file."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ...domain.errors import StateUnavailable
from ...domain.models import (
    AgentDefinition,
    token_id_of,
)
from .db import BUSY_TIMEOUT_S, SqliteDatabase, statements
from .driver import sqlite3

APPLICATION_ID = 0x4B425354  # "KBST"
RUN_TTL_SECONDS = 7 * 86400
LEDGER_TTL_SECONDS = 7 * 86400
T = TypeVar("T")
_TRANSPORT = (sqlite3.OperationalError, sqlite3.InternalError)


def _schema_v1(conn: sqlite3.Connection) -> None:
    statements(
        conn,
        """
        CREATE TABLE sources (key TEXT PRIMARY KEY, definition TEXT NOT NULL, state TEXT,
                              created_at REAL NOT NULL);
        CREATE TABLE agents (key TEXT PRIMARY KEY, definition TEXT NOT NULL, created_at REAL NOT NULL);
        CREATE TABLE workspaces (route TEXT PRIMARY KEY, agent TEXT NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE sessions (token_hash TEXT PRIMARY KEY, session TEXT NOT NULL,
                               expires_at INTEGER NOT NULL);
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, client_id TEXT NOT NULL,
                           route TEXT NOT NULL, state TEXT NOT NULL, turn_id TEXT,
                           expires_at INTEGER NOT NULL);
        CREATE TABLE turns (key TEXT PRIMARY KEY, request_hash TEXT NOT NULL, state TEXT NOT NULL,
                            claim TEXT NOT NULL, claimed_at REAL NOT NULL, expires_at INTEGER NOT NULL,
                            run_id TEXT, response TEXT);
        CREATE TABLE ledger_entries (
          root_id TEXT NOT NULL, invocation_id TEXT NOT NULL, agent TEXT NOT NULL, parent TEXT,
          depth INTEGER NOT NULL, max_retrievals INTEGER NOT NULL, max_queries INTEGER NOT NULL,
          max_chars INTEGER NOT NULL, retrievals INTEGER NOT NULL, chars INTEGER NOT NULL,
          per_source TEXT NOT NULL, deadline REAL, seq INTEGER NOT NULL, expires_at INTEGER NOT NULL,
          PRIMARY KEY (root_id, invocation_id));
        CREATE TABLE ledger_citations (
          root_id TEXT NOT NULL, fingerprint TEXT NOT NULL, citation_id TEXT NOT NULL,
          knowledge TEXT NOT NULL, doc_id TEXT NOT NULL, content TEXT NOT NULL, retrieval_id TEXT NOT NULL,
          invocation_id TEXT NOT NULL, created_at REAL NOT NULL, expires_at INTEGER NOT NULL,
          PRIMARY KEY (root_id, fingerprint));
        """,
    )


def _schema_v2(conn: sqlite3.Connection) -> None:
    """Runs carry their tenant (S3); sessions are listed and revoked by a token id (S7)."""
    statements(
        conn,
        """
        ALTER TABLE runs ADD COLUMN tenant TEXT;
        ALTER TABLE sessions ADD COLUMN token_id TEXT;
        CREATE UNIQUE INDEX sessions_by_token_id ON sessions (token_id);
        """,
    )
    hashes = [h for (h,) in conn.execute("SELECT token_hash FROM sessions").fetchall()]
    conn.executemany(
        "UPDATE sessions SET token_id = ? WHERE token_hash = ?", [(token_id_of(h), h) for h in hashes]
    )


def _schema_v3(conn: sqlite3.Connection) -> None:
    """Ingestion jobs (I-INGEST): one row per job (counters, lease) and one per document of a job."""
    statements(
        conn,
        """
        CREATE TABLE ingestion_jobs (
          job_id TEXT PRIMARY KEY, source_key TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
          total INTEGER NOT NULL, queued INTEGER NOT NULL, done INTEGER NOT NULL, unchanged INTEGER NOT NULL,
          failed INTEGER NOT NULL, deleted INTEGER NOT NULL, passages INTEGER NOT NULL,
          created_at REAL NOT NULL, started_at REAL, updated_at REAL, finished_at REAL,
          worker TEXT, lease_until REAL NOT NULL, expires_at INTEGER NOT NULL);
        CREATE INDEX ingestion_jobs_source ON ingestion_jobs (source_key, created_at);
        CREATE INDEX ingestion_jobs_open ON ingestion_jobs (state, created_at);
        CREATE TABLE ingestion_documents (
          job_id TEXT NOT NULL, seq INTEGER NOT NULL, doc_id TEXT NOT NULL, payload BLOB,
          state TEXT NOT NULL, error TEXT, passages INTEGER NOT NULL, expires_at INTEGER NOT NULL,
          PRIMARY KEY (job_id, seq));
        """,
    )


def _schema_v4(conn: sqlite3.Connection) -> None:
    """Ingestion jobs can be cancelled, and a document counts the batches begun with it."""
    statements(
        conn,
        """
        ALTER TABLE ingestion_jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ingestion_documents ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
        """,
    )


def _schema_v5(conn: sqlite3.Connection) -> None:
    """A turn record binds the principal that claimed it (A-TURN); older records have none."""
    statements(conn, "ALTER TABLE turns ADD COLUMN principal TEXT;")


MIGRATIONS = [_schema_v1, _schema_v2, _schema_v3, _schema_v4, _schema_v5]
_EXPIRING = (
    "sessions",
    "runs",
    "turns",
    "ledger_entries",
    "ledger_citations",
    "ingestion_jobs",
    "ingestion_documents",
)


def open_state_database(path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> SqliteDatabase:
    """The state file, migrated forward; expired records (sessions, runs, turns, ledgers) purged."""
    db = SqliteDatabase(
        path, application_id=APPLICATION_ID, migrations=MIGRATIONS, busy_timeout_s=busy_timeout_s
    )
    with db.transaction() as conn:
        for table in _EXPIRING:
            conn.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (int(time.time()),))
    return db


class SqliteStore:
    """What every store of the state file shares: its transactions, with storage faults as 503."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._db.transaction() as conn:
                yield conn
        except _TRANSPORT as exc:
            raise StateUnavailable() from exc

    @contextmanager
    def _read(self, *, consistent: bool = False) -> Iterator[sqlite3.Connection]:
        """Reads: one statement is consistent on its own; `consistent` holds several in one snapshot."""
        try:
            if consistent:
                with self._db.snapshot() as conn:
                    yield conn
            else:
                yield self._db.connection()
        except _TRANSPORT as exc:
            raise StateUnavailable() from exc


def _placeholders(values: Sequence[object]) -> str:
    return ",".join("?" * len(values))


def _agents(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, AgentDefinition | None]:
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = conn.execute(
        f"SELECT key, definition FROM agents WHERE key IN ({_placeholders(wanted)})", wanted
    ).fetchall()
    found = {key: AgentDefinition.model_validate_json(definition) for key, definition in rows}
    return {key: found.get(key) for key in wanted}
