"""A-TURN: turns, runs and knowledge_delivery negotiation, idempotency, and lifecycle outcomes (A-REF)
through the services on the embedded container."""

from __future__ import annotations

import json
import threading

import pytest
from knowledge_core.domain.errors import (
    InvalidRequest,
    KnowledgeChanged,
    KnowledgeUnavailable,
    ReferenceInvalid,
    RunNotFound,
    RunNotReady,
    ScopeChanged,
    SourceFailure,
    TurnConflict,
    TurnInProgress,
)
from knowledge_core.domain.models import AgentDefinition, Document, DocumentAcl, Principal, SourceDefinition
from knowledge_core.domain.turn_wire import TurnRequest
from knowledge_core.domain.wire import ReadRequest, SearchRequest, parse_request
from knowledge_core.services.turns import TURN_TTL_SECONDS, turn_key, turn_principal

from tests.conftest import stored_runs

ROUTE = "demo"
PRINCIPAL = Principal(client_id="c", session_id="s", subject="u", tenant="default", routes=[ROUTE, "lab"])
OTHER_SESSION = Principal(client_id="c", session_id="s2", subject="u", tenant="default", routes=[ROUTE])


def turn(container, body: dict, principal: Principal = PRINCIPAL, route: str = ROUTE) -> dict:
    return container.turns.start(principal, route, parse_request(TurnRequest, json.dumps(body))).wire()


class CountingSearch:
    """Wraps the backend's search to count calls (retrieval must not repeat on a replay)."""

    def __init__(self, container) -> None:
        self.calls = 0
        self._search = container.backend.search
        container.backend.search = self

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._search(*args, **kwargs)


# --- request validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"turn_id": "t1", "message": "hi", "knowledge_delivery": "full"}, "knowledge_delivery"),
        ({"turn_id": "t1", "message": "hi", "knowledge_delivery": "off"}, "knowledge_delivery"),
        ({"turn_id": "t1", "message": "hi", "knowledge_delivery": True}, "knowledge_delivery"),
        ({"turn_id": "t1", "message": "hi", "kb_ids": ["x"]}, "kb_ids"),
        ({"turn_id": 1, "message": "hi"}, "turn_id"),
        ({"turn_id": "t1", "message": "   "}, "message"),
        ({"turn_id": "t1", "message": "hi", "run_id": "not-a-uuid"}, "run_id"),
        ({"message": "hi"}, "turn_id"),
    ],
)
def test_a_turn_request_is_strict_and_names_the_field(body, field):
    with pytest.raises(InvalidRequest) as err:
        parse_request(TurnRequest, json.dumps(body))
    assert err.value.field == field and field in err.value.message


def test_a_turn_hash_covers_the_mode_and_absent_means_inline():
    base = {"turn_id": "t1", "message": "hi"}
    absent = parse_request(TurnRequest, json.dumps(base)).request_hash()
    inline = parse_request(TurnRequest, json.dumps({**base, "knowledge_delivery": "inline"})).request_hash()
    on_demand = parse_request(
        TurnRequest, json.dumps({**base, "knowledge_delivery": "on_demand"})
    ).request_hash()
    assert absent == inline != on_demand


# --- delivery modes ---------------------------------------------------------------------------------


def test_a_turn_inline_returns_bounded_startup_knowledge_bound_to_the_run(demo_container):
    resp = turn(demo_container, {"turn_id": "t-inline", "message": "网关离线怎么排查？"})
    assert resp["schema"] == "bailing.agent-turn.v1" and resp["run_state"] == "context_ready"
    assert "knowledge_delivery" not in resp
    ctx = resp["context"]
    assert ctx["instructions"].startswith("You are the Lumen Device Cloud support agent")
    assert ctx["knowledge"] and ctx["knowledge_refs"] == [k["ref"] for k in ctx["knowledge"]]
    assert set(ctx["knowledge"][0]) == {"ref", "title", "content", "revision"}
    # maxContextChars (default 16000) counts content characters only.
    assert sum(len(k["content"]) for k in ctx["knowledge"]) <= 16000
    ref = ctx["knowledge_refs"][0]
    page = demo_container.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=ref, run_id=resp["run_id"])).wire()
    assert page["revision"] == ctx["knowledge"][0]["revision"]
    assert page["content"].startswith(ctx["knowledge"][0]["content"][:100])
    # A ref minted with a run reads only with that run.
    with pytest.raises(ReferenceInvalid):
        demo_container.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=ref)).wire()


