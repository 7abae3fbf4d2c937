"""R-BUDGET cost: DynamoDB round trips per `knowledge_search` tool call, counted (every botocore call the
state adapters make), on moto and on the DynamoDB-API server. Targets: <= 4 for a cold call (a fresh
process: nothing cached, a new invocation tree) and <= 3 for a warm one (registry cached within its TTL),
whatever the depth of the chain (the example event is a three-level tree)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.adapters.dynamodb import DynamoTable
from knowledge_core.bootstrap import Container
from knowledge_core.domain.tool_wire import parse_envelope
from knowledge_core.settings import Settings

from kb_cli import demo
from tests.conftest import TEST_SECRET, FakeClock
from tests.contract.conftest import REAL_MARKS
from tests.dynamo_tables import moto_table, real_table

EVENT = Path(__file__).resolve().parents[2] / "events" / "agent_tools" / "knowledge_search.json"
COLD_MAX, WARM_MAX = 4, 3


class CallCounter:
    """Counts the DynamoDB API calls a client makes (botocore's before-call event)."""

    def __init__(self, table: DynamoTable) -> None:
        self.calls: list[str] = []
        table.client.meta.events.register("before-call.dynamodb.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)

    def during(self, fn: Any) -> tuple[Any, list[str]]:
        start = len(self.calls)
        result = fn()
        return result, self.calls[start:]


@pytest.fixture(params=[pytest.param("moto", id="moto"), pytest.param("real", id="real", marks=REAL_MARKS)])
def table(request: pytest.FixtureRequest) -> Iterator[DynamoTable]:
    manager: AbstractContextManager[DynamoTable] = (
        moto_table()
        if request.param == "moto"
        else real_table(request.getfixturevalue("real_endpoints")["DYNAMODB_ENDPOINT"])
    )
    with manager as t:
        yield t


def _container(table: DynamoTable, tmp_path: Path, clock: FakeClock) -> Container:
    settings = Settings(
        state_backend="dynamodb",
        search_backend="sqlite",
        sqlite_path=str(tmp_path / "kb.sqlite3"),
        token_secret=TEST_SECRET,
        table_name=table.name,
    )  # the default registry cache (2 s): a warm process reads definitions once
    return Container(settings, clock=clock, state=table.stores())


def _envelope(root: str, query: str) -> Any:
    event = json.loads(EVENT.read_text(encoding="utf-8"))
    inv = event["invocation"]
    inv["ancestors"][0]["invocation_id"] = root
    inv["ancestors"][1]["invocation_id"] = f"{root}-mid"
    inv["invocation_id"] = f"{root}-leaf"
    event["arguments"]["query"] = query
    return parse_envelope(event)


def test_r_budget_round_trips_per_tool_call(table: DynamoTable, tmp_path: Path) -> None:
    clock = FakeClock()
    demo.seed(_container(table, tmp_path, clock), with_token=False)
    counter = CallCounter(table)

    cold = _container(table, tmp_path, clock)  # a new process: empty caches
    root = f"root-{uuid.uuid4().hex[:8]}"
    result, calls = counter.during(lambda: cold.tools.call(_envelope(root, "设备安装规范")).wire())
    assert result.get("references"), result
    assert len(calls) <= COLD_MAX, calls

    # Warm: the same invocation again (reusing a citation), then a new query, then a new tree.
    for root_id, query in (
        (root, "设备安装规范"),
        (root, "网关离线"),
        (f"root-{uuid.uuid4().hex[:8]}", "网关"),
    ):
        result, calls = counter.during(lambda r=root_id, q=query: cold.tools.call(_envelope(r, q)).wire())
        assert "references" in result, result
        assert len(calls) <= WARM_MAX, (query, calls)
    assert calls == ["BatchGetItem", "TransactWriteItems", "TransactWriteItems"]
