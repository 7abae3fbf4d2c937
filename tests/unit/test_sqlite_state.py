"""The embedded SQLite state's failure modes: a database locked past its busy timeout is a typed 503
(`service_unavailable`, no internals) and writes nothing; a refused write rolls back whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite import sqlite_stores
from knowledge_core.adapters.sqlite.db import SqliteDatabase
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.store import APPLICATION_ID, MIGRATIONS
from knowledge_core.bootstrap import Container
from knowledge_core.domain.errors import StateUnavailable
from knowledge_core.domain.models import AgentDefinition, Principal
from knowledge_core.domain.turn_wire import TurnRequest
from knowledge_core.domain.wire import parse_request

from tests.conftest import FakeClock, embedded_container

AGENT = AgentDefinition.model_validate(
    {"id": "a", "version": "1.0.0", "modelProfile": {"candidates": [{"model": "m"}]}}
)


def test_state_locked_past_its_timeout_is_503_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    stores = sqlite_stores(path, busy_timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StateUnavailable) as caught:
            stores.registry.put_agent(AGENT)
        assert caught.value.status == 503 and caught.value.body() == {
            "error": {"code": "service_unavailable", "message": "service temporarily unavailable"}
        }
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert stores.registry.get_agent("a@1.0.0") is None
    assert stores.registry.put_agent(AGENT) is True  # free again: works


def test_state_locked_turn_request_is_503_without_a_half_written_run(
    tmp_path: Path, clock: FakeClock
) -> None:
    from kb_cli import demo

    seeded = embedded_container(tmp_path, clock)
    demo.seed(seeded, with_token=False)
    container = Container(
        seeded.settings, clock=clock, state=sqlite_stores(seeded.settings.state_path, busy_timeout_s=0.2)
    )
    principal = Principal(client_id="c", session_id="s", subject="u", tenant="default", routes=["demo"])
    request = parse_request(TurnRequest, '{"turn_id": "t-1", "message": "网关离线"}')
    holder = sqlite3.connect(seeded.settings.state_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StateUnavailable):
            container.turns.start(principal, "demo", request).wire()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with sqlite3.connect(seeded.settings.state_path) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0
    assert container.turns.start(principal, "demo", request).wire()["run_id"]  # and then it answers


def test_a_turn_record_from_a_state_file_before_principals_reads_without_one(tmp_path: Path) -> None:
    """A-TURN: a state file whose turn records bind no principal migrates forward, and its records read
    back whole, without a principal (the turn service then re-checks their knowledge on replay)."""
    path = tmp_path / "state.sqlite3"
    before = SqliteDatabase(path, application_id=APPLICATION_ID, migrations=MIGRATIONS[:4])
    with before.transaction() as conn:
        conn.execute(
            "INSERT INTO turns (key, request_hash, state, claim, claimed_at, expires_at, run_id, response) "
            "VALUES (?, 'h', 'done', 'c', 1.0, ?, 'run-1', ?)",
            ("TURN#r#old", 4102444800, json.dumps({"a": 1})),
        )
    before.close()
    record = sqlite_stores(path).turns.get_turn("TURN#r#old", 2.0)
    assert record is not None and record.principal is None
    assert (record.state, record.run_id, record.response) == ("done", "run-1", {"a": 1})
