"""The state-port contract (Registry, SessionStore, RunStore, TurnStore, BudgetLedger) on every state
adapter: the SQLite file (embedded default), DynamoDB on moto (fast), and the DynamoDB-API server on
loopback (`real`). R-BUDGET scenarios: three-level chain, atomic refusal, char grants, citation reuse,
chain mismatch, and 16 concurrent callers on one root that never overspend. A-TURN: claims. I-INGEST:
ingestion jobs, their counters and leases."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.adapters.sqlite import sqlite_stores
from knowledge_core.domain.budget import ChainLink, CitationDraft, Limits
from knowledge_core.domain.errors import BudgetExceeded, Conflict, ProtocolError
from knowledge_core.domain.ingestion import DocumentOutcome, IngestionJob, JobDocument, JobSpec
from knowledge_core.domain.models import (
    AgentDefinition,
    Run,
    Session,
    SourceDefinition,
    SourceState,
)
from knowledge_core.ports import BudgetLedger, Citation, StateStores

from tests.contract.conftest import REAL_MARKS
from tests.dynamo_tables import moto_table, real_table

NOW = 1_795_953_600.0
ATTEMPTS = 8  # per caller: 16 x 8 = 128 attempts for a root that allows 64
STATE_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("moto", id="moto"),
    pytest.param("real", id="real", marks=REAL_MARKS),
]


@pytest.fixture(params=STATE_BACKENDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStores]:
    if request.param == "sqlite":
        yield sqlite_stores(tmp_path / "state.sqlite3")
    elif request.param == "moto":
        with moto_table() as table:
            yield table.stores()
    else:
        with real_table(request.getfixturevalue("real_endpoints")["DYNAMODB_ENDPOINT"]) as table:
            yield table.stores()


# --- ledger driving, as a tool call does it ---------------------------------------------------------------


class Chain:
    """One invocation chain of a root tree, driven like a tool call: read, charge, cite."""

    def __init__(self, ledger: BudgetLedger, links: list[ChainLink]) -> None:
        self.ledger = ledger
        self.links = links
        self.root = links[0].invocation_id
        self.ids = [link.invocation_id for link in links]

    def charge(self, keys: list[str]) -> None:
        snapshot = self.ledger.open_chain(self.root, self.ids)
        self.ledger.charge_retrievals(snapshot, self.links, keys, NOW)

    def cite(self, drafts: list[CitationDraft]) -> list[Citation | None]:
        snapshot = self.ledger.open_chain(self.root, self.ids)
        citations, _ = self.ledger.record_citations(snapshot, drafts, NOW)
        return citations


def _ids() -> tuple[str, str, str]:
    run = uuid.uuid4().hex[:8]
    return f"root-{run}", f"mid-{run}", f"leaf-{run}"


def scenario_three_level_chain(ledger: BudgetLedger) -> None:
    root, mid, leaf = _ids()
    links = [
        ChainLink(root, "root@1", Limits(5, 3, 300)),
        ChainLink(mid, "mid@1", Limits(4, 3, 200)),
        ChainLink(leaf, "leaf@1", Limits(8, 2, 100), deadline=NOW + 30),
    ]
    chain = Chain(ledger, links)
    assert ledger.open_chain(root, chain.ids).entries == {}  # nothing exists before the first charge
    chain.charge(["s@1", "t@1"])
    entries = ledger.open_chain(root, chain.ids).chain()
    assert [e.parent for e in entries] == [None, root, mid]
    assert entries[2].limits == Limits(8, 2, 100) and entries[2].deadline == pytest.approx(NOW + 30)
    chain.charge(["s@1"])
    with pytest.raises(BudgetExceeded, match=f"per-source budget of invocation {leaf}"):  # leaf: 2 per source
        chain.charge(["s@1"])
    with pytest.raises(BudgetExceeded, match=f"retrieval budget of invocation {mid}"):  # mid: 4 in total
        chain.charge(["t@1", "u@1"])
    after = [ledger.entry(root, i) for i in chain.ids]
    assert [e.retrievals for e in after if e] == [3, 3, 3]  # refusals charged nothing anywhere
    assert [e.per_source for e in after if e] == [{"s@1": 2, "t@1": 1}] * 3

    # Char grants: cut to the smallest remaining budget in the chain (leaf 100).
    drafts = [CitationDraft(f"fp-{i}", "s@1", f"d{i}", "x" * 60, "ret-1", leaf) for i in range(3)]
    cited = chain.cite(drafts)
    assert [len(c.content) if c else None for c in cited] == [60, 40, None]
    assert [c.citation_id for c in cited if c] == ["cite-1", "cite-2"]
    assert [e.chars for e in ledger.open_chain(root, chain.ids).chain()] == [100, 100, 100]
    # The same content again: the same id, no new chars; nothing new fits.
    again = chain.cite(drafts[:1])
    assert again[0] is not None and again[0].citation_id == "cite-1" and not again[0].created
    assert again[0].content == "x" * 60
    entry = ledger.entry(root, leaf)
    assert entry is not None and entry.chars == 100

    # A sibling sub-agent spends the root's remaining 200 chars, cut to the root's limit.
    sibling = Chain(
        ledger, [links[0], ChainLink(f"sib-{uuid.uuid4().hex[:6]}", "leaf@1", Limits(8, 2, 65536))]
    )
    sibling.charge(["t@1"])
    big = [CitationDraft("fp-big", "t@1", "d9", "y" * 500, "ret-2", sibling.ids[1])]
    (granted,) = sibling.cite(big)
    assert granted is not None and len(granted.content) == 200 and granted.citation_id == "cite-3"
    assert [e.chars for e in ledger.open_chain(root, sibling.ids).chain()] == [300, 200]
    assert sibling.cite([CitationDraft("fp-new", "t@1", "d8", "z", "ret-3", sibling.ids[1])]) == [None]
    assert sorted(c.citation_id for c in ledger.citations(root)) == ["cite-1", "cite-2", "cite-3"]


def scenario_chain_mismatch(ledger: BudgetLedger) -> None:
    root, mid, _ = _ids()
    first = Chain(
        ledger, [ChainLink(root, "root@1", Limits(5, 3, 300)), ChainLink(mid, "mid@1", Limits(3, 3, 200))]
    )
    first.charge(["s@1"])
    other_agent = Chain(
        ledger, [ChainLink(root, "root@1", Limits(5, 3, 300)), ChainLink(mid, "other@1", Limits(3, 3, 200))]
    )
    with pytest.raises(ProtocolError):
        other_agent.charge(["s@1"])
    moved = Chain(  # mid re-announced under another parent
        ledger,
        [
            ChainLink(root, "root@1", Limits(5, 3, 300)),
            ChainLink("x", "x@1", Limits(1, 1, 1)),
            ChainLink(mid, "mid@1", Limits(3, 3, 200)),
        ],
    )
    with pytest.raises(ProtocolError):
        moved.charge(["s@1"])
    assert ledger.entry(root, "x") is None  # a refused charge created nothing
    entry = ledger.entry(root, mid)
    assert entry is not None and entry.retrievals == 1


SHARED_ROOT_LIMITS = Limits(64, 16, 1000)
SOURCES = ["a@1", "b@1", "c@1", "d@1"]


def spend_as_child(ledger: BudgetLedger, root: str, n: int, wait: Any = None) -> dict:
    """Sub-agent `child-n` of `root`: ATTEMPTS one-source charges until refused, then 3 citations."""
    chain = Chain(
        ledger,
        [
            ChainLink(root, "root@1", SHARED_ROOT_LIMITS),
            ChainLink(f"child-{n}", "child@1", Limits(64, 16, 65536)),
        ],
    )
    if wait is not None:
        wait()
    outcome: dict = {"n": n, "granted": 0, "refused": 0, "chars": 0, "ids": []}
    for i in range(ATTEMPTS):
        try:
            chain.charge([SOURCES[(n + i) % 4]])
            outcome["granted"] += 1
        except BudgetExceeded:
            outcome["refused"] += 1
    if outcome["granted"]:  # never charged: no entry to cite from
        drafts = [CitationDraft(f"{n}-{k}", "a@1", f"d{n}", "c" * 37, "r", f"child-{n}") for k in range(3)]
        for citation in chain.cite(drafts):
            if citation is not None:
                outcome["chars"] += len(citation.content)
                outcome["ids"].append(citation.citation_id)
    return outcome


def check_shared_root(ledger: BudgetLedger, root: str, outcomes: list[dict]) -> dict:
    """The root's limits met exactly, never exceeded; every refusal left no partial charge (children
    sum to the root); citation ids unique within the root."""
    outcomes = sorted(outcomes, key=lambda o: o["n"])
    root_entry = ledger.entry(root, root)
    children = [ledger.entry(root, f"child-{o['n']}") for o in outcomes]
    granted = [o["granted"] for o in outcomes]
    chars = [o["chars"] for o in outcomes]
    ids = [i for o in outcomes for i in o["ids"]]
    assert root_entry is not None
    assert sum(granted) == root_entry.retrievals == SHARED_ROOT_LIMITS.max_retrievals  # never over, none lost
    assert sum(o["refused"] for o in outcomes) == len(outcomes) * ATTEMPTS - sum(granted)
    assert root_entry.per_source == dict.fromkeys(SOURCES, 16)
    assert [c.retrievals if c else 0 for c in children] == granted  # a refusal charged no child either
    citing = sum(1 for o in outcomes if o["granted"])  # each wants 3 x 37 chars
    assert root_entry.chars == sum(chars) == min(SHARED_ROOT_LIMITS.max_context_chars, 111 * citing)
    assert [c.chars if c else 0 for c in children] == chars
    assert len(ids) == len(set(ids)) == len(ledger.citations(root))
    return {"granted": sum(granted), "chars": sum(chars), "citations": len(ids)}


def scenario_concurrent_shared_root(ledger: BudgetLedger, callers: int = 16) -> dict:
    """`callers` sub-agents of one root spend at once until refused."""
    root = f"root-{uuid.uuid4().hex[:8]}"
    start = threading.Barrier(callers)
    with ThreadPoolExecutor(max_workers=callers) as pool:
        outcomes = list(pool.map(lambda n: spend_as_child(ledger, root, n, start.wait), range(callers)))
    return check_shared_root(ledger, root, outcomes)


def test_r_budget_three_level_chain(stores: StateStores) -> None:
    scenario_three_level_chain(stores.ledger)


def test_r_budget_chain_mismatch_is_protocol_error(stores: StateStores) -> None:
    scenario_chain_mismatch(stores.ledger)


@pytest.mark.timeout(900)
def test_r_budget_16_concurrent_callers_never_overspend(stores: StateStores) -> None:
    outcome = scenario_concurrent_shared_root(stores.ledger)
    assert outcome["granted"] == 64 and outcome["chars"] <= 1000  # exact amounts: check_shared_root


def test_r_budget_open_chain_reads_agents_in_the_same_call(stores: StateStores) -> None:
    agent = AgentDefinition.model_validate(
        {"id": "reader", "version": "1.0.0", "modelProfile": {"candidates": [{"model": "m"}]}}
    )
    stores.registry.put_agent(agent)
    snapshot = stores.ledger.open_chain("r-1", ["r-1"], ["reader@1.0.0", "ghost@1.0.0"])
    assert snapshot.agents == {"reader@1.0.0": agent, "ghost@1.0.0": None}
    assert snapshot.entries == {} and snapshot.seq == 0 and snapshot.cited == {}


# --- registry, sessions, runs ------------------------------------------------------------------------------


def test_state_registry_publish_is_immutable_and_switches_change(stores: StateStores) -> None:
    registry = stores.registry
    source = SourceDefinition.model_validate({"id": "docs", "version": "1.0.0", "description": "d"})
    assert registry.put_source(source) is True
    assert registry.put_source(source) is False  # identical: a no-op
    with pytest.raises(Conflict):
        registry.put_source(
            SourceDefinition.model_validate({"id": "docs", "version": "1.0.0", "description": "x"})
        )
    found = registry.get_sources(["docs@1.0.0", "none@1.0.0"])
    assert found["none@1.0.0"] is None
    published = found["docs@1.0.0"]
    assert published is not None and published.definition == source and published.state == SourceState()
    registry.update_source_state("docs@1.0.0", SourceState(enabled=False, lease_until="2030-01-01T00:00:00Z"))
    updated = registry.get_sources(["docs@1.0.0"])["docs@1.0.0"]
    assert updated is not None and updated.state.enabled is False

    agent = AgentDefinition.model_validate(
        {"id": "a", "version": "1.0.0", "modelProfile": {"candidates": [{"model": "m"}]}}
    )
    assert registry.get_agent("a@1.0.0") is None
    assert registry.put_agent(agent) is True and registry.put_agent(agent) is False
    assert registry.get_agent("a@1.0.0") == agent
    assert registry.get_workspace_agent("ws") is None
    registry.set_workspace_agent("ws", "a@1.0.0")
    registry.set_workspace_agent("ws", "a@2.0.0")  # rollback and roll forward are one pointer
    assert registry.get_workspace_agent("ws") == "a@2.0.0"


def test_state_sessions_and_runs(stores: StateStores) -> None:
    session = Session(
        client_id="c", session_id="s", subject="u", tenant="t", routes=["r"], expires_at=int(NOW) + 60
    )
    stores.sessions.put_session("h" * 64, session)
    assert stores.sessions.get_session("h" * 64) == session
    assert stores.sessions.get_session("0" * 64) is None

    runs = stores.runs
    run = Run(run_id="run-1", session_id="s", client_id="c", route="r", state="preparing", turn_id="t-1")
    runs.create_run(run)
    with pytest.raises(Conflict):
        runs.create_run(run)
    assert runs.get_run("run-1") == run and runs.get_run("run-2") is None
    assert runs.transition_run("run-1", ("context_ready",), "completed") is None  # not in that state
    ready = runs.transition_run("run-1", ("preparing", "context_ready"), "context_ready")
    assert ready is not None and ready.state == "context_ready"
    assert runs.transition_run("run-2", ("preparing",), "failed") is None


def test_S7_sessions_are_listed_and_revoked_by_token_id(stores: StateStores) -> None:
    from knowledge_core.domain.models import token_id_of

    sessions = stores.sessions
    live = Session(
        client_id="c", session_id="s1", subject="u", tenant="t", routes=["r"], expires_at=int(NOW) + 60
    )
    gone = live.model_copy(update={"session_id": "s2", "expires_at": int(NOW) - 1})
    sessions.put_session("a" * 64, live)
    sessions.put_session("b" * 64, gone)
    listed = sessions.list_sessions(NOW)
    assert [(t.token_id, t.session_id, t.revoked) for t in listed] == [(token_id_of("a" * 64), "s1", False)]
    assert "a" * 64 not in repr(listed)  # never the hash
    revoked = sessions.revoke_session(token_id_of("a" * 64), NOW)
    assert revoked is not None and revoked.revoked and revoked.session_id == "s1"
    stored = sessions.get_session("a" * 64)
    assert stored is not None and stored.revoked
    assert [t.revoked for t in sessions.list_sessions(NOW)] == [True]
    assert sessions.revoke_session(token_id_of("b" * 64), NOW) is None  # expired
    assert sessions.revoke_session("tok_" + "0" * 32, NOW) is None


def test_S3_runs_keep_their_tenant(stores: StateStores) -> None:
    run = Run(run_id="run-t", session_id="s", client_id="c", route="r", state="preparing", tenant="acme")
    stores.runs.create_run(run)
    assert stores.runs.get_run("run-t") == run
    moved = stores.runs.transition_run("run-t", ("preparing",), "context_ready")
    assert moved is not None and moved.tenant == "acme"


# --- turns (A-TURN) -------------------------------------------------------------------------------------


def test_a_turn_store_claims_once_and_only_the_holder_moves_it(stores: StateStores) -> None:
    turns = stores.turns
    key = f"TURN#r#{uuid.uuid4().hex}"
    assert turns.claim_turn(key, "hash", "claim-1", NOW, int(NOW) + 100, principal="p-1") is None
    held = turns.claim_turn(key, "hash", "claim-2", NOW, int(NOW) + 100, principal="p-1")
    assert held is not None and held.claim == "claim-1" and held.state == "pending"
    assert turns.set_turn_run(key, "claim-2", "run-x") is False
    assert turns.set_turn_run(key, "claim-1", "run-1") is True
    assert turns.take_over_turn(key, "claim-1", "claim-3", NOW + 40) is True
    assert turns.complete_turn(key, "claim-1", {"a": 1}) is False  # no longer the holder
    assert turns.complete_turn(key, "claim-3", {"a": "回答"}) is True
    done = turns.get_turn(key, NOW)
    assert done is not None and done.state == "done" and done.run_id == "run-1"
    assert done.response == {"a": "回答"}
    turns.release_turn(key, "claim-3")  # done records are not released
    assert turns.get_turn(key, NOW) is not None
    # An expired record counts as absent: a new claim wins.
    assert turns.get_turn(key, NOW + 101) is None
    assert turns.claim_turn(key, "other", "claim-4", NOW + 101, int(NOW) + 500, principal="p-1") is None

    released = f"TURN#r#{uuid.uuid4().hex}"
    assert turns.claim_turn(released, "h", "c-1", NOW, int(NOW) + 100, principal="p-1") is None
    turns.release_turn(released, "c-1")
    assert turns.get_turn(released, NOW) is None


def test_a_turn_store_keeps_the_principal_that_claimed_the_turn(stores: StateStores) -> None:
    """A-TURN: a record binds its claimer's principal digest (what a replay is compared with); a record
    claimed without one, as records written before, reads back without one."""
    turns = stores.turns
    key = f"TURN#r#{uuid.uuid4().hex}"
    assert turns.claim_turn(key, "hash", "c-1", NOW, int(NOW) + 100, principal="digest-a") is None
    held = turns.claim_turn(key, "hash", "c-2", NOW, int(NOW) + 100, principal="digest-b")
    assert held is not None and held.principal == "digest-a"
    assert turns.complete_turn(key, "c-1", {"a": 1}) is True
    done = turns.get_turn(key, NOW)
    assert done is not None and done.principal == "digest-a"
    older = f"TURN#r#{uuid.uuid4().hex}"
    assert turns.claim_turn(older, "hash", "c-1", NOW, int(NOW) + 100, principal=None) is None
    record = turns.get_turn(older, NOW)
    assert record is not None and record.principal is None


def test_state_registry_listings_for_operators(stores: StateStores) -> None:
    """The console's listings: every source with its switches, every agent, every workspace pointer."""
    registry = stores.registry
    for key in ("b-docs", "a-docs"):
        registry.put_source(SourceDefinition.model_validate({"id": key, "version": "1.0.0"}))
    registry.update_source_state("b-docs@1.0.0", SourceState(enabled=False))
    agent = AgentDefinition.model_validate(
        {"id": "lister", "version": "1.0.0", "modelProfile": {"candidates": [{"model": "m"}]}}
    )
    registry.put_agent(agent)
    registry.set_workspace_agent("ws-a", "lister@1.0.0")
    sources = registry.list_sources()
    assert [s.key for s in sources] == ["a-docs@1.0.0", "b-docs@1.0.0"]
    assert [s.state.enabled for s in sources] == [True, False]
    assert registry.list_agents() == [agent]
    assert registry.list_workspaces() == {"ws-a": "lister@1.0.0"}


