"""The host client (knowledge_client): negotiation (A-CAP), turns (A-TURN), search/read tools, cursor-only
paging (A-READ), per-turn/account/scope caches and late-response dropping — without a network: the
transport is either scripted or the local gateway called in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from knowledge_core import bootstrap
from knowledge_core.domain.models import Document

from kb_cli.gateway import LocalGateway
from knowledge_client import (
    READ_TOOL,
    SEARCH_TOOL,
    HttpResponse,
    KnowledgeClient,
    KnowledgeClientError,
    NegotiationError,
    NoActiveTurn,
    ProtocolError,
    StaleResponse,
    TransportError,
    tool_definitions,
)
from tests.conftest import stored_runs

ENDPOINT = "http://kb.test"
SOURCE = "demo-docs@1.0.0"
CAPS = {
    "schema": "bailing.agent-knowledge-capabilities.v1",
    "protocol": "bailing.agent-knowledge.v1",
    "supported": True,
    "route": "demo",
    "enabled": True,
    "knowledge_scope_revision": "abc",
    "delivery_modes": ["inline", "on_demand"],
    "limits": {},
}


class Scripted:
    """Answers by (method, path suffix) from a table; records requests."""

    def __init__(self, answers: dict[str, Callable[[dict | None], HttpResponse]]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, str, dict | None]] = []

    def __call__(self, method, url, headers, body, timeout):
        payload = json.loads(body) if body else None
        self.requests.append((method, url, payload))
        for suffix, answer in self.answers.items():
            if url.endswith(suffix):
                return answer(payload)
        return HttpResponse(404, b"{}")


def reply(status: int, body: object) -> Callable[[dict | None], HttpResponse]:
    return lambda _payload: HttpResponse(status, json.dumps(body).encode())


class GatewayTransport:
    """The real handlers behind the local gateway, called in-process; `hooks` run after a response."""

    def __init__(self) -> None:
        self.gateway = LocalGateway()
        self.calls: list[str] = []
        self.drop_next: set[str] = set()
        self.after: dict[str, Callable[[], None]] = {}

    def __call__(self, method, url, headers, body, timeout):
        parts = urlsplit(url)
        name = parts.path.rsplit("/", 1)[-1]
        self.calls.append(name)
        status, hdrs, raw = self.gateway.http(
            method,
            parts.path,
            parts.query,
            {k.lower(): v for k, v in headers.items()},
            body or b"",
            "127.0.0.1",
        )
        hook = self.after.pop(name, None)
        if hook:
            hook()
        if name in self.drop_next:
            self.drop_next.discard(name)
            raise TransportError("response lost on the way back")
        return HttpResponse(status, raw, hdrs)


@pytest.fixture
def served(demo_container):
    bootstrap.reset(demo_container)
    token, _ = demo_container.access.issue_token(
        routes=["demo"], client_id="host", subject="u", tenant="default"
    )
    transport = GatewayTransport()
    client = KnowledgeClient(ENDPOINT, "demo", token, transport=transport, retry_pause=0)
    yield demo_container, client, transport, token
    bootstrap.reset(None)


# --- negotiation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 405, 501])
def test_a_cap_client_old_core_means_legacy_inline(status):
    turn = {
        "schema": "bailing.agent-turn.v1",
        "turn_id": "t1",
        "run_id": "r1",
        "run_state": "context_ready",
        "context": {"instructions": "x", "knowledge": [], "knowledge_refs": []},
    }
    transport = Scripted(
        {"/knowledge/capabilities": reply(status, {"message": "Not Found"}), "/turns": reply(200, turn)}
    )
    client = KnowledgeClient(ENDPOINT, "demo", "kbt_x", transport=transport)
    caps = client.negotiate()
    assert caps.supported is False and not caps.on_demand
    started = client.start_turn("hello", turn_id="t1")
    assert started.mode == "inline" and "knowledge_delivery" not in transport.requests[-1][2]
    with pytest.raises(Exception, match="inline only"):
        client.search("x")


@pytest.mark.parametrize(
    "answer",
    [
        reply(401, {"error": {"code": "unauthorized"}}),
        reply(403, {"error": {"code": "forbidden"}}),
        reply(500, {}),
        reply(503, {"error": {"code": "knowledge_unavailable"}}),
        reply(400, {}),
        reply(200, {**CAPS, "schema": "bailing.agent-knowledge-capabilities.v2"}),
        reply(200, {**CAPS, "protocol": "other"}),
        reply(200, ["not", "an", "object"]),
        lambda _p: HttpResponse(200, b"<html>"),
        lambda _p: (_ for _ in ()).throw(TransportError("down")),
    ],
)
def test_a_cap_client_errors_never_pass_as_success(answer):
    client = KnowledgeClient(
        ENDPOINT, "demo", "kbt_x", transport=Scripted({"/knowledge/capabilities": answer})
    )
    with pytest.raises(NegotiationError):
        client.negotiate()
    with pytest.raises(NegotiationError):
        client.start_turn("hello")


def test_a_turn_client_requires_the_on_demand_echo():
    inline_answer = {
        "schema": "bailing.agent-turn.v1",
        "turn_id": "t1",
        "run_id": "r1",
        "run_state": "context_ready",
        "context": {"instructions": "x", "knowledge": [], "knowledge_refs": []},
    }
    transport = Scripted({"/knowledge/capabilities": reply(200, CAPS), "/turns": reply(200, inline_answer)})
    client = KnowledgeClient(ENDPOINT, "demo", "kbt_x", transport=transport)
    with pytest.raises(ProtocolError):
        client.start_turn("hello", turn_id="t1")
    assert transport.requests[-1][2]["knowledge_delivery"] == "on_demand"


# --- tools -----------------------------------------------------------------------------------------


def test_client_tools_in_openai_and_anthropic_formats():
    openai = tool_definitions("openai")
    anthropic = tool_definitions("anthropic")
    assert [t["function"]["name"] for t in openai] == [SEARCH_TOOL, READ_TOOL]
    assert [t["name"] for t in anthropic] == [SEARCH_TOOL, READ_TOOL]
    for o, a in zip(openai, anthropic, strict=True):
        assert o["type"] == "function" and o["function"]["parameters"] == a["input_schema"]
        assert a["input_schema"]["additionalProperties"] is False and a["description"]
    assert anthropic[0]["input_schema"]["required"] == ["query"]
    assert anthropic[1]["input_schema"]["required"] == ["ref"]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        (SEARCH_TOOL, {"query": "x", "kb_ids": ["a"]}),
        (SEARCH_TOOL, {"query": "x", "limit": "3"}),
        (SEARCH_TOOL, {"query": "x", "limit": 4}),
        (SEARCH_TOOL, {"query": " "}),
        (SEARCH_TOOL, {}),
        (READ_TOOL, {"ref": "r", "offset": 100}),
        (READ_TOOL, {"ref": 1}),
        ("delete_everything", {}),
        (SEARCH_TOOL, "{not json"),
    ],
)
def test_client_tool_arguments_are_checked_before_any_request(name, args):
    transport = Scripted({})
    client = KnowledgeClient(ENDPOINT, "demo", "kbt_x", transport=transport)
    result = client.call_tool(name, args)
    assert result["error"]["code"] == "invalid_arguments" and transport.requests == []


# --- against the real handlers -----------------------------------------------------------------------


def test_a_turn_client_on_demand_search_and_read_within_the_run(served):
    container, client, transport, _ = served
    turn = client.start_turn("网关离线怎么排查？")
    assert turn.mode == "on_demand" and turn.status == "ok" and turn.knowledge == []
    assert turn.instructions.startswith("You are the Lumen")
    found = client.call_tool(SEARCH_TOOL, {"query": "网关离线", "limit": 2})
    assert found["status"] == "ok" and 1 <= len(found["hints"]) <= 2 and found["trust"] == "reference_only"
    ref = found["hints"][0]["ref"]
    # Paging only with the cursor the server returned; the chain reproduces the body.
    text, last = client.read_all(ref, max_bytes=4096)
    doc_id = next(
        d
        for d in _doc_ids(container)
        if container.backend.get_document(SOURCE, d).revision == found["hints"][0]["revision"]
    )
    body = container.backend.get_document(SOURCE, doc_id).body
    assert text == body.encode()[:131072].decode("utf-8", "ignore") and last["next_cursor"] is None
    refused = client.call_tool(READ_TOOL, {"ref": ref, "cursor": "made-up-cursor"})
    assert refused["error"]["code"] == "invalid_cursor"
    # Cached per turn: the same search again makes no request.
    before = transport.calls.count("search")
    client.search("网关离线", 2)
    assert transport.calls.count("search") == before


def test_f_filter_client_search_sends_the_hosts_filter_and_caches_per_filter(served):
    """F-FILTER: a host narrows its own searches (`KnowledgeClient.search(..., filter=)`); the model's tool
    arguments stay as they were. The demo documents carry no metadata, so a condition on a key matches
    nothing and `notEquals` on it matches everything; each filter is its own cache entry; a malformed one is
    the server's typed error naming its path."""
    _, client, transport, _ = served
    client.start_turn("网关离线怎么排查？")
    plain = client.search("网关离线", 2)
    none = client.search("网关离线", 2, filter={"equals": {"key": "region", "value": "eu"}})
    every = client.search("网关离线", 2, filter={"notEquals": {"key": "region", "value": "eu"}})
    assert plain["hints"] and none["hints"] == [] and none["status"] == "ok"
    assert [h["title"] for h in every["hints"]] == [h["title"] for h in plain["hints"]]
    before = transport.calls.count("search")
    client.search("网关离线", 2, filter={"equals": {"key": "region", "value": "eu"}})
    assert transport.calls.count("search") == before
    with pytest.raises(KnowledgeClientError) as refused:
        client.search("网关离线", 2, filter={"equals": {"key": "region"}})
    assert refused.value.code == "invalid_request" and "filter.equals.value" in str(refused.value)