def test_a_turn_inline_honours_max_context_chars(demo_container):
    admin = demo_container.admin
    agent = {
        "id": "tight-agent",
        "version": "1.0.0",
        "systemPrompt": "tight",
        "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
        "allowedKnowledge": [{"id": "demo-docs", "version": "1.0.0"}],
        "knowledgeRouting": {"mode": "EAGER", "maxContextChars": 700, "sourceMaxChars": 500},
    }
    admin.publish_agent(AgentDefinition.model_validate(agent))
    admin.set_workspace("lab", "tight-agent@1.0.0")
    resp = turn(demo_container, {"turn_id": "t-tight", "message": "网关离线怎么排查？"}, route="lab")
    chars = [len(k["content"]) for k in resp["context"]["knowledge"]]
    assert chars and sum(chars) <= 500  # one source: sourceMaxChars is the tighter bound


def test_a_turn_on_demand_echoes_delivery_and_keeps_other_fields(demo_container):
    inline = turn(demo_container, {"turn_id": "t-a", "message": "网关离线怎么排查？"})
    resp = turn(
        demo_container, {"turn_id": "t-b", "message": "网关离线怎么排查？", "knowledge_delivery": "on_demand"}
    )
    ctx = resp["context"]
    assert ctx["knowledge"] == [] and ctx["knowledge_refs"] == []
    scope = demo_container.scopes.resolve(ROUTE)
    assert resp["knowledge_delivery"] == {
        "schema_version": "bailing.agent-knowledge-delivery.v1",
        "mode": "on_demand",
        "protocol": "bailing.agent-knowledge.v1",
        "knowledge_scope_revision": scope.revision,
        "status": "ok",
        "hints": [],
    }
    for field in ("instructions", "memory", "tools"):
        assert ctx[field] == inline["context"][field]
    # The on_demand run is context_ready: search and read within it.
    hits = demo_container.knowledge.search(
        PRINCIPAL, ROUTE, SearchRequest(query="网关离线", run_id=resp["run_id"])
    ).wire()
    assert hits["run_id"] == resp["run_id"] and hits["hints"]
    page = demo_container.knowledge.read(
        PRINCIPAL, ROUTE, ReadRequest(ref=hits["hints"][0]["ref"], run_id=resp["run_id"])
    ).wire()
    assert page["content"]


def test_a_turn_on_demand_status_disabled_without_sources(demo_container):
    demo_container.admin.set_source_enabled("demo-docs@1.0.0", False)
    resp = turn(demo_container, {"turn_id": "t-off", "message": "x", "knowledge_delivery": "on_demand"})
    assert resp["knowledge_delivery"]["status"] == "disabled"
    inline = turn(demo_container, {"turn_id": "t-off-inline", "message": "网关离线"})
    assert inline["context"]["knowledge"] == [] and inline["context"]["knowledge_status"] == "disabled"


# --- idempotency ------------------------------------------------------------------------------------


def test_a_turn_replay_returns_the_stored_response_without_new_run_or_retrieval(demo_container):
    counter = CountingSearch(demo_container)
    body = {"turn_id": "t-replay", "message": "网关离线怎么排查？"}
    first = turn(demo_container, body)
    calls = counter.calls
    assert calls >= 1
    demo_container.clock.advance(5)  # refs minted now would differ: the replay must be the stored bytes
    again = turn(demo_container, body)
    assert again == first and counter.calls == calls
    assert len(stored_runs(demo_container)) == 1


def test_a_turn_same_id_different_body_is_turn_conflict(demo_container):
    turn(demo_container, {"turn_id": "t-c", "message": "hello"})
    with pytest.raises(TurnConflict):
        turn(demo_container, {"turn_id": "t-c", "message": "hello", "knowledge_delivery": "on_demand"})
    with pytest.raises(TurnConflict):
        turn(demo_container, {"turn_id": "t-c", "message": "hello again"})
    assert len(stored_runs(demo_container)) == 1