def test_r_budget_tree_lists_every_entry_root_first(stores: StateStores) -> None:
    root, mid, leaf = _ids()
    links = [
        ChainLink(root, "root@1", Limits(5, 3, 300)),
        ChainLink(mid, "mid@1", Limits(4, 3, 200)),
        ChainLink(leaf, "leaf@1", Limits(8, 2, 100)),
    ]
    Chain(stores.ledger, links).charge(["s@1"])
    tree = stores.ledger.tree(root)
    assert [e.invocation_id for e in tree] == [root, mid, leaf]
    assert [e.retrievals for e in tree] == [1, 1, 1] and stores.ledger.tree("nobody") == []


# --- ingestion jobs (I-INGEST) ----------------------------------------------------------------------------


def _job(source: str = "docs@1.0.0", total: int = 0, created_at: float = NOW, **spec: Any) -> IngestionJob:
    return IngestionJob(
        job_id=uuid.uuid4().hex, source_key=source, created_at=created_at, total=total, spec=JobSpec(**spec)
    )


def test_i_ingest_job_store_counts_outcomes_under_a_lease(stores: StateStores) -> None:
    jobs = stores.jobs
    job = _job(total=4, directory="/data", prefix="p", sync=True)
    docs = [
        JobDocument(0, "a", {"title": "A", "body": "正文 " * 50}),
        JobDocument(1, "b", {"title": "B", "body": "b"}),
        JobDocument(2, "c", {"title": "C", "body": "c"}),
        JobDocument(3, "big", None, state="failed", error="too_large"),
    ]
    jobs.create_job(job, docs)
    with pytest.raises(Conflict):
        jobs.create_job(job, docs)
    stored = jobs.get_job(job.job_id)
    assert stored is not None and stored.state == "queued" and stored.total == 4
    assert stored.spec == JobSpec(directory="/data", prefix="p", sync=True)
    assert stored.counts == {"queued": 3, "done": 0, "unchanged": 0, "failed": 1, "deleted": 0}
    assert jobs.get_job("nope") is None
    queued = jobs.job_documents(job.job_id, state="queued")
    assert [d.doc_id for d in queued] == ["a", "b", "c"] and queued[0].payload == docs[0].payload
    assert [d.doc_id for d in jobs.job_documents(job.job_id, after_seq=1, limit=1)] == ["c"]

    claimed = jobs.claim_job("w1", NOW, 10)
    assert claimed is not None and claimed.job_id == job.job_id and claimed.state == "running"
    assert claimed.worker == "w1" and claimed.started_at == NOW
    assert jobs.claim_job("w2", NOW + 5, 10) is None  # leased
    outcome = [DocumentOutcome(0, "done", passages=2), DocumentOutcome(1, "failed", error="corrupt")]
    assert jobs.record_outcomes(job.job_id, "w2", outcome, NOW + 5, 10) is False  # not the holder
    assert jobs.record_outcomes(job.job_id, "w1", outcome, NOW + 5, 10) is True
    after = jobs.get_job(job.job_id)
    assert after is not None and after.passages == 2 and after.lease_until == NOW + 15
    assert after.counts == {"queued": 1, "done": 1, "unchanged": 0, "failed": 2, "deleted": 0}
    handled = jobs.job_documents(job.job_id, after_seq=-1, limit=2)
    assert handled[0].payload is None and handled[1].error == "corrupt"  # payloads dropped once handled
    assert handled[1].payload == docs[1].payload  # a failed one keeps it: its error names its origin
    assert [d.doc_id for d in jobs.job_documents(job.job_id, state="failed")] == ["b", "big"]

    # The holder dies: once its lease has run out another worker takes the job over and carries on.
    assert jobs.claim_job("w2", NOW + 14, 10) is None
    taken = jobs.claim_job("w2", NOW + 16, 10)
    assert taken is not None and taken.worker == "w2" and taken.started_at == NOW
    assert jobs.renew_lease(job.job_id, "w1", NOW + 16, 10) is False
    assert jobs.renew_lease(job.job_id, "w2", NOW + 17, 10) is True
    assert jobs.record_outcomes(job.job_id, "w2", [DocumentOutcome(2, "unchanged")], NOW + 17, 10)
    assert jobs.finish_job(job.job_id, "w1", NOW + 18) is False
    assert jobs.finish_job(job.job_id, "w2", NOW + 18, deleted=3) is True
    done = jobs.get_job(job.job_id)
    assert done is not None and done.state == "completed" and done.finished_at == NOW + 18
    assert done.counts == {"queued": 0, "done": 1, "unchanged": 1, "failed": 2, "deleted": 3}
    assert jobs.claim_job("w3", NOW + 100, 10, job_id=job.job_id) is None  # completed: never claimed again


