"""`sourceFilters` in agent definitions (SPEC §3.1, §8), validated at publish: a bad
filter is a 400 naming its path under `knowledgeRouting.sourceFilters[i].filter`, its knowledge must be in
`allowedKnowledge`, at most 64 and one per source, a trusted-context value only where a string is compared;
bound at call time (absent key -> matches nothing) and combined with a request's filter by andAll. The
model's `knowledge_search` arguments stay exactly §3.6."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from knowledge_core.domain.errors import InvalidRequest
from knowledge_core.domain.filters import Condition, Group, Nothing, matches, parse_filter
from knowledge_core.domain.models import AgentDefinition
from knowledge_core.domain.source_filters import retrieval_filter, source_filter
from knowledge_core.domain.tool_wire import parse_envelope
from knowledge_core.domain.wire import parse_request

from kb_cli.events import load_event
from tests.unit.test_handlers import clock, container, handlers, run  # noqa: F401

KNOWLEDGE = {"id": "manuals", "version": "1.0.0"}
REGION = {"equals": {"key": "region", "value": {"context": "region"}}}


def agent(
    source_filters: list[dict[str, Any]], allowed: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "id": "support",
        "version": "1.0.0",
        "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
        "allowedKnowledge": allowed if allowed is not None else [KNOWLEDGE],
        "knowledgeRouting": {"mode": "AUTO", "sourceFilters": source_filters},
    }


def refused(definition: dict[str, Any]) -> str:
    with pytest.raises(InvalidRequest) as exc:
        parse_request(AgentDefinition, json.dumps(definition))
    assert exc.value.code == "invalid_request"
    return exc.value.field or ""


def test_r_cfg_source_filters_publish_and_round_trip() -> None:
    filters = [
        {
            "knowledge": KNOWLEDGE,
            "filter": {"andAll": [REGION, {"greaterThan": {"key": "year", "value": 2023}}]},
        }
    ]
    parsed = parse_request(AgentDefinition, json.dumps(agent(filters)))
    again = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert again["knowledgeRouting"]["sourceFilters"] == filters  # as published (the console shows it)
    assert AgentDefinition.model_validate(again) == parsed


@pytest.mark.parametrize(
    ("bad_filter", "path"),
    [
        (
            {"andAll": [REGION, {"greaterThan": {"key": "year", "value": "2023"}}]},
            "knowledgeRouting.sourceFilters[0].filter.andAll[1].greaterThan.value",
        ),
        ({"equals": {"key": "region", "value": "eu"}, "in": {}}, "knowledgeRouting.sourceFilters[0].filter"),
        ({"near": {"key": "region", "value": "eu"}}, "knowledgeRouting.sourceFilters[0].filter.near"),
        (
            {"orAll": [REGION, {"lessThan": {"key": "year", "value": {"context": "year", "x": 1}}}]},
            "knowledgeRouting.sourceFilters[0].filter.orAll[1].lessThan.value",
        ),
        (
            {"equals": {"key": "region", "value": {"context": ""}}},
            "knowledgeRouting.sourceFilters[0].filter.equals.value",
        ),
    ],
)
def test_r_cfg_bad_source_filter_is_refused_at_publish_naming_its_path(bad_filter: dict, path: str) -> None:
    assert refused(agent([{"knowledge": KNOWLEDGE, "filter": bad_filter}])) == path


def test_r_cfg_source_filter_knowledge_must_be_allowed_once_and_at_most_64() -> None:
    other = {"id": "other", "version": "1.0.0"}
    field = refused(agent([{"knowledge": other, "filter": REGION}]))
    assert field == "knowledgeRouting.sourceFilters[0].knowledge"
    twice = [{"knowledge": KNOWLEDGE, "filter": REGION}] * 2
    assert refused(agent(twice)).startswith("knowledgeRouting.sourceFilters")
    allowed = [{"id": f"s{i}", "version": "1.0.0"} for i in range(64)]
    many = [{"knowledge": k, "filter": REGION} for k in allowed]
    assert parse_request(AgentDefinition, json.dumps(agent(many, allowed)))
    assert refused(agent([*many, many[0]], allowed)).startswith("knowledgeRouting.sourceFilters")
    assert refused(agent([{"knowledge": KNOWLEDGE, "filter": REGION, "extra": 1}])).endswith("extra")


def test_r_cfg_source_filter_binds_trusted_context_and_combines_with_the_request() -> None:
    definition = parse_request(
        AgentDefinition, json.dumps(agent([{"knowledge": KNOWLEDGE, "filter": REGION}]))
    )
    routing = definition.routing
    assert source_filter(routing, "manuals@1.0.0", {"region": "eu"}) == Condition("equals", "region", "eu")
    assert isinstance(source_filter(routing, "manuals@1.0.0", {}), Nothing)  # absent key: matches nothing
    assert source_filter(routing, "other@1.0.0", {"region": "eu"}) is None
    requested = parse_filter({"equals": {"key": "year", "value": 2024}})
    both = retrieval_filter(routing, "manuals@1.0.0", {"region": "eu"}, requested)
    assert isinstance(both, Group) and both.operator == "andAll"
    assert matches({"region": "eu", "year": 2024}, both)
    assert not matches({"region": "us", "year": 2024}, both) and not matches({"region": "eu"}, both)
    assert retrieval_filter(routing, "other@1.0.0", {}, requested) == requested


def test_r_tool_model_arguments_stay_exactly_query_and_sources() -> None:
    """The model cannot send a filter: its arguments are exactly §3.6's (a `filter` is PROTOCOL_ERROR)."""
    from knowledge_core.domain.errors import ProtocolError

    envelope = {
        "operation": "knowledge_search",
        "invocation": {
            "tenant": "t",
            "app": "a",
            "subject": "u",
            "agent": "support@1.0.0",
            "invocation_id": "i",
        },
        "arguments": {"query": "q", "filter": {"equals": {"key": "region", "value": "us"}}},
    }
    with pytest.raises(ProtocolError):
        parse_envelope(envelope)


