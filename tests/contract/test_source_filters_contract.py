"""An agent's `sourceFilters` (SPEC §3.1, §8) on every backend: a source filter bound to
the trusted context narrows the agent tool's `startup` and `knowledge_search` to the documents it admits
(pre-filtered: the best of those, not a remainder), an absent context key matches nothing, a request's own
filter narrows further (andAll), and the doors without a trusted context (search, MCP, turns) apply the
route's agent's filter with an empty context."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from knowledge_core.codec import identity_digest
from knowledge_core.domain.errors import KnowledgeChanged
from knowledge_core.domain.models import AgentDefinition, Document, DocumentAcl, SourceDefinition
from knowledge_core.domain.tool_wire import parse_envelope
from knowledge_core.domain.turn_wire import TurnRequest
from knowledge_core.domain.wire import SearchRequest
from knowledge_core.mcp_server import ServiceDoor

from tests.contract.conftest import PRINCIPAL, World

REGIONS = {"eu": 4, "us": 4, "apac": 2}


def _world(world: World, source_filter: dict[str, Any], mode: str = "AUTO") -> tuple[str, str]:
    """One source of pump notes in three regions; an agent whose sourceFilters bind `region` to the
    trusted context's `region`; route `kb` points at it."""
    key = world.key("pumps")
    id_, version = key.split("@")
    world.c.admin.publish_source(SourceDefinition.model_validate({"id": id_, "version": version, "topK": 10}))
    agent_id = f"filtered-{world.tag}"
    knowledge = {"id": id_, "version": version}
    world.c.admin.publish_agent(
        AgentDefinition.model_validate(
            {
                "id": agent_id,
                "version": "1.0.0",
                "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
                "allowedKnowledge": [knowledge],
                "knowledgeRouting": {
                    "mode": mode,
                    "topK": 10,
                    "rules": [{"knowledge": knowledge, "always": True}],
                    "sourceFilters": [{"knowledge": knowledge, "filter": source_filter}],
                },
            }
        )
    )
    world.c.admin.set_workspace("kb", f"{agent_id}@1.0.0")
    docs = [
        Document(
            source_key=key,
            doc_id=f"{region}-{i}",
            title=f"Pump seal note {region} {i}",
            body=f"pump seal torque note {i} " + "pump seal " * (REGIONS[region] - i),
            acl=DocumentAcl(tenant=PRINCIPAL.tenant),
            metadata={"region": region, "year": 2023 + i % 2},
        )
        for region, n in REGIONS.items()
        for i in range(n)
    ]
    world.ingest(*docs)
    return key, f"{agent_id}@1.0.0"


def _tool(world: World, agent: str, operation: str, context: dict[str, str], n: int) -> list[str]:
    envelope = parse_envelope(
        {
            "operation": operation,
            "invocation": {
                "tenant": PRINCIPAL.tenant,
                "app": "contract",
                "subject": PRINCIPAL.subject,
                "agent": agent,
                "invocation_id": f"inv-{operation}-{n}",
                "ancestors": [],
                "trusted_context": context,
            },
            "arguments": {"query": "pump seal torque"},
        }
    )
    result = world.c.tools.call(envelope).wire()
    assert "error" not in result, result
    return [r["source"]["docId"] for r in result["references"]]


REGION_FROM_CONTEXT = {"equals": {"key": "region", "value": {"context": "region"}}}


@pytest.mark.parametrize("operation", ["startup", "knowledge_search"])
def test_r_cfg_source_filter_bound_to_trusted_context_narrows_the_tool(world: World, operation: str) -> None:
    _, agent = _world(world, REGION_FROM_CONTEXT)
    eu = _tool(world, agent, operation, {"region": "eu"}, 1)
    assert eu and {d.split("-")[0] for d in eu} == {"eu"} and len(eu) == REGIONS["eu"]
    apac = _tool(world, agent, operation, {"region": "apac"}, 2)
    assert sorted(apac) == ["apac-0", "apac-1"]
    assert _tool(world, agent, operation, {}, 3) == []  # absent context key: the condition matches nothing
    assert _tool(world, agent, operation, {"region": "mars"}, 4) == []