def test_i_ingest_job_store_lists_per_source_and_claims_oldest_first(stores: StateStores) -> None:
    jobs = stores.jobs
    source = f"s{uuid.uuid4().hex[:8]}@1.0.0"
    first, second = _job(source, 1, NOW), _job(source, 1, NOW + 1)
    other = _job(f"o{uuid.uuid4().hex[:8]}@1.0.0", 1, NOW + 2)
    for job in (second, first, other):
        jobs.create_job(job, [JobDocument(0, "d", {"title": "t", "body": "b"})])
    assert [j.job_id for j in jobs.list_jobs(source)] == [second.job_id, first.job_id]
    assert [j.job_id for j in jobs.list_jobs(source, limit=1)] == [second.job_id]
    named = jobs.claim_job("w", NOW, 10, job_id=second.job_id)
    assert named is not None and named.job_id == second.job_id
    # A claimed job is double-handled never: a document outcome is recorded once.
    assert jobs.record_outcomes(second.job_id, "w", [DocumentOutcome(0, "done", passages=1)], NOW, 10)
    with pytest.raises(Conflict):
        jobs.record_outcomes(second.job_id, "w", [DocumentOutcome(0, "done", passages=1)], NOW, 10)
    again = jobs.get_job(second.job_id)
    assert again is not None and again.count("done") == 1
    released = jobs.claim_job("w", NOW, 10, job_id=first.job_id)
    assert released is not None
    jobs.release_job(first.job_id, "w")
    assert jobs.claim_job("w2", NOW + 1, 10, job_id=first.job_id) is not None  # released: free at once