ON_BEHALF_A = Principal(
    client_id="c", session_id="s", subject="agent", on_behalf_of="u-a", tenant="default", routes=[ROUTE]
)
ON_BEHALF_B = ON_BEHALF_A.model_copy(update={"on_behalf_of": "u-b"})
QUOKKA = {"turn_id": "t-quokka", "message": "quokka enclosure shade"}


def _quokka_note(container, subjects: list[str]) -> None:
    """A demo-source document only `subjects` may read."""
    container.admin.put_documents(
        [
            Document(
                source_key="demo-docs@1.0.0",
                doc_id="quokka-care",
                title="Quokka care",
                body="Feed the quokka at dawn; the quokka enclosure needs shade and fresh water.",
                acl=DocumentAcl(tenant="default", subjects=subjects),
            )
        ]
    )


def _titles(response: dict) -> list[str]:
    return [k["title"] for k in response["context"]["knowledge"]]


def test_a_turn_replay_by_another_principal_is_turn_conflict(demo_container):
    """A-TURN: a turn binds the whole principal: the same client and session acting for another user, or
    with other groups, replaying the turn gets `turn_conflict`, never the first user's documents."""
    _quokka_note(demo_container, ["u-a"])
    first = turn(demo_container, QUOKKA, ON_BEHALF_A)
    assert "Quokka care" in _titles(first)
    with pytest.raises(TurnConflict):
        turn(demo_container, QUOKKA, ON_BEHALF_B)
    with pytest.raises(TurnConflict):
        turn(demo_container, QUOKKA, ON_BEHALF_A.model_copy(update={"groups": ["zoo-staff"]}))
    assert turn(demo_container, QUOKKA, ON_BEHALF_A) == first
    assert len(stored_runs(demo_container)) == 1


def test_a_turn_replay_leaves_out_knowledge_the_caller_can_no_longer_read(demo_container):
    """A-TURN, A-REF: a replay is the stored response re-checked as a read would be: a document the caller
    may no longer read is left out (of `knowledge` and `knowledge_refs`), the rest is unchanged."""
    _quokka_note(demo_container, ["u-a"])
    first = turn(demo_container, QUOKKA, ON_BEHALF_A)
    assert "Quokka care" in _titles(first)
    counter = CountingSearch(demo_container)
    _quokka_note(demo_container, ["u-c"])
    again = turn(demo_container, QUOKKA, ON_BEHALF_A)
    assert "Quokka care" not in _titles(again) and counter.calls == 0
    kept = [k for k in first["context"]["knowledge"] if k["title"] != "Quokka care"]
    assert again["context"]["knowledge"] == kept
    assert again["context"]["knowledge_refs"] == [k["ref"] for k in kept]
    assert {**again, "context": None} == {**first, "context": None}
    assert len(stored_runs(demo_container)) == 1


def test_a_turn_record_without_a_principal_is_rechecked_for_the_caller(demo_container):
    """A-TURN: a record stored before records bound their principal still answers a replay, re-checked
    for whoever replays it: another user of the same client and session gets none of the documents."""
    _quokka_note(demo_container, ["u-a"])
    first = turn(demo_container, QUOKKA, ON_BEHALF_A)
    assert "Quokka care" in _titles(first)
    clock, turns = demo_container.clock, demo_container.state.turns
    key = turn_key(ROUTE, ON_BEHALF_A, QUOKKA["turn_id"])
    request_hash = turns.get_turn(key, clock.now()).request_hash
    clock.advance(TURN_TTL_SECONDS + 1)  # rewritten as a record of before: no principal
    now = clock.now()
    assert turns.claim_turn(key, request_hash, "old", now, int(now) + 3600, principal=None) is None
    assert turns.complete_turn(key, "old", first) is True
    assert "Quokka care" not in _titles(turn(demo_container, QUOKKA, ON_BEHALF_B))
    assert turn(demo_container, QUOKKA, ON_BEHALF_A) == first


