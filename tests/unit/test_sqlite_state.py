"""The embedded SQLite state's failure modes: a database locked past its busy timeout is a typed 503
(`service_unavailable`, no internals) and writes nothing; a refused write rolls back whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite import sqlite_stores
from knowledge_core.adapters.sqlite.driver import sqlite3
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