def test_job_cancel_stops_a_job_on_every_job_store(stores: StateStores) -> None:
    """I-INGEST job cancel: a queued job is cancelled at once and never claimed; a running one is asked
    to stop (its holder finishes it `cancelled` after its batch); counts are kept; a finished job stays."""
    jobs = stores.jobs
    queued = _job(total=1)
    jobs.create_job(queued, [JobDocument(0, "a", {"title": "A", "body": "a"})])
    cancelled = jobs.cancel_job(queued.job_id, NOW)
    assert cancelled is not None and cancelled.state == "cancelled" and cancelled.finished_at == NOW
    assert cancelled.counts["queued"] == 1
    assert jobs.claim_job("w", NOW + 1, 10, job_id=queued.job_id) is None
    assert jobs.claim_job("w", NOW + 1, 10) is None  # nor as "the oldest open job"

    running = _job(total=2, created_at=NOW + 1)
    jobs.create_job(running, [JobDocument(i, f"d{i}", {"title": "t", "body": "b"}) for i in range(2)])
    assert jobs.claim_job("w", NOW + 2, 10, job_id=running.job_id) is not None
    assert jobs.record_outcomes(running.job_id, "w", [DocumentOutcome(0, "done", passages=1)], NOW + 2, 10)
    asked = jobs.cancel_job(running.job_id, NOW + 3)
    assert asked is not None and asked.state == "running" and asked.cancel_requested
    assert jobs.finish_job(running.job_id, "w", NOW + 4, state="cancelled") is True
    stopped = jobs.get_job(running.job_id)
    assert stopped is not None and stopped.state == "cancelled" and stopped.counts["done"] == 1
    assert stopped.counts["queued"] == 1 and stopped.passages == 1
    assert jobs.claim_job("w2", NOW + 100, 10, job_id=running.job_id) is None

    # The holder died before it saw the request: once its lease ran out, cancel ends the job at once.
    orphan = _job(total=1, created_at=NOW + 2)
    jobs.create_job(orphan, [JobDocument(0, "a", {"title": "A", "body": "a"})])
    assert jobs.claim_job("dead", NOW, 10, job_id=orphan.job_id) is not None
    gone = jobs.cancel_job(orphan.job_id, NOW + 20)
    assert gone is not None and gone.state == "cancelled"
    finished = jobs.cancel_job(running.job_id, NOW + 30)
    assert finished is not None and finished.finished_at == NOW + 4  # left as it was
    assert jobs.cancel_job("nope", NOW) is None