def test_a_turn_client_retries_a_lost_turn_response_without_a_second_run(served):
    container, client, transport, _ = served
    transport.drop_next.add("turns")
    turn = client.start_turn("网关离线怎么排查？", turn_id="turn-lost-1")
    assert transport.calls.count("turns") == 2
    [run] = stored_runs(container)
    assert run["run_id"] == turn.run_id
    assert client.search("网关离线")["run_id"] == turn.run_id


def test_a_turn_client_drops_late_responses_of_a_superseded_turn(served):
    _container, client, transport, _ = served
    first = client.start_turn("网关离线怎么排查？")
    # A new turn starts while the search of the first one is in flight.
    transport.after["search"] = lambda: client.start_turn("another question")
    with pytest.raises(StaleResponse):
        client.call_tool(SEARCH_TOOL, {"query": "网关离线"})
    assert client.current_turn is not None and client.current_turn.turn_id != first.turn_id
    # The new turn searches afresh (nothing of the old turn's cache leaks in).
    before = transport.calls.count("search")
    assert client.search("网关离线")["run_id"] == client.current_turn.run_id
    assert transport.calls.count("search") == before + 1


def test_a_turn_client_isolates_accounts(served):
    container, client, transport, _ = served
    client.start_turn("网关离线")
    client.search("网关离线")
    other, _ = container.access.issue_token(routes=["demo"], client_id="host", subject="v", tenant="default")
    client.set_credentials(other)
    assert client.current_turn is None
    with pytest.raises(NoActiveTurn):
        client.search("网关离线")
    client.start_turn("网关离线")
    before = transport.calls.count("search")
    client.search("网关离线")
    assert transport.calls.count("search") == before + 1


