"""Embedded state on SQLite: registry, sessions, runs, turn records and the budget ledger in one file
(`state.sqlite3` beside the search index under `kb serve --state`).

Same contracts as the DynamoDB table (tests/contract/test_state_contract.py runs both): every
read-modify-write is one `BEGIN IMMEDIATE` transaction, so conditional writes, the turn claim and the
ledger's "whole chain or nothing, never overspent" hold across threads and processes sharing the file."""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ..domain.budget import (
    ChainLink,
    Citation,
    CitationDraft,
    CitationMark,
    LedgerEntry,
    Limits,
    chain_mismatch,
    charged,
    effective_chain,
    plan_citations,
    retrieval_refusal,
    with_chars,
)
from ..domain.errors import BudgetExceeded, Conflict, ProtocolError, StateUnavailable
from ..domain.ingestion import (
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
from ..domain.models import (
    AgentDefinition,
    Run,
    Session,
    Source,
    SourceDefinition,
    SourceState,
    TokenSummary,
    token_id_of,
)
from ..ports import (
    BudgetLedger,
    ChainSnapshot,
    JobStore,
    Registry,
    RunStore,
    SessionStore,
    StateStores,
    TurnRecord,
    TurnStore,
)
from .sqlite_db import BUSY_TIMEOUT_S, SqliteDatabase, statements

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
    """Ingestion jobs can be cancelled, and a document counts the batches begun with it (issue 26 M1)."""
    statements(
        conn,
        """
        ALTER TABLE ingestion_jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ingestion_documents ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
        """,
    )


MIGRATIONS = [_schema_v1, _schema_v2, _schema_v3, _schema_v4]
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


def sqlite_stores(path: str | Path, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> StateStores:
    db = open_state_database(path, busy_timeout_s)
    state = SqliteState(db)
    return StateStores(
        registry=state,
        sessions=state,
        runs=state,
        turns=SqliteTurnStore(db),
        ledger=SqliteLedger(db),
        jobs=SqliteJobStore(db),
    )


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


class SqliteState(SqliteStore, Registry, SessionStore, RunStore):
    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        self._definitions: dict[str, SourceDefinition] = {}

    # --- registry -------------------------------------------------------------------------------
    def _publish(self, table: str, key: str, definition: str, parse: Callable[[str], T]) -> bool:
        """Immutable versions: identical re-publish is a no-op, different content a conflict."""
        with self._write() as conn:
            row = conn.execute(f"SELECT definition FROM {table} WHERE key = ?", (key,)).fetchone()
            if row is None:
                conn.execute(
                    f"INSERT INTO {table} (key, definition, created_at) VALUES (?, ?, ?)",
                    (key, definition, time.time()),
                )
                return True
        if parse(row[0]) != parse(definition):
            raise Conflict(f"{key} is already published with different content")
        return False

    def get_sources(self, keys: list[str]) -> dict[str, Source | None]:
        wanted = list(dict.fromkeys(keys))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT key, definition, state FROM sources WHERE key IN ({_placeholders(wanted)})", wanted
            ).fetchall()
        found = {
            key: Source(definition=self._definition(key, definition), state=_source_state(state))
            for key, definition, state in rows
        }
        return {key: found.get(key) for key in wanted}

    def _definition(self, key: str, stored: str) -> SourceDefinition:
        """Published versions never change: each is parsed once per process."""
        definition = self._definitions.get(key)
        if definition is None:
            definition = self._definitions[key] = SourceDefinition.model_validate_json(stored)
        return definition

    def put_source(self, definition: SourceDefinition) -> bool:
        return self._publish(
            "sources",
            definition.key,
            definition.model_dump_json(by_alias=True),
            SourceDefinition.model_validate_json,
        )

    def update_source_state(self, key: str, state: SourceState) -> None:
        with self._write() as conn:
            conn.execute("UPDATE sources SET state = ? WHERE key = ?", (state.model_dump_json(), key))

    def get_agent(self, key: str) -> AgentDefinition | None:
        with self._read() as conn:
            return _agents(conn, [key]).get(key)

    def put_agent(self, definition: AgentDefinition) -> bool:
        return self._publish(
            "agents",
            definition.key,
            definition.model_dump_json(by_alias=True, exclude_none=True),
            AgentDefinition.model_validate_json,
        )

    def get_workspace_agent(self, route: str) -> str | None:
        with self._read() as conn:
            row = conn.execute("SELECT agent FROM workspaces WHERE route = ?", (route,)).fetchone()
        return row[0] if row else None

    def set_workspace_agent(self, route: str, agent_key: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO workspaces (route, agent, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (route) DO UPDATE SET agent = excluded.agent, updated_at = excluded.updated_at",
                (route, agent_key, time.time()),
            )

    def list_sources(self) -> list[Source]:
        with self._read() as conn:
            rows = conn.execute("SELECT key, definition, state FROM sources ORDER BY key").fetchall()
        return [Source(definition=self._definition(k, d), state=_source_state(st)) for k, d, st in rows]

    def list_agents(self) -> list[AgentDefinition]:
        with self._read() as conn:
            rows = conn.execute("SELECT definition FROM agents ORDER BY key").fetchall()
        return [AgentDefinition.model_validate_json(d) for (d,) in rows]

    def list_workspaces(self) -> dict[str, str]:
        with self._read() as conn:
            return dict(conn.execute("SELECT route, agent FROM workspaces ORDER BY route").fetchall())

    # --- sessions --------------------------------------------------------------------------------
    def put_session(self, token_hash: str, session: Session) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO sessions (token_hash, session, expires_at, token_id) "
                "VALUES (?, ?, ?, ?)",
                (token_hash, session.model_dump_json(), session.expires_at, token_id_of(token_hash)),
            )

    def get_session(self, token_hash: str) -> Session | None:
        with self._read() as conn:
            row = conn.execute("SELECT session FROM sessions WHERE token_hash = ?", (token_hash,)).fetchone()
        return Session.model_validate_json(row[0]) if row else None

    def list_sessions(self, now: float) -> list[TokenSummary]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT token_id, session FROM sessions WHERE expires_at > ? ORDER BY token_id", (now,)
            ).fetchall()
        return [TokenSummary.of(token_id, Session.model_validate_json(doc)) for token_id, doc in rows]

    def revoke_session(self, token_id: str, now: float) -> TokenSummary | None:
        with self._write() as conn:
            row = conn.execute(
                "SELECT token_hash, session FROM sessions WHERE token_id = ? AND expires_at > ?",
                (token_id, now),
            ).fetchone()
            if row is None:
                return None
            revoked = Session.model_validate_json(row[1]).model_copy(update={"revoked": True})
            conn.execute(
                "UPDATE sessions SET session = ? WHERE token_hash = ?", (revoked.model_dump_json(), row[0])
            )
        return TokenSummary.of(token_id, revoked)

    # --- runs ------------------------------------------------------------------------------------
    def create_run(self, run: Run) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                raise Conflict("run already exists")
            conn.execute(
                "INSERT INTO runs (run_id, session_id, client_id, route, state, turn_id, expires_at, tenant) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_id,
                    run.session_id,
                    run.client_id,
                    run.route,
                    run.state,
                    run.turn_id,
                    int(time.time()) + RUN_TTL_SECONDS,
                    run.tenant,
                ),
            )

    def get_run(self, run_id: str) -> Run | None:
        with self._read() as conn:
            return _run(conn, run_id)

    def transition_run(self, run_id: str, from_states: tuple[str, ...], to_state: str) -> Run | None:
        with self._write() as conn:
            changed = conn.execute(
                f"UPDATE runs SET state = ? WHERE run_id = ? AND state IN ({_placeholders(from_states)})",
                (to_state, run_id, *from_states),
            ).rowcount
            return _run(conn, run_id) if changed else None