def test_a_turn_replay_that_cannot_recheck_its_knowledge_is_unavailable(demo_container, monkeypatch):
    """A-TURN: a replay whose documents cannot be read for the re-check is 503 `knowledge_unavailable`
    (typed, retryable), never the stored knowledge unchecked; the record is kept for the retry."""
    _quokka_note(demo_container, ["u-a"])
    first = turn(demo_container, QUOKKA, ON_BEHALF_A)

    def down(*args, **kwargs):
        raise SourceFailure("unavailable")

    monkeypatch.setattr(demo_container.backend, "document_states", down)
    with pytest.raises(KnowledgeUnavailable):
        turn(demo_container, QUOKKA, ON_BEHALF_A)
    monkeypatch.undo()
    assert turn(demo_container, QUOKKA, ON_BEHALF_A) == first
    assert len(stored_runs(demo_container)) == 1


def test_a_turn_ids_are_scoped_to_the_session(demo_container):
    body = {"turn_id": "t-shared", "message": "hello"}
    assert turn(demo_container, body)["run_id"] != turn(demo_container, body, OTHER_SESSION)["run_id"]


def test_a_turn_record_lives_at_least_24h_and_then_expires(demo_container):
    clock = demo_container.clock
    body = {"turn_id": "t-ttl", "message": "hello"}
    first = turn(demo_container, body)
    record = demo_container.state.turns.get_turn(turn_key(ROUTE, PRINCIPAL, "t-ttl"), clock.now())
    assert record.expires_at >= clock.now() + 86400 and TURN_TTL_SECONDS >= 86400
    clock.advance(86400)
    assert turn(demo_container, body) == first
    clock.advance(TURN_TTL_SECONDS)  # expired but maybe not yet deleted by DynamoDB: a fresh turn
    assert turn(demo_container, body)["run_id"] != first["run_id"]


def test_a_turn_concurrent_duplicates_create_exactly_one_run(demo_container):
    body = {"turn_id": "t-race", "message": "网关离线怎么排查？", "knowledge_delivery": "on_demand"}
    results: list[dict] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def go() -> None:
        barrier.wait()
        try:
            results.append(turn(demo_container, body))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 6
    assert all(r == results[0] for r in results)
    assert len(stored_runs(demo_container)) == 1


def test_a_turn_failure_releases_the_claim_and_fails_the_run(demo_container, monkeypatch):
    body = {"turn_id": "t-fail", "message": "网关离线"}

    def boom(*args, **kwargs):
        raise RuntimeError("backend exploded")

    monkeypatch.setattr(demo_container.backend, "search", boom)
    with pytest.raises(RuntimeError):
        turn(demo_container, body)
    [failed] = stored_runs(demo_container)
    assert failed["state"] == "failed"
    monkeypatch.undo()
    resp = turn(demo_container, body)
    assert resp["run_id"] != failed["run_id"] and resp["context"]["knowledge"]


def test_a_turn_duplicate_waits_for_pending_then_reports_in_progress(demo_container):
    svc = demo_container.turns
    svc._wait = 0.1
    key = turn_key(ROUTE, PRINCIPAL, "t-pending")
    request = parse_request(TurnRequest, json.dumps({"turn_id": "t-pending", "message": "hi"}))
    now = demo_container.clock.now()
    assert (
        demo_container.state.turns.claim_turn(
            key, request.request_hash(), "other", now, int(now) + 100, principal=turn_principal(PRINCIPAL)
        )
        is None
    )
    with pytest.raises(TurnInProgress):
        svc.start(PRINCIPAL, ROUTE, request)
    with pytest.raises(TurnConflict):  # a different body does not wait
        turn(demo_container, {"turn_id": "t-pending", "message": "other"})
    # The holder died: once the claim is stale, a duplicate takes it over and finishes the turn.
    demo_container.clock.advance(60)
    resp = svc.start(PRINCIPAL, ROUTE, request).wire()
    assert (
        resp["run_state"] == "context_ready"
        and turn(demo_container, {"turn_id": "t-pending", "message": "hi"}) == resp
    )


# --- runs -------------------------------------------------------------------------------------------