def test_a_ref_client_sees_409s_after_document_replaced_and_source_disabled(served):
    container, client, _transport, _ = served
    client.start_turn("网关离线怎么排查？")
    hints = client.search("网关离线")["hints"]
    assert len(hints) >= 2
    replaced = next(
        d
        for d in _doc_ids(container)
        if container.backend.get_document(SOURCE, d).revision == hints[0]["revision"]
    )
    doc = container.backend.get_document(SOURCE, replaced)
    container.admin.put_documents(
        [Document(source_key=SOURCE, doc_id=replaced, title=doc.title, body=doc.body + "\nrevised")]
    )
    changed = client.call_tool(READ_TOOL, {"ref": hints[0]["ref"]})
    assert changed["error"]["code"] == "knowledge_changed" and changed["error"]["action"] == "search again"
    container.admin.set_source_enabled(SOURCE, False)
    scope = client.call_tool(READ_TOOL, {"ref": hints[1]["ref"]})
    assert scope["error"]["code"] == "knowledge_scope_changed"
    # The old scope's cache is gone: the same search goes to the server and reports "disabled".
    assert client.search("网关离线")["status"] == "disabled"


def _doc_ids(container) -> list[str]:
    from kb_cli import demo

    return [d.doc_id for d in demo.demo_documents()]