def test_r_cfg_source_filter_combines_with_literals_and_context(world: World) -> None:
    both = {"andAll": [REGION_FROM_CONTEXT, {"greaterThanOrEquals": {"key": "year", "value": 2024}}]}
    _, agent = _world(world, both)
    assert sorted(_tool(world, agent, "startup", {"region": "us"}, 1)) == ["us-1", "us-3"]
    # orAll: a context-bound branch that matches nothing leaves the literal branch.
    either = {"orAll": [REGION_FROM_CONTEXT, {"equals": {"key": "region", "value": "apac"}}]}
    _, agent2 = _world(World(world.c, world.clock), either)
    assert sorted(_tool(world, agent2, "startup", {}, 2)) == ["apac-0", "apac-1"]


def test_r_cfg_doors_without_trusted_context_apply_the_route_agents_filter(world: World) -> None:
    literal = {"notEquals": {"key": "region", "value": "us"}}
    _world(world, literal)
    hints = world.c.knowledge.search(PRINCIPAL, "kb", SearchRequest(query="pump seal torque", limit=3)).wire()
    assert hints["status"] == "ok" and len(hints["hints"]) == 3
    assert all(" us " not in h["title"] for h in hints["hints"])
    turn = world.c.turns.start(PRINCIPAL, "kb", TurnRequest(turn_id="t-1", message="pump seal torque")).wire()
    titles = [k["title"] for k in turn["context"]["knowledge"]]
    assert titles and all(" us " not in t for t in titles)
    mcp = ServiceDoor(world.c.knowledge, PRINCIPAL, "kb").search(
        SearchRequest(query="pump seal torque", limit=3)
    )
    assert len(mcp["hints"]) == 3 and all(" us " not in h["title"] for h in mcp["hints"])
    # A request's own filter narrows further (andAll with the agent's).
    only_apac = SearchRequest.model_validate(
        {"query": "pump seal torque", "filter": {"startsWith": {"key": "region", "value": "ap"}}}
    )
    both = world.c.knowledge.search(PRINCIPAL, "kb", only_apac).wire()
    assert sorted(h["title"] for h in both["hints"]) == ["Pump seal note apac 0", "Pump seal note apac 1"]
    # A request cannot widen the agent's filter: asking for `us` finds nothing.
    only_us = SearchRequest.model_validate(
        {"query": "pump seal torque", "filter": {"equals": {"key": "region", "value": "us"}}}
    )
    assert world.c.knowledge.search(PRINCIPAL, "kb", only_us).wire()["hints"] == []


def test_r_cfg_context_bound_filter_on_a_door_without_context_matches_nothing(world: World) -> None:
    _world(world, REGION_FROM_CONTEXT)
    hints = world.c.knowledge.search(PRINCIPAL, "kb", SearchRequest(query="pump seal torque", limit=3)).wire()
    assert hints["status"] == "ok" and hints["hints"] == []  # fail closed, never "every region"


NOT_US = {"notEquals": {"key": "region", "value": "us"}}


def _impeller(key: str, region: str) -> Document:
    return Document(
        source_key=key,
        doc_id="impeller",
        title="Impeller alignment",
        body="Align the impeller shaft before the first run.",
        acl=DocumentAcl(tenant=PRINCIPAL.tenant),
        metadata={"region": region, "year": 2024},
    )


def _impeller_hints(world: World) -> list[dict[str, Any]]:
    request = SearchRequest(query="impeller alignment", limit=3)
    return world.c.knowledge.search(PRINCIPAL, "kb", request).wire()["hints"]


def test_a_ref_document_moved_out_of_the_agents_filter_answers_409(world: World) -> None:
    """A-REF, R-CFG: a document whose metadata change puts it outside the route agent's sourceFilters
    leaves search, and an earlier ref to it no longer reads it."""
    key, _ = _world(world, NOT_US)
    world.ingest(_impeller(key, "eu"))
    [hint] = _impeller_hints(world)
    assert world.read(hint["ref"])["title"] == "Impeller alignment"
    world.ingest(_impeller(key, "us"))
    assert _impeller_hints(world) == []
    with pytest.raises(KnowledgeChanged):
        world.read(hint["ref"])