def _run(conn: sqlite3.Connection, run_id: str) -> Run | None:
    row = conn.execute(
        "SELECT session_id, client_id, route, state, turn_id, tenant FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is None:
        return None
    session_id, client_id, route, state, turn_id, tenant = row
    return Run(
        run_id=run_id,
        session_id=session_id,
        client_id=client_id,
        route=route,
        state=state,
        turn_id=turn_id,
        tenant=tenant,
    )


@functools.lru_cache(maxsize=256)
def _source_state(stored: str | None) -> SourceState:
    """A source's switches as stored (a handful of distinct values: memoised, and never mutated)."""
    return SourceState.model_validate_json(stored) if stored else SourceState()


def _agents(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, AgentDefinition | None]:
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = conn.execute(
        f"SELECT key, definition FROM agents WHERE key IN ({_placeholders(wanted)})", wanted
    ).fetchall()
    found = {key: AgentDefinition.model_validate_json(definition) for key, definition in rows}
    return {key: found.get(key) for key in wanted}


class SqliteTurnStore(SqliteStore, TurnStore):
    _COLUMNS = "key, request_hash, state, claim, claimed_at, expires_at, run_id, response"

    @staticmethod
    def _record(row: tuple) -> TurnRecord:
        key, request_hash, state, claim, claimed_at, expires_at, run_id, response = row
        return TurnRecord(
            key=key,
            request_hash=request_hash,
            state=state,
            claim=claim,
            claimed_at=claimed_at,
            expires_at=expires_at,
            run_id=run_id,
            response=json.loads(response) if response is not None else None,
        )

    def _live(self, conn: sqlite3.Connection, key: str, now: float) -> TurnRecord | None:
        row = conn.execute(f"SELECT {self._COLUMNS} FROM turns WHERE key = ?", (key,)).fetchone()
        if row is None or row[5] <= now:  # an expired record counts as absent
            return None
        return self._record(row)

    def claim_turn(
        self, key: str, request_hash: str, claim: str, now: float, expires_at: int
    ) -> TurnRecord | None:
        with self._write() as conn:
            existing = self._live(conn, key, now)
            if existing is not None:
                return existing
            conn.execute(
                f"INSERT OR REPLACE INTO turns ({self._COLUMNS}) "
                "VALUES (?, ?, 'pending', ?, ?, ?, NULL, NULL)",
                (key, request_hash, claim, now, expires_at),
            )
        return None

    def get_turn(self, key: str, now: float) -> TurnRecord | None:
        with self._read() as conn:
            return self._live(conn, key, now)

    def _while_held(self, key: str, claim: str, sql: str, values: tuple = ()) -> bool:
        """`sql` (an UPDATE or DELETE of the turn) only while it is still pending and held by `claim`."""
        with self._write() as conn:
            return (
                conn.execute(
                    f"{sql} WHERE key = ? AND state = 'pending' AND claim = ?", (*values, key, claim)
                ).rowcount
                > 0
            )

    def set_turn_run(self, key: str, claim: str, run_id: str) -> bool:
        return self._while_held(key, claim, "UPDATE turns SET run_id = ?", (run_id,))

    def complete_turn(self, key: str, claim: str, response: dict) -> bool:
        blob = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
        return self._while_held(key, claim, "UPDATE turns SET state = 'done', response = ?", (blob,))

    def release_turn(self, key: str, claim: str) -> None:
        self._while_held(key, claim, "DELETE FROM turns")

    def take_over_turn(self, key: str, old_claim: str, new_claim: str, now: float) -> bool:
        return self._while_held(
            key, old_claim, "UPDATE turns SET claim = ?, claimed_at = ?", (new_claim, now)
        )


class SqliteLedger(SqliteStore, BudgetLedger):
    """R-BUDGET on the state file: each phase of a tool call is one write transaction that re-reads what
    it checks, so the snapshot a caller holds is only a hint here (exact under any concurrency)."""

    _ENTRY = (
        "invocation_id, agent, parent, max_retrievals, max_queries, max_chars, retrievals, chars, "
        "per_source, deadline, seq"
    )

    @staticmethod
    def _entry(row: tuple) -> tuple[LedgerEntry, int]:
        inv, agent, parent, mr, mq, mc, r, c, per_source, deadline, seq = row
        entry = LedgerEntry(inv, agent, parent, Limits(mr, mq, mc), r, c, json.loads(per_source), deadline)
        return entry, seq

    def _snapshot(
        self,
        conn: sqlite3.Connection,
        root_id: str,
        chain_ids: Sequence[str],
        agent_keys: Sequence[str] = (),
        fingerprints: Sequence[str] | None = None,
    ) -> ChainSnapshot:
        """The chain's entries; the root tree's citations (only `fingerprints`' when given)."""
        rows = conn.execute(
            f"SELECT {self._ENTRY} FROM ledger_entries WHERE root_id = ? "
            f"AND invocation_id IN ({_placeholders(chain_ids)})",
            (root_id, *chain_ids),
        ).fetchall()
        entries: dict[str, LedgerEntry] = {}
        seq = 0
        for row in rows:
            entry, entry_seq = self._entry(row)
            entries[entry.invocation_id] = entry
            if entry.invocation_id == root_id:
                seq = entry_seq
        cited: dict[str, CitationMark] = {}
        if fingerprints is None or fingerprints:
            only = "" if fingerprints is None else f" AND fingerprint IN ({_placeholders(fingerprints)})"
            cited = {
                fp: CitationMark(cid, chars)
                for fp, cid, chars in conn.execute(
                    "SELECT fingerprint, citation_id, length(content) FROM ledger_citations WHERE root_id = ?"
                    + only,
                    (root_id, *(fingerprints or ())),
                )
            }
        return ChainSnapshot(root_id, tuple(chain_ids), entries, seq, cited, _agents(conn, agent_keys))

    def open_chain(
        self, root_id: str, invocation_ids: list[str], agent_keys: Sequence[str] = ()
    ) -> ChainSnapshot:
        # Not one snapshot: every write phase below re-reads what it checks, so this read is only the
        # caller's view (for its plan, deadlines and events), and its statements need no transaction.
        # No citations: `record_citations` reads the drafts' own inside its write; reading every citation of
        # the tree here would grow with it on every call.
        with self._read() as conn:
            return self._snapshot(conn, root_id, invocation_ids, agent_keys, fingerprints=())

    def charge_retrievals(
        self, snapshot: ChainSnapshot, links: list[ChainLink], source_keys: list[str], now: float
    ) -> ChainSnapshot:
        root_id = snapshot.root_id
        ids = [link.invocation_id for link in links]
        with self._write() as conn:
            current = self._snapshot(conn, root_id, ids, fingerprints=())
            mismatch = chain_mismatch(links, current.entries)
            if mismatch:
                raise ProtocolError(mismatch)
            chain = effective_chain(links, current.entries)
            refusal = retrieval_refusal(chain, source_keys)
            if refusal:
                raise BudgetExceeded(refusal)
            after = [charged(entry, source_keys) for entry in chain]
            conn.executemany(
                "INSERT INTO ledger_entries VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (root_id, invocation_id) DO UPDATE SET "
                "retrievals = excluded.retrievals, per_source = excluded.per_source",
                [
                    (
                        root_id,
                        entry.invocation_id,
                        entry.agent,
                        entry.parent,
                        depth,
                        entry.limits.max_retrievals,
                        entry.limits.max_queries_per_source,
                        entry.limits.max_context_chars,
                        entry.retrievals,
                        entry.chars,
                        json.dumps(entry.per_source, sort_keys=True),
                        entry.deadline,
                        0,
                        int(now) + LEDGER_TTL_SECONDS,
                    )
                    for depth, entry in enumerate(after)
                ],
            )
        return ChainSnapshot(
            root_id, tuple(ids), {e.invocation_id: e for e in after}, current.seq, snapshot.cited
        )

    def record_citations(
        self, snapshot: ChainSnapshot, drafts: list[CitationDraft], now: float
    ) -> tuple[list[Citation | None], ChainSnapshot]:
        if not drafts:
            return [], snapshot
        root_id = snapshot.root_id
        fingerprints = list(dict.fromkeys(d.fingerprint for d in drafts))
        with self._write() as conn:
            current = self._snapshot(conn, root_id, snapshot.chain_ids, fingerprints=fingerprints)
            plan = plan_citations(current.chain(), current.seq, current.cited, drafts)
            if plan.created:
                ids = list(snapshot.chain_ids)
                conn.execute(
                    "UPDATE ledger_entries SET chars = chars + ?, "
                    "seq = CASE WHEN invocation_id = ? THEN ? ELSE seq END "
                    f"WHERE root_id = ? AND invocation_id IN ({_placeholders(ids)})",
                    (plan.chars, root_id, plan.seq, root_id, *ids),
                )
                conn.executemany(
                    "INSERT INTO ledger_citations VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            root_id,
                            citation.fingerprint,
                            citation.citation_id,
                            draft.knowledge,
                            draft.doc_id,
                            citation.content,
                            draft.retrieval_id,
                            draft.invocation_id,
                            now,
                            int(now) + LEDGER_TTL_SECONDS,
                        )
                        for citation, draft in plan.created
                    ],
                )
        entries = {e.invocation_id: with_chars(e, plan.chars) for e in current.chain()}
        cited = current.cited | {
            c.fingerprint: CitationMark(c.citation_id, len(c.content)) for c, _ in plan.created
        }
        return plan.citations, ChainSnapshot(root_id, snapshot.chain_ids, entries, plan.seq, cited)

    def entry(self, root_id: str, invocation_id: str) -> LedgerEntry | None:
        with self._read() as conn:
            return self._snapshot(conn, root_id, [invocation_id], fingerprints=()).entries.get(invocation_id)

    def tree(self, root_id: str) -> list[LedgerEntry]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {self._ENTRY} FROM ledger_entries WHERE root_id = ? ORDER BY depth, invocation_id",
                (root_id,),
            ).fetchall()
        return [self._entry(row)[0] for row in rows]

    def citations(self, root_id: str) -> list[Citation]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT citation_id, fingerprint, knowledge, content, retrieval_id FROM ledger_citations "
                "WHERE root_id = ? ORDER BY created_at, citation_id",
                (root_id,),
            ).fetchall()
        return [
            Citation(cid, fp, knowledge, content, rid, created=False)
            for cid, fp, knowledge, content, rid in rows
        ]


class SqliteJobStore(SqliteStore, JobStore):
    """Ingestion jobs on the state file: every change of a job and its documents is one transaction."""

    _JOB = (
        "job_id, source_key, spec, state, total, queued, done, unchanged, failed, deleted, passages, "
        "created_at, started_at, updated_at, finished_at, worker, lease_until, cancel_requested"
    )

    @staticmethod
    def _job(row: tuple) -> IngestionJob:
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
                        encode_payload(d.payload) if d.state == "queued" else None,
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