def test_r_admin_publish_agent_with_a_bad_source_filter_is_a_400(handlers: Any) -> None:  # noqa: F811
    event = copy.deepcopy(load_event("admin/publish-source.json"))
    event["routeKey"] = "POST /admin/v1/agents"
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/admin/v1/agents"
    bad = {"andAll": [REGION, {"greaterThan": {"key": "year", "value": "x"}}]}
    event["body"] = json.dumps(agent([{"knowledge": KNOWLEDGE, "filter": bad}]))
    status, body = run(handlers, "AdminFunction", event)
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert body["error"]["message"].startswith(
        "knowledgeRouting.sourceFilters[0].filter.andAll[1].greaterThan.value:"
    )


def test_r_cfg_agents_without_source_filters_keep_their_scope_revision() -> None:
    """An agent published before sourceFilters existed dumps (and so digests, knowledge_scope_revision) as
    it did: no `sourceFilters: []` appears; one with filters dumps them."""
    plain = parse_request(AgentDefinition, json.dumps(agent([])))
    assert "sourceFilters" not in plain.model_dump(mode="json", by_alias=True)["knowledgeRouting"]
    filtered = parse_request(AgentDefinition, json.dumps(agent([{"knowledge": KNOWLEDGE, "filter": REGION}])))
    dumped = filtered.model_dump(mode="json", by_alias=True)["knowledgeRouting"]["sourceFilters"]
    assert dumped == [{"knowledge": KNOWLEDGE, "filter": REGION}]


def admin_event(method: str, path: str, body: Any) -> dict[str, Any]:
    event = copy.deepcopy(load_event("admin/publish-source.json"))
    event["routeKey"] = f"{method} {path}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["body"] = json.dumps(body)
    return event


def test_i_ingest_put_and_bulk_documents_take_metadata_and_name_a_bad_one(
    handlers: Any,  # noqa: F811
    container: Any,  # noqa: F811
) -> None:
    """F-FILTER: `metadata` on PUT and bulk documents is stored (and listed); a bad one is a 400
    naming it."""
    doc = {"title": "Meta", "body": "zzmeta", "acl": {"tenant": "default"}, "metadata": {"region": "eu"}}
    put = admin_event("PUT", "/admin/v1/sources/demo-docs@1.0.0/documents/meta-put", doc)
    assert run(handlers, "AdminFunction", put)[0] == 200
    bulk = {"documents": [doc | {"doc_id": "meta-bulk", "metadata": {"year": 2024, "tags": ["a"]}}]}
    post = admin_event("POST", "/admin/v1/sources/demo-docs@1.0.0/documents", bulk)
    assert run(handlers, "AdminFunction", post)[0] == 200
    assert container.backend.get_document("demo-docs@1.0.0", "meta-put").metadata == {"region": "eu"}
    listed = container.admin.list_documents("demo-docs@1.0.0").documents
    assert {d.doc_id: d.metadata for d in listed}["meta-bulk"] == {"year": 2024, "tags": ["a"]}
    bad = admin_event("PUT", "/admin/v1/sources/demo-docs@1.0.0/documents/x", doc | {"metadata": {"r": [1]}})
    status, body = run(handlers, "AdminFunction", bad)
    assert status == 400 and body["error"]["message"].startswith("metadata.r[0]:")
    bad_bulk = {"documents": [doc | {"doc_id": "y", "metadata": {"k" * 65: 1}}]}
    status, body = run(
        handlers,
        "AdminFunction",
        admin_event("POST", "/admin/v1/sources/demo-docs@1.0.0/documents", bad_bulk),
    )
    assert status == 400 and body["error"]["message"].startswith("documents[0].metadata.")


def test_r_cfg_context_value_of_a_type_its_operator_does_not_take_matches_nothing() -> None:
    """The trusted context holds strings: `greaterThan {"context": "year"}` publishes (the filter language's
    own rule) and binds to a condition that matches nothing, like an absent key."""
    ranged = {"greaterThan": {"key": "year", "value": {"context": "year"}}}
    definition = parse_request(
        AgentDefinition, json.dumps(agent([{"knowledge": KNOWLEDGE, "filter": ranged}]))
    )
    assert isinstance(source_filter(definition.routing, "manuals@1.0.0", {"year": "2024"}), Nothing)