def test_a_turn_resumes_the_callers_run_only(demo_container):
    first = turn(demo_container, {"turn_id": "t-r1", "message": "hello"})
    second = turn(demo_container, {"turn_id": "t-r2", "message": "hello", "run_id": first["run_id"]})
    assert second["run_id"] == first["run_id"] and len(stored_runs(demo_container)) == 1
    with pytest.raises(RunNotFound):
        turn(demo_container, {"turn_id": "t-r3", "message": "hi", "run_id": first["run_id"]}, OTHER_SESSION)
    demo_container.admin.end_run(first["run_id"], "completed")
    with pytest.raises(RunNotReady):
        turn(demo_container, {"turn_id": "t-r4", "message": "hi", "run_id": first["run_id"]})
    with pytest.raises(RunNotReady):
        demo_container.knowledge.search(
            PRINCIPAL, ROUTE, SearchRequest(query="网关", run_id=first["run_id"])
        ).wire()
    with pytest.raises(RunNotFound):
        demo_container.knowledge.search(
            OTHER_SESSION, ROUTE, SearchRequest(query="网关", run_id=first["run_id"])
        ).wire()


# --- lifecycle (A-REF outcomes) --------------------------------------------------------------------


def test_a_ref_lifecycle_scope_and_document_changes(demo_container):
    # A question two documents answer within the relevance cut: "网关离线怎么排查？" now gets one.
    resp = turn(demo_container, {"turn_id": "t-life", "message": "网关离线"})
    run_id = resp["run_id"]
    item = resp["context"]["knowledge"][0]
    source, other = "demo-docs@1.0.0", resp["context"]["knowledge"][1]
    # Document replaced -> knowledge_changed; the other documents still read.
    docs = {d.revision: d for d in _all_docs(demo_container, source)}
    target = docs[item["revision"]]
    demo_container.admin.put_documents(
        [
            Document(
                source_key=source, doc_id=target.doc_id, title=target.title, body=target.body + "\n\nUpdated."
            )
        ]
    )
    with pytest.raises(KnowledgeChanged):
        demo_container.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=item["ref"], run_id=run_id)).wire()
    assert demo_container.knowledge.read(
        PRINCIPAL, ROUTE, ReadRequest(ref=other["ref"], run_id=run_id)
    ).wire()
    # Source disabled -> scope changed; no source left -> capabilities disabled, search "disabled".
    demo_container.admin.set_source_enabled(source, False)
    with pytest.raises(ScopeChanged):
        demo_container.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=other["ref"], run_id=run_id)).wire()
    assert demo_container.knowledge.capabilities(PRINCIPAL, ROUTE).wire()["enabled"] is False
    assert (
        demo_container.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query="网关")).wire()["status"]
        == "disabled"
    )
    demo_container.admin.set_source_enabled(source, True)
    assert demo_container.knowledge.capabilities(PRINCIPAL, ROUTE).wire()["enabled"] is True


def test_a_ref_workspace_rollback_changes_scope(demo_container):
    admin = demo_container.admin
    v2 = {
        "id": "demo-agent",
        "version": "2.0.0",
        "systemPrompt": "v2",
        "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
        "allowedKnowledge": [{"id": "demo-docs", "version": "1.0.0"}, {"id": "extra", "version": "1.0.0"}],
    }
    admin.publish_source(SourceDefinition.model_validate({"id": "extra", "version": "1.0.0"}))
    admin.publish_agent(AgentDefinition.model_validate(v2))
    admin.set_workspace(ROUTE, "demo-agent@2.0.0")
    resp = turn(demo_container, {"turn_id": "t-v2", "message": "网关离线怎么排查？"})
    assert resp["context"]["instructions"] == "v2"
    admin.set_workspace(ROUTE, "demo-agent@1.0.0")  # rollback
    with pytest.raises(ScopeChanged):
        demo_container.knowledge.read(
            PRINCIPAL, ROUTE, ReadRequest(ref=resp["context"]["knowledge_refs"][0], run_id=resp["run_id"])
        ).wire()


def _all_docs(container, source: str) -> list[Document]:
    from kb_cli import demo

    return [container.backend.get_document(source, d.doc_id) for d in demo.demo_documents()]