def test_m1_job_store_counts_attempts_per_document_across_workers(stores: StateStores) -> None:
    """I-INGEST attempts: every batch begun counts an attempt on its documents, kept across workers (a kb
    serve restarted after dying on a document sees how often it was begun), only for the lease holder."""
    jobs = stores.jobs
    job = _job(total=2, prefix="p", sync=True, tenant="acme", origin="s3://bucket/docs")
    jobs.create_job(job, [JobDocument(i, f"d{i}", {"title": "t", "body": "b"}) for i in range(2)])
    assert jobs.get_job(job.job_id).spec.sync_origin == "s3://bucket/docs"  # type: ignore[union-attr]
    assert jobs.claim_job("w1", NOW, 10) is not None
    assert jobs.begin_documents(job.job_id, "w2", [0, 1]) is False  # not the holder
    assert jobs.begin_documents(job.job_id, "w1", [0, 1]) is True
    taken = jobs.claim_job("w2", NOW + 11, 10, job_id=job.job_id)  # w1 died on the batch
    assert taken is not None
    assert jobs.begin_documents(job.job_id, "w2", [0]) is True
    assert [d.attempts for d in jobs.job_documents(job.job_id, state="queued")] == [2, 1]
    assert jobs.begin_documents(job.job_id, "w2", [1], delta=-1) is True  # an attempt taken back
    assert [d.attempts for d in jobs.job_documents(job.job_id, state="queued")] == [2, 0]


def test_i_ingest_a_document_failed_at_submit_keeps_its_payload_to_name_its_file(stores: StateStores) -> None:
    """Two files of one doc_id fail `doc_id_collision` as the job is made: each keeps its payload on
    every job store, so the job's errors name the file each came from."""
    jobs = stores.jobs
    job = _job(total=2)
    clash = [
        JobDocument(
            seq, "a", {"kind": "directory", "path": f"/d/{n}", "uri": n}, "failed", "doc_id_collision"
        )
        for seq, n in enumerate(("a.md", "a.txt"))
    ]
    jobs.create_job(job, clash)
    failed = jobs.job_documents(job.job_id, state="failed")
    assert [(d.error, d.payload) for d in failed] == [(d.error, d.payload) for d in clash]
