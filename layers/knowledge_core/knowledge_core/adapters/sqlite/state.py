"""Embedded state on SQLite: the registry (sources, agents, workspaces), sessions and runs."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from ...domain.errors import Conflict
from ...domain.models import (
    AgentDefinition,
    Run,
    Session,
    Source,
    SourceDefinition,
    SourceState,
    TokenSummary,
    token_id_of,
)
from ...ports import (
    Registry,
    RunStore,
    SessionStore,
)
from .db import SqliteDatabase
from .driver import sqlite3
from .store import (
    RUN_TTL_SECONDS,
    SqliteStore,
    T,
    _agents,
    _placeholders,
)


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
