"""F-FILTER over MCP (SPEC §6): `knowledge_search` takes `filter` exactly as the HTTP search does — only
matching documents are hinted, a malformed filter is an `invalid_request` tool error naming its path — and
its input schema describes `filter` compactly, without `$ref`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import pytest
from knowledge_core.domain.models import Document, DocumentAcl, Principal
from knowledge_core.mcp_server import TOOLS, ServiceDoor, call_tool

from tests.conftest import FakeClock, installed_demo

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
PRINCIPAL = Principal(
    client_id="demo-client", session_id="demo-session", subject="demo-user", tenant="default", routes=["demo"]
)
SOURCE = "demo-docs@1.0.0"


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceDoor]:
    with installed_demo(tmp_path_factory, FakeClock(), "mcp-filters") as container:
        container.admin.put_documents(
            [
                Document(
                    source_key=SOURCE,
                    doc_id=f"quokka-{region}",
                    title=f"Quokka handbook {region}",
                    body=f"Quokka feeding schedule for the {region} office.",
                    acl=DocumentAcl(tenant="default"),
                    metadata={"region": region, "year": year},
                )
                for region, year in (("eu", 2024), ("us", 2023), ("apac", 2025))
            ]
        )
        yield ServiceDoor(container.knowledge, PRINCIPAL, "demo")


def titles(door: ServiceDoor, arguments: dict) -> list[str]:
    outcome = call_tool(door, "knowledge_search", arguments)
    assert not outcome.is_error, outcome.body
    return sorted(h["title"] for h in outcome.body["hints"])


def test_f_filter_mcp_search_narrows_by_filter(door: ServiceDoor) -> None:
    assert len(titles(door, {"query": "quokka feeding schedule"})) == 3
    eu = {"equals": {"key": "region", "value": "eu"}}
    assert titles(door, {"query": "quokka feeding schedule", "filter": eu}) == ["Quokka handbook eu"]
    recent = {"orAll": [{"greaterThan": {"key": "year", "value": 2024}}, eu]}
    assert titles(door, {"query": "quokka feeding schedule", "filter": recent}) == [
        "Quokka handbook apac",
        "Quokka handbook eu",
    ]


def test_f_filter_mcp_malformed_filter_is_invalid_request_naming_its_path(door: ServiceDoor) -> None:
    bad = {
        "andAll": [{"equals": {"key": "region", "value": "eu"}}, {"lessThan": {"key": "year", "value": "x"}}]
    }
    outcome = call_tool(door, "knowledge_search", {"query": "quokka", "filter": bad})
    assert outcome.is_error and outcome.body["error"]["code"] == "invalid_request"
    assert outcome.body["error"]["message"].startswith("filter.andAll[1].lessThan.value:")


def test_f_filter_mcp_input_schema_is_compact_and_admits_filters() -> None:
    schema = TOOLS["knowledge_search"].input_schema
    assert "$ref" not in json.dumps(schema) and len(json.dumps(schema)) < 6000
    assert schema["properties"]["filter"]["description"]
    good = {"query": "q", "filter": {"andAll": [{"in": {"key": "a", "value": ["x"]}}, {"orAll": []}]}}
    jsonschema.validate(good, schema)  # groups' members are checked by the server
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"query": "q", "filter": {"near": {"key": "a", "value": 1}}}, schema)
