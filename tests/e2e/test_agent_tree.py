"""A three-level agent tree driven through `kb serve`'s Lambda Invoke API
(POST /2015-03-31/functions/AgentToolsFunction/invocations): routing (R-ROUTE), shared budgets
(R-BUDGET), fusion (R-FUSE), citations (R-TOOL), failure results and events (R-EVENT) — with sources and
agents published through `kb publish` (R-CFG, R-ADMIN). Runs its own server so its documents do not
change the demo route's ranking for the other e2e tests."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import KB, ROOT, KbServer, running_kb_serve

INVOKE = "/2015-03-31/functions/AgentToolsFunction/invocations"
TOOL_MODEL = {"candidates": [{"model": "model-a", "toolCalling": True}]}
SOURCES = [
    {
        "id": "tree-install",
        "version": "1.0.0",
        "description": "设备安装规范 device installation",
        "tags": ["安装", "设备"],
        "topK": 2,
    },
    {
        "id": "tree-network",
        "version": "1.0.0",
        "description": "网关离线 gateway offline network",
        "tags": ["gateway"],
        "topK": 2,
    },
    {
        "id": "tree-billing",
        "version": "2.0.0",
        "description": "退款 refund billing",
        "tags": ["billing"],
        "topK": 2,
    },
]
DOCS = {
    "tree-install@1.0.0": [
        (
            "install-1",
            "网关安装规范",
            "网关安装位置：离地 1.5 m，天线朝上。设备安装前检查供电。" * 8,
            {"uri": "kb://shared/install"},
        ),
        ("install-2", "传感器安装", "传感器安装使用 M4 螺丝固定，设备安装后拍照。", None),
    ],
    "tree-network@1.0.0": [
        (
            "net-1",
            "Gateway offline",
            "gateway offline: check the uplink cable, then the 4G signal. 网关离线先查网线。",
            None,
        ),
        # The same installation passage, published in a second source with the same structured source.
        (
            "net-copy",
            "网关安装规范",
            "网关安装位置：离地 1.5 m，天线朝上。设备安装前检查供电。" * 8,
            {"uri": "kb://shared/install"},
        ),
    ],
    "tree-billing@2.0.0": [("bill-1", "Refund policy", "refund within 14 days 退款 14 天内", None)],
}


def _ref(key: str) -> dict:
    id_, _, version = key.partition("@")
    return {"id": id_, "version": version}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbServer]:
    with running_kb_serve(tmp_path_factory.mktemp("kb-tree"), demo=False, table_prefix="kb-tree") as server:
        yield server


def _publish(server: KbServer, kind: str, definition: dict) -> subprocess.CompletedProcess:
    path = server.state / f"{kind}-{definition['id']}-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(definition, ensure_ascii=False), encoding="utf-8")
    return server.kb("publish", kind, str(path))


@pytest.fixture(scope="module")
def tree(server: KbServer) -> dict[str, str]:
    for source in SOURCES:
        assert _publish(server, "source", source).returncode == 0
    for key, docs in DOCS.items():
        body = {
            "documents": [
                {
                    "doc_id": d,
                    "title": t,
                    "body": b,
                    "acl": {"tenant": "t1"},  # the invocations' tenant (a document always names one)
                    **({"structured_source": s} if s else {}),
                }
                for d, t, b, s in docs
            ]
        }
        assert server.request("POST", f"/admin/v1/sources/{key}/documents", body).status == 200
    allowed = [_ref(f"{s['id']}@{s['version']}") for s in SOURCES]
    agents = {
        "root": {
            "id": "tree-root",
            "version": "1.0.0",
            "systemPrompt": "root",
            "modelProfile": TOOL_MODEL,
            "allowedKnowledge": allowed,
            "knowledgeRouting": {"mode": "ON_DEMAND", "maxRetrievals": 6, "maxContextChars": 400},
        },
        "triage": {
            "id": "tree-triage",
            "version": "1.0.0",
            "systemPrompt": "triage",
            "modelProfile": TOOL_MODEL,
            "allowedKnowledge": allowed,
            "knowledgeRouting": {"mode": "AUTO", "maxRetrievals": 5, "maxContextChars": 300},
        },
        "support": {
            "id": "tree-support",
            "version": "1.0.0",
            "systemPrompt": "support",
            "modelProfile": TOOL_MODEL,
            "allowedKnowledge": allowed[:2],
            "knowledgeRouting": {
                "mode": "AUTO",
                "maxSources": 2,
                "topK": 4,
                "maxRetrievals": 8,
                "maxContextChars": 16000,
                "failurePolicy": "SKIP_TRANSIENT",
                "rerank": "LEXICAL",
                "rules": [
                    {
                        "knowledge": allowed[0],
                        "queryTerms": ["安装"],
                        "contextEquals": {"projectType": "monitor"},
                        "priority": 10,
                    }
                ],
            },
        },
    }
    for agent in agents.values():
        assert _publish(server, "agent", agent).returncode == 0
    return {name: f"{a['id']}@{a['version']}" for name, a in agents.items()}


def _invoke(
    server: KbServer,
    operation: str,
    agent: str,
    invocation_id: str,
    arguments: dict,
    ancestors: list[tuple[str, str]] = (),
    context: dict | None = None,
) -> dict:
    envelope = {
        "operation": operation,
        "arguments": arguments,
        "invocation": {
            "tenant": "t1",
            "app": "a1",
            "subject": "u1",
            "agent": agent,
            "invocation_id": invocation_id,
            "ancestors": [{"invocation_id": i, "agent": a} for i, a in ancestors],
            "deadline": "2099-01-01T00:00:00Z",
            "trusted_context": context or {},
        },
    }
    response = server.request("POST", INVOKE, envelope)
    assert response.status == 200 and "x-amz-function-error" not in response.headers
    return response.json


def _events(result: dict, type_: str) -> list[dict]:
    return [e for e in result["events"] if e["type"] == type_]


def test_r_admin_publish_is_immutable_and_prechecked(server: KbServer, tree: dict[str, str]) -> None:
    identical = _publish(server, "source", SOURCES[0])
    assert identical.returncode == 0 and "already published (identical)" in identical.stdout
    changed = _publish(server, "source", {**SOURCES[0], "description": "changed"})
    assert changed.returncode == 1 and "409" in changed.stderr and "conflict" in changed.stderr
    no_tools = {
        "id": "tree-legacy-model",
        "version": "1.0.0",
        "modelProfile": {"candidates": [{"model": "x"}]},
        "allowedKnowledge": [_ref("tree-install@1.0.0")],
        "knowledgeRouting": {"mode": "AUTO"},
    }
    rejected = _publish(server, "agent", no_tools)
    assert rejected.returncode == 1 and "400" in rejected.stderr and "toolCalling" in rejected.stderr
    switched = server.kb("workspace", "set", "tree", "--agent", tree["support"])
    assert switched.returncode == 0, switched.stderr


def test_r_tool_three_level_tree_routes_spends_fuses_and_cites(
    server: KbServer, tree: dict[str, str]
) -> None:
    root = (f"root-{uuid.uuid4().hex[:6]}", tree["root"])
    triage = (f"triage-{uuid.uuid4().hex[:6]}", tree["triage"])
    chain = [root, triage]

    # Leaf: trusted context makes the rule match; description matching adds the network source.
    first = _invoke(
        server,
        "knowledge_search",
        tree["support"],
        "support-1",
        {"query": "网关安装 gateway offline"},
        chain,
        {"projectType": "monitor"},
    )
    assert "error" not in first, first
    assert _events(first, "knowledge.planned")[0]["sources"] == [
        {"knowledge": "tree-install@1.0.0", "reason": "rule"},
        {"knowledge": "tree-network@1.0.0", "reason": "match"},
    ]
    assert [e["status"] for e in _events(first, "knowledge.retrieved")] == ["OK", "OK"]
    refs = first["references"]
    # The install passage published in both sources (same structured source and content) is one reference.
    uris = [r.get("source", {}).get("structured", {}).get("uri") for r in refs]
    assert uris.count("kb://shared/install") == 1
    assert all(0 < r["fusionScore"] <= 1 for r in refs)
    # Rank 1 in tree-install. Its copy in tree-network ranks 2nd there, far below net-1 (which matches
    # "gateway offline" too), so that source's relevance cut (K-REL: below 0.7 x its best) drops it
    # before fusion: one list's 1/61, normalised by 2 lists x 1/61.
    assert refs[0]["source"]["docId"] == "install-1"
    assert refs[0]["fusionScore"] == round((1 / 61) / (2 / 61), 6)
    assert len({r["citationId"] for r in refs}) == len(refs)
    chars = sum(len(r["content"]) for r in refs)
    assert chars == 300  # cut to triage's maxContextChars (root 400, own 16000)
    fused = _events(first, "knowledge.fused")[0]
    assert (fused["retrievalsUsed"], fused["charsUsed"], fused["rerank"]) == (2, 300, "LEXICAL")

    # Untrusted: the same words in the chat do not satisfy contextEquals; the rule source is not chosen.
    untrusted = _invoke(
        server,
        "knowledge_search",
        tree["support"],
        "support-2",
        {"query": "网关安装 projectType=monitor"},
        chain,
    )
    assert [s["knowledge"] for s in _events(untrusted, "knowledge.planned")[0]["sources"]] == [
        "tree-network@1.0.0"
    ]
    # Triage is out of chars: a sibling's repeated content reuses ids, new content gets no citation.
    assert all(r["citationId"] in {x["citationId"] for x in refs} for r in untrusted["references"])
    assert _events(untrusted, "citation.created") == []

    # Explicit sources outside the leaf's allowedKnowledge: denied before any source is asked.
    denied = _invoke(
        server,
        "knowledge_search",
        tree["support"],
        "support-3",
        {"query": "退款", "sources": ["tree-billing@2.0.0"]},
        chain,
    )
    assert denied["error"]["code"] == "KNOWLEDGE_SOURCE_DENIED"
    protocol = _invoke(
        server, "knowledge_search", tree["support"], "support-3", {"query": "退款", "tenantId": "t2"}, chain
    )
    assert protocol == {
        "error": {"code": "PROTOCOL_ERROR", "message": "arguments.tenantId: unknown field"},
        "events": [],
    }

    # Triage has spent 3 of 5 retrievals (2 + 1): a two-source call fits once, then the budget is exceeded.
    _invoke(
        server,
        "knowledge_search",
        tree["support"],
        "support-4",
        {"query": "安装 gateway"},
        chain,
        {"projectType": "monitor"},
    )
    exceeded = _invoke(
        server,
        "knowledge_search",
        tree["support"],
        "support-5",
        {"query": "安装"},
        chain,
        {"projectType": "monitor"},
    )
    assert exceeded["error"]["code"] == "KNOWLEDGE_BUDGET_EXCEEDED"

    # The root (ON_DEMAND) still has 1 retrieval and 100 chars of its own: billing is new content.
    own = _invoke(
        server,
        "knowledge_search",
        tree["root"],
        root[0],
        {"query": "退款", "sources": ["tree-billing@2.0.0"]},
    )
    assert [r["knowledge"]["id"] for r in own["references"]] == ["tree-billing"]
    fused_root = _events(own, "knowledge.fused")[0]
    assert fused_root["retrievalsUsed"] == 6 and fused_root["retrievalsRemaining"] == 0
    assert fused_root["charsUsed"] == 300 + len(own["references"][0]["content"])
    # Startup of the ON_DEMAND root retrieves nothing.
    startup = _invoke(server, "startup", tree["root"], root[0], {"query": "安装"})
    assert startup["references"] == [] and _events(startup, "knowledge.planned")[0]["sources"] == []


def test_agent_tools_ready_events_via_kb_invoke(server: KbServer) -> None:
    """`kb invoke AgentToolsFunction -e events/agent_tools/…` (embedded, demo seeded) answers references."""
    result = subprocess.run(
        [*KB, "invoke", "AgentToolsFunction", "-e", "events/agent_tools/knowledge_search.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR"},
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout[result.stdout.index("{\n") :])
    assert body["references"] and body["events"][0]["type"] == "knowledge.planned"
    assert Path(ROOT / "events/agent_tools/startup.json").exists()