def test_a_ref_read_rechecks_the_route_agents_source_filters(world: World) -> None:
    """A-REF: a read re-checks the route agent's sourceFilters, so a ref that binds no stored version (as
    refs issued before versions were bound) still cannot read a document those filters exclude."""
    key, _ = _world(world, NOT_US)
    scope = world.c.scopes.resolve("kb")
    identity = identity_digest(PRINCIPAL, "kb", None)
    docs = world.c.backend.get_documents([(key, "us-0"), (key, "eu-0")])

    def legacy_ref(doc_id: str) -> str:
        revision = docs[(key, doc_id)].revision
        ref, _ = world.c.codec.issue_ref(
            identity=identity, scope_revision=scope.revision, source_key=key, doc_id=doc_id, revision=revision
        )
        return ref

    assert world.read(legacy_ref("eu-0"))["title"] == "Pump seal note eu 0"
    with pytest.raises(KnowledgeChanged):
        world.read(legacy_ref("us-0"))


def _sub_agent(world: World, key: str, name: str, source_filter: dict[str, Any] | None = None) -> str:
    """An AUTO agent over `key` that always queries it, with `source_filter` or none of its own."""
    id_, version = key.split("@")
    knowledge = {"id": id_, "version": version}
    routing: dict[str, Any] = {
        "mode": "AUTO",
        "topK": 10,
        "rules": [{"knowledge": knowledge, "always": True}],
    }
    if source_filter is not None:
        routing["sourceFilters"] = [{"knowledge": knowledge, "filter": source_filter}]
    agent_id = f"{name}-{world.tag}"
    world.c.admin.publish_agent(
        AgentDefinition.model_validate(
            {
                "id": agent_id,
                "version": "1.0.0",
                "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
                "allowedKnowledge": [knowledge],
                "knowledgeRouting": routing,
            }
        )
    )
    return f"{agent_id}@1.0.0"


def _sub_tool(
    world: World, ancestors: list[str], agent: str, operation: str, context: dict[str, str]
) -> list[str]:
    n = uuid.uuid4().hex[:8]
    envelope = parse_envelope(
        {
            "operation": operation,
            "invocation": {
                "tenant": PRINCIPAL.tenant,
                "app": "contract",
                "subject": PRINCIPAL.subject,
                "agent": agent,
                "invocation_id": f"inv-sub-{n}",
                "ancestors": [
                    {"invocation_id": f"inv-anc-{i}-{n}", "agent": a} for i, a in enumerate(ancestors)
                ],
                "trusted_context": context,
            },
            "arguments": {"query": "pump seal torque"},
        }
    )
    result = world.c.tools.call(envelope).wire()
    assert "error" not in result, result
    return [r["source"]["docId"] for r in result["references"]]


@pytest.mark.parametrize("operation", ["startup", "knowledge_search"])
def test_r_budget_sub_agent_inherits_its_ancestors_source_filters(world: World, operation: str) -> None:
    """R-CFG, R-BUDGET: like budgets, an ancestor's sourceFilters bind its sub-agents: a sub-agent with no
    filter of its own, under a root bound to region=eu, sees only eu documents."""
    key, root = _world(world, REGION_FROM_CONTEXT)
    sub = _sub_agent(world, key, "sub")
    alone = _sub_tool(world, [], sub, operation, {"region": "eu"})
    assert {d.split("-")[0] for d in alone} == set(REGIONS)  # on its own, every region
    under_root = _sub_tool(world, [root], sub, operation, {"region": "eu"})
    assert under_root and {d.split("-")[0] for d in under_root} == {"eu"}
    assert (
        _sub_tool(world, [root], sub, operation, {}) == []
    )  # the root's context-bound condition holds nothing


def test_r_budget_sub_agent_filters_and_its_ancestors_both_apply(world: World) -> None:
    """R-CFG: a sub-agent's own filter and every ancestor's are and-ed: each only narrows."""
    key, root = _world(world, NOT_US)
    middle = _sub_agent(world, key, "middle", {"greaterThanOrEquals": {"key": "year", "value": 2024}})
    leaf = _sub_agent(world, key, "leaf", {"notEquals": {"key": "region", "value": "apac"}})
    found = _sub_tool(world, [root, middle], leaf, "knowledge_search", {})
    assert sorted(found) == ["eu-1", "eu-3"]
