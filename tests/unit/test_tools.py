"""R-TOOL / R-FAIL / R-EVENT / R-BUDGET through the tools service: a fake SearchBackend (injected
timeouts, unavailability, throttling, denials) over the real registry and ledger (embedded SQLite state)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from knowledge_core import bootstrap
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.models import (
    AgentDefinition,
    Document,
    DocumentAcl,
    DocumentState,
    SourceDefinition,
    SourceState,
    Viewer,
)
from knowledge_core.domain.tool_wire import parse_envelope
from knowledge_core.ports import Hit, QueryAnalysis, SearchBackend, SourceQuery, SourceResult
from knowledge_core.services.retrieval import Retrieval
from knowledge_core.services.tools import ToolsService

TOOL_MODEL = {"candidates": [{"model": "m", "toolCalling": True}]}


class FakeBackend(SearchBackend):
    """Ranked hits or a failure per source; documents for the live check; every query recorded."""

    def __init__(self) -> None:
        self.hits: dict[str, list[Hit]] = {}
        self.failures: dict[str, SourceFailure] = {}
        self.docs: dict[tuple[str, str], Document] = {}
        self.queries: list[SourceQuery] = []
        self.document_reads: list[list[tuple[str, str]]] = []  # one entry per batched live check

    def add(
        self,
        key: str,
        doc_id: str,
        body: str,
        score: float,
        *,
        acl: DocumentAcl | None = None,
        structured: dict | None = None,
        title: str | None = None,
    ) -> None:
        doc = Document(
            source_key=key,
            doc_id=doc_id,
            title=title or doc_id,
            body=body,
            acl=acl or DocumentAcl(tenant="t1"),  # the invocations' tenant
            structured_source=structured,
        )
        self.docs[(key, doc_id)] = doc
        self.hits.setdefault(key, []).append(
            Hit(key, doc_id, doc.title, doc.revision, score, body, structured)
        )

    def search(self, queries: list[SourceQuery], query: QueryAnalysis, viewer: Viewer) -> list[SourceResult]:
        self.queries.extend(queries)
        out = []
        for q in queries:
            if q.key in self.failures:
                out.append(SourceResult(q.key, error=self.failures[q.key], ms=1.0))
            else:
                # Over-returns (ignores top_k): the service must filter first and cut to topK itself.
                out.append(SourceResult(q.key, hits=list(self.hits.get(q.key, [])), ms=1.0))
        return out

    def get_document(self, source_key: str, doc_id: str) -> Document | None:
        return self.docs.get((source_key, doc_id))

    def get_documents(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        return {k: self.docs[k] for k in keys if k in self.docs}

    def document_states(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], DocumentState]:
        self.document_reads.append(list(keys))
        return {
            k: DocumentState(d.source_key, d.doc_id, d.status, d.acl, d.revision)
            for k, d in self.get_documents(keys).items()
        }

    def put_documents(self, documents: list[Document]) -> None:  # pragma: no cover - not used
        raise NotImplementedError

    def delete_document(self, source_key: str, doc_id: str) -> bool:  # pragma: no cover
        raise NotImplementedError

    def set_document_status(self, source_key: str, doc_id: str, status: str) -> bool:  # pragma: no cover
        raise NotImplementedError

    def healthy(self, timeout_s: float = 1.0) -> bool:
        return True

    def list_documents(self, source_key: str, limit: int = 1000) -> list:  # pragma: no cover
        raise NotImplementedError


def _ref(key: str) -> dict:
    id_, _, version = key.partition("@")
    return {"id": id_, "version": version}


class World:
    def __init__(self, container: Any, clock: Any) -> None:
        self.container = container
        self.clock = clock
        self.backend = FakeBackend()
        # Hand-set scores far apart: the relevance cut (tested on its own below) is off here.
        self.tools = ToolsService(
            container.scopes,
            self.backend,
            container.ledger,
            clock,
            Retrieval(self.backend, relevance_floor=0.0),
        )
        for key, description, tags in [
            ("alpha@1.0.0", "设备安装 installation", ["安装"]),
            ("beta@1.0.0", "gateway offline 网关离线", ["gateway"]),
            ("gamma@2.0.0", "billing refund 退款", ["billing"]),
        ]:
            id_, _, version = key.partition("@")
            container.admin.publish_source(
                SourceDefinition.model_validate(
                    {"id": id_, "version": version, "description": description, "tags": tags, "topK": 3}
                )
            )

    def agent(self, id_: str, routing: dict | None, allowed: list[str] | None = None) -> str:
        definition: dict = {
            "id": id_,
            "version": "1.0.0",
            "modelProfile": TOOL_MODEL,
            "allowedKnowledge": [_ref(k) for k in (allowed or ["alpha@1.0.0", "beta@1.0.0", "gamma@2.0.0"])],
        }
        if routing is not None:
            definition["knowledgeRouting"] = routing
        self.container.admin.publish_agent(AgentDefinition.model_validate(definition))
        return f"{id_}@1.0.0"

    def call(
        self,
        agent: str,
        arguments: dict,
        *,
        operation: str = "knowledge_search",
        invocation_id: str = "inv-1",
        ancestors: list[tuple[str, str]] | None = None,
        context: dict | None = None,
        deadline: str | None = None,
        subject: str = "u1",
        tenant: str = "t1",
    ) -> dict:
        invocation: dict = {
            "tenant": tenant,
            "app": "a1",
            "subject": subject,
            "agent": agent,
            "invocation_id": invocation_id,
            "ancestors": [{"invocation_id": i, "agent": a} for i, a in (ancestors or [])],
            "trusted_context": context or {},
        }
        if deadline:
            invocation["deadline"] = deadline
        return self.tools.call(
            parse_envelope({"operation": operation, "invocation": invocation, "arguments": arguments})
        ).wire()


@pytest.fixture
def world(container: Any, clock: Any) -> World:
    w = World(container, clock)
    w.backend.add("alpha@1.0.0", "a1", "设备安装规范：网关离地 1.5 m 安装。" * 3, 9.0)
    w.backend.add("alpha@1.0.0", "a2", "安装工具清单 installation tools", 4.0)
    w.backend.add("beta@1.0.0", "b1", "gateway offline troubleshooting 网关离线排查", 0.9)
    w.backend.add("gamma@2.0.0", "g1", "refund policy 退款政策", 2.0)
    return w


def _types(result: dict) -> list[str]:
    return [e["type"] for e in result["events"]]


def _event(result: dict, type_: str) -> list[dict]:
    return [e for e in result["events"] if e["type"] == type_]


# --- R-TOOL ------------------------------------------------------------------------------------------


def test_r_tool_result_shape_and_events(world: World) -> None:
    agent = world.agent(
        "auto",
        {
            "mode": "AUTO",
            "rerank": "LEXICAL",
            "rules": [_rule("alpha@1.0.0", queryTerms=["安装"], contextEquals={"p": "m"}, priority=10)],
        },
    )
    result = world.call(agent, {"query": "设备安装 gateway"}, context={"p": "m"})
    assert "error" not in result
    refs = result["references"]
    assert [r["knowledge"] for r in refs] == [
        {"id": "alpha", "version": "1.0.0"},
        {"id": "beta", "version": "1.0.0"},
        {"id": "alpha", "version": "1.0.0"},
    ]
    assert [r["citationId"] for r in refs] == ["cite-1", "cite-2", "cite-3"]
    assert set(refs[0]) == {"citationId", "knowledge", "content", "source", "fusionScore", "score"}
    assert refs[0]["score"] == 9.0 and refs[0]["fusionScore"] == 0.5  # rank 1 of one of two lists
    assert refs[0]["source"]["docId"] == "a1"
    assert _types(result) == [
        "knowledge.planned",
        "knowledge.retrieved",
        "knowledge.retrieved",
        "citation.created",
        "citation.created",
        "citation.created",
        "knowledge.fused",
    ]
    planned = _event(result, "knowledge.planned")[0]
    assert planned["sources"] == [
        {"knowledge": "alpha@1.0.0", "reason": "rule"},
        {"knowledge": "beta@1.0.0", "reason": "match"},
    ]
    assert all(e["invocationId"] == "inv-1" and e["at"].endswith("Z") for e in result["events"])
    retrieved = _event(result, "knowledge.retrieved")
    assert [(e["knowledge"], e["status"], e["count"]) for e in retrieved] == [
        ("alpha@1.0.0", "OK", 2),
        ("beta@1.0.0", "OK", 1),
    ]
    created = _event(result, "citation.created")
    assert created[0]["retrievalId"] == retrieved[0]["retrievalId"]
    assert created[0]["knowledgeVersion"] == "alpha@1.0.0" and created[0]["fusionScore"] == 0.5
    fused = _event(result, "knowledge.fused")[0]
    chars = sum(len(r["content"]) for r in refs)
    assert fused == {
        **fused,
        "count": 3,
        "rerank": "LEXICAL",
        "retrievalsUsed": 2,
        "retrievalsRemaining": 6,
        "charsUsed": chars,
        "charsRemaining": 16000 - chars,
    }


def _rule(key: str, **fields: Any) -> dict:
    return {"knowledge": _ref(key), **fields}


def test_r_tool_no_match_is_empty_references(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO"})
    result = world.call(agent, {"query": "weather tomorrow"})
    assert result["references"] == []
    assert _event(result, "knowledge.planned")[0]["sources"] == []
    assert world.backend.queries == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "x", "appId": "a2"},
        {"query": "x", "subjectId": "u2"},
        {"query": "x", "tenantId": "t2"},
        {"query": "x", "context": {"p": "m"}},
        {"query": 1},
        {"query": "  "},
        {},
        {"query": "x", "sources": []},
        {"query": "x", "sources": "alpha@1.0.0"},
    ],
)
def test_r_tool_protocol_error_on_model_arguments(world: World, arguments: dict) -> None:
    agent = world.agent("auto", {"mode": "AUTO"})
    event = {
        "operation": "knowledge_search",
        "arguments": arguments,
        "invocation": {"tenant": "t1", "app": "a1", "subject": "u1", "agent": agent, "invocation_id": "i"},
    }
    world.container.settings = world.container.settings  # same container for the handler below
    bootstrap.reset(world.container)
    try:
        from kb_cli.gateway import Handlers

        result = Handlers().invoke("AgentToolsFunction", event)
    finally:
        bootstrap.reset()
    assert result["error"]["code"] == "PROTOCOL_ERROR" and result["events"] == []
    assert world.backend.queries == []


@pytest.mark.parametrize("routing", [None, {"mode": "EAGER"}])
def test_r_tool_not_exposed_is_protocol_error(world: World, routing: dict | None) -> None:
    agent = world.agent("plain", routing)
    result = world.call(agent, {"query": "安装"})
    assert result["error"]["code"] == "PROTOCOL_ERROR"


def test_r_tool_unknown_agent_is_protocol_error(world: World) -> None:
    assert world.call("ghost@1.0.0", {"query": "x"})["error"]["code"] == "PROTOCOL_ERROR"
    agent = world.agent("auto", {"mode": "AUTO"})
    result = world.call(agent, {"query": "x"}, ancestors=[("root", "ghost@9.9.9")])
    assert result["error"]["code"] == "PROTOCOL_ERROR"


@pytest.mark.parametrize(
    "sources", [["delta@1.0.0"], ["alpha@2.0.0"], ["alpha@1.0.0", "alpha@1.0.0"], ["alpha"]]
)
def test_r_tool_source_denied_before_any_source_is_called(world: World, sources: list[str]) -> None:
    agent = world.agent("auto", {"mode": "AUTO"}, allowed=["alpha@1.0.0", "beta@1.0.0"])
    result = world.call(agent, {"query": "安装", "sources": sources})
    assert result["error"]["code"] == "KNOWLEDGE_SOURCE_DENIED"
    assert world.backend.queries == []
    assert world.container.ledger.entry("inv-1", "inv-1") is None  # nothing opened, nothing spent


def test_r_tool_explicit_sources_only_those(world: World) -> None:
    agent = world.agent("auto", {"mode": "ON_DEMAND"})
    result = world.call(agent, {"query": "安装 gateway refund", "sources": ["gamma@2.0.0"]})
    assert [q.key for q in world.backend.queries] == ["gamma@2.0.0"]
    assert _event(result, "knowledge.planned")[0]["sources"] == [
        {"knowledge": "gamma@2.0.0", "reason": "explicit"}
    ]


def test_r_tool_revoked_source_is_denied_live(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO"})
    world.container.state.registry.update_source_state("gamma@2.0.0", SourceState(status="revoked"))
    world.container.scopes.invalidate()
    assert (
        world.call(agent, {"query": "退款", "sources": ["gamma@2.0.0"]})["error"]["code"]
        == "KNOWLEDGE_SOURCE_DENIED"
    )
    assert world.call(agent, {"query": "退款 refund"})["references"] == []


def test_r_tool_live_document_checks(world: World) -> None:
    """Tenant, ACL, status and revision are checked per document, now; filtered hits take no rank."""
    world.backend.add(
        "gamma@2.0.0", "g-other-tenant", "refund 退款 policy", 8.0, acl=DocumentAcl(tenant="t2")
    )
    world.backend.add(
        "gamma@2.0.0", "g-private", "refund 退款 secret", 7.0, acl=DocumentAcl(tenant="t1", subjects=["boss"])
    )
    world.backend.add("gamma@2.0.0", "g-changed", "refund 退款 old text", 6.0)
    world.backend.docs[("gamma@2.0.0", "g-changed")] = world.backend.docs[
        ("gamma@2.0.0", "g-changed")
    ].model_copy(update={"body": "new text"})
    world.backend.hits["gamma@2.0.0"].sort(key=lambda h: -h.score)
    agent = world.agent("auto", {"mode": "AUTO"})
    result = world.call(agent, {"query": "退款", "sources": ["gamma@2.0.0"]})
    assert [r["source"]["docId"] for r in result["references"]] == ["g1"]
    assert result["references"][0]["fusionScore"] == 1.0
    boss = world.call(
        agent, {"query": "退款", "sources": ["gamma@2.0.0"]}, subject="boss", invocation_id="inv-b"
    )
    assert [r["source"]["docId"] for r in boss["references"]] == ["g-private", "g1"]


def test_k_pipe_live_check_is_one_batched_read(world: World) -> None:
    """K-PIPE: every hit of every selected source is checked in one read (never one per hit); a second
    batch only replaces hits that failed the check."""
    for i in range(6):
        world.backend.add("alpha@1.0.0", f"a-more-{i}", f"安装 installation note {i}", 3.0 - i / 10)
        world.backend.add("beta@1.0.0", f"b-more-{i}", f"gateway offline 网关离线 note {i}", 0.8 - i / 10)
    agent = world.agent("auto", {"mode": "AUTO", "topK": 6})
    world.backend.document_reads.clear()
    result = world.call(agent, {"query": "安装 gateway", "sources": ["alpha@1.0.0", "beta@1.0.0"]})
    assert len(result["references"]) == 6
    assert len(world.backend.document_reads) == 1
    assert {k for k, _ in world.backend.document_reads[0]} == {"alpha@1.0.0", "beta@1.0.0"}
    world.backend.docs.pop(("alpha@1.0.0", "a1"))  # a hit whose document is gone: the next one moves up
    world.backend.document_reads.clear()
    again = world.call(agent, {"query": "安装 gateway", "sources": ["alpha@1.0.0"]}, invocation_id="inv-2")
    assert "a1" not in [r["source"]["docId"] for r in again["references"]]
    assert len(again["references"]) == 3 and len(world.backend.document_reads) == 2


# --- R-FAIL ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "code", "transient"),
    [
        ("timeout", "KNOWLEDGE_TIMEOUT", True),
        ("unavailable", "KNOWLEDGE_UNAVAILABLE", True),
        ("throttled", "KNOWLEDGE_THROTTLED", True),
        ("access_denied", "KNOWLEDGE_ACCESS_DENIED", False),
        ("bad_request", "KNOWLEDGE_SOURCE_ERROR", False),
    ],
)
@pytest.mark.parametrize("policy", ["FAIL_FAST", "SKIP_TRANSIENT"])
def test_r_fail_policies(world: World, kind: str, code: str, transient: bool, policy: str) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "failurePolicy": policy})
    world.backend.failures["beta@1.0.0"] = SourceFailure(kind)
    result = world.call(agent, {"query": "安装 gateway"})
    statuses = {e["knowledge"]: e["status"] for e in _event(result, "knowledge.retrieved")}
    assert statuses == {"alpha@1.0.0": "OK", "beta@1.0.0": code}
    if policy == "SKIP_TRANSIENT" and transient:
        assert [r["knowledge"]["id"] for r in result["references"]] == ["alpha", "alpha"]
    else:
        assert result["error"]["code"] == code and "references" not in result


def test_r_fail_skip_transient_with_every_source_failing_is_an_error(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "failurePolicy": "SKIP_TRANSIENT"})
    world.backend.failures["alpha@1.0.0"] = SourceFailure("throttled")
    world.backend.failures["beta@1.0.0"] = SourceFailure("timeout")
    result = world.call(agent, {"query": "安装 gateway"})
    assert result["error"]["code"] == "KNOWLEDGE_THROTTLED"


def test_r_route_expired_lease_of_selected_source_unavailable(world: World) -> None:
    world.container.state.registry.update_source_state(
        "beta@1.0.0", SourceState(lease_until="2020-01-01T00:00:00Z")
    )
    world.container.scopes.invalidate()
    fail_fast = world.agent("ff", {"mode": "AUTO"})
    result = world.call(fail_fast, {"query": "安装 gateway"})
    assert result["error"]["code"] == "KNOWLEDGE_UNAVAILABLE"
    assert world.backend.queries == []  # failed before anything was asked or charged
    assert world.container.ledger.entry("inv-1", "inv-1") is None  # nothing charged, nothing created
    skip = world.agent("skip", {"mode": "AUTO", "failurePolicy": "SKIP_TRANSIENT"})
    result = world.call(skip, {"query": "安装 gateway"}, invocation_id="inv-2")
    assert [e["status"] for e in _event(result, "knowledge.retrieved")] == ["OK", "KNOWLEDGE_UNAVAILABLE"]
    assert [q.key for q in world.backend.queries] == ["alpha@1.0.0"]
    # An unselected source's expired lease does not block.
    assert "error" not in world.call(fail_fast, {"query": "安装"}, invocation_id="inv-3")


def test_r_budget_deadline_bounds_source_timeout(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "sourceTimeoutSeconds": 15})
    world.call(agent, {"query": "安装"}, deadline="2026-11-29T12:00:04Z", invocation_id="inv-d")
    assert world.backend.queries[-1].timeout_s == pytest.approx(4.0)
    # A sub-agent inherits the earliest deadline of the chain (the parent's, recorded on first sight).
    world.call(
        agent,
        {"query": "安装"},
        ancestors=[("inv-d", agent)],
        invocation_id="inv-e",
        deadline="2026-11-29T13:00:00Z",
    )
    assert world.backend.queries[-1].timeout_s == pytest.approx(4.0)
    world.clock.advance(5)
    result = world.call(agent, {"query": "安装"}, ancestors=[("inv-d", agent)], invocation_id="inv-f")
    assert result["error"]["code"] == "KNOWLEDGE_TIMEOUT"
    assert len(world.backend.queries) == 2


# --- R-BUDGET through the tool ---------------------------------------------------------------------------


def test_r_budget_exceeded_never_retried_and_nothing_charged(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "maxRetrievals": 3})
    assert "error" not in world.call(agent, {"query": "安装 gateway"})
    result = world.call(agent, {"query": "安装 gateway"})
    assert result["error"]["code"] == "KNOWLEDGE_BUDGET_EXCEEDED"
    assert len(world.backend.queries) == 2  # the refused call asked no source
    assert world.container.ledger.entry("inv-1", "inv-1").retrievals == 2
    assert "error" not in world.call(agent, {"query": "安装"})  # one retrieval still fits


def test_r_budget_per_source_limit(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "maxQueriesPerSource": 2})
    for _ in range(2):
        assert "error" not in world.call(agent, {"query": "安装"})
    assert world.call(agent, {"query": "安装"})["error"]["code"] == "KNOWLEDGE_BUDGET_EXCEEDED"
    assert "error" not in world.call(agent, {"query": "gateway"})


def test_r_tool_repeat_reuses_citations_without_new_chars(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO"})
    first = world.call(agent, {"query": "安装"})
    second = world.call(agent, {"query": "安装"})
    assert [r["citationId"] for r in second["references"]] == [r["citationId"] for r in first["references"]]
    assert _event(second, "citation.created") == []
    f1, f2 = _event(first, "knowledge.fused")[0], _event(second, "knowledge.fused")[0]
    assert f2["charsUsed"] == f1["charsUsed"] and f2["retrievalsUsed"] == f1["retrievalsUsed"] + 1
    assert len(world.backend.queries) == 2  # re-queried, re-checked


def test_r_budget_source_max_chars_and_context_chars(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "sourceMaxChars": 30, "maxContextChars": 40})
    result = world.call(agent, {"query": "安装 gateway"})
    refs = result["references"]
    by_source: dict[str, int] = {}
    for r in refs:
        by_source[r["knowledge"]["id"]] = by_source.get(r["knowledge"]["id"], 0) + len(r["content"])
    assert by_source["alpha"] <= 30
    assert sum(len(r["content"]) for r in refs) == 40
    fused = _event(result, "knowledge.fused")[0]
    assert fused["charsUsed"] == 40 and fused["charsRemaining"] == 0
    # Zero remaining: no new citation (and an empty result, not an error).
    again = world.call(agent, {"query": "refund", "sources": ["gamma@2.0.0"]})
    assert again["references"] == [] and _event(again, "citation.created") == []


def test_r_budget_three_level_agent_tree(world: World) -> None:
    """root (4 retrievals, 120 chars) -> triage (3, 100) -> two support sub-agents (8, 16000 each)."""
    root = world.agent("root", {"mode": "AUTO", "maxRetrievals": 4, "maxContextChars": 120})
    triage = world.agent("triage", {"mode": "AUTO", "maxRetrievals": 3, "maxContextChars": 100})
    support = world.agent("support", {"mode": "AUTO", "topK": 1})
    chain = [("inv-root", root), ("inv-triage", triage)]
    a = world.call(support, {"query": "安装"}, invocation_id="inv-s1", ancestors=chain)
    assert [len(r["content"]) for r in a["references"]] == [63]
    b = world.call(support, {"query": "gateway"}, invocation_id="inv-s2", ancestors=chain)
    assert [len(r["content"]) for r in b["references"]] == [37]  # 38, cut to triage's remaining 100 - 63
    assert _event(b, "knowledge.fused")[0]["charsRemaining"] == 16000 - 37  # its own ledger
    c = world.call(support, {"query": "安装 gateway"}, invocation_id="inv-s3", ancestors=chain)
    assert c["error"]["code"] == "KNOWLEDGE_BUDGET_EXCEEDED"  # triage: 2 + 2 > 3
    ledger = world.container.ledger
    assert [
        (e.retrievals, e.chars) if e else None
        for e in (
            ledger.entry("inv-root", i) for i in ("inv-root", "inv-triage", "inv-s1", "inv-s2", "inv-s3")
        )
    ] == [(2, 100), (2, 100), (1, 63), (1, 37), None]  # the refused call charged and created nothing
    # The root's own call: its remaining 20 chars hold the 18 of g1; ids stay unique within the root.
    d = world.call(root, {"query": "refund 退款"}, invocation_id="inv-root")
    assert [(r["citationId"], len(r["content"])) for r in d["references"]] == [("cite-3", 18)]
    assert ledger.entry("inv-root", "inv-root").chars == 118


# --- startup (R-MODE) and the ready events ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("routing", "reasons"),
    [
        (None, ["legacy", "legacy", "legacy"]),
        ({"mode": "EAGER", "maxSources": 2}, ["eager", "eager"]),
        ({"mode": "AUTO"}, ["match"]),
        ({"mode": "ON_DEMAND"}, []),
    ],
)
def test_r_mode_startup(world: World, routing: dict | None, reasons: list[str]) -> None:
    agent = world.agent("agent", routing)
    result = world.call(agent, {"query": "安装"}, operation="startup")
    assert [s["reason"] for s in _event(result, "knowledge.planned")[0]["sources"]] == reasons
    assert len(world.backend.queries) == len(reasons)
    assert (result["references"] == []) == (not reasons)


def test_startup_rejects_sources_argument(world: World) -> None:
    agent = world.agent("agent", {"mode": "AUTO"})
    with pytest.raises(Exception, match="sources: unknown field"):
        world.call(agent, {"query": "x", "sources": ["alpha@1.0.0"]}, operation="startup")


@pytest.mark.parametrize("name", ["knowledge_search.json", "startup.json"])
def test_ready_events_through_the_handler(demo_container: Any, name: str) -> None:
    from kb_cli.events import load_event
    from kb_cli.gateway import Handlers

    bootstrap.reset(demo_container)
    try:
        result = Handlers().invoke("AgentToolsFunction", copy.deepcopy(load_event(f"agent_tools/{name}")))
    finally:
        bootstrap.reset()
    assert "error" not in result
    assert result["references"] and all(
        r["knowledge"] == {"id": "demo-docs", "version": "1.0.0"} for r in result["references"]
    )
    assert _types(result)[0] == "knowledge.planned" and _types(result)[-1] == "knowledge.fused"


def test_r_tool_relevance_cut_stops_padding_and_keeps_min_score(container: Any, clock: Any) -> None:
    """无匹配不强塞文档: with the default floor the tool stops at references far below its best one (per
    source, before fusion), instead of filling topK; minScore still drops what is below it first."""
    w = World(container, clock)
    w.tools = ToolsService(container.scopes, w.backend, container.ledger, clock)  # the default cut
    w.backend.add("alpha@1.0.0", "a1", "设备安装规范：网关离地 1.5 m 安装。", 9.0)
    w.backend.add("alpha@1.0.0", "a2", "安装工具清单 installation tools", 8.0)
    w.backend.add("alpha@1.0.0", "a3", "unrelated padding", 1.0)
    agent = w.agent("cut", {"mode": "AUTO", "rules": [_rule("alpha@1.0.0", always=True)]}, ["alpha@1.0.0"])
    refs = w.call(agent, {"query": "设备安装"})["references"]
    assert [r["source"]["docId"] for r in refs] == ["a1", "a2"]
