"""R-BUDGET: pure budget rules, and the DynamoDB ledger on moto — chains, atomic refusal, char grants,
citation reuse, and 16 concurrent callers sharing one root. The ledger scenarios are plain functions so
tests/integration/test_ledger_concurrency.py runs the very same ones against the real DynamoDB-API server."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from knowledge_core.domain.budget import (
    ChainLink,
    LedgerEntry,
    Limits,
    chars_remaining,
    cut_to_source_max,
    grant_chars,
    retrieval_refusal,
    source_timeout,
)
from knowledge_core.domain.errors import BudgetExceeded, ProtocolError
from knowledge_core.ports import BudgetLedger, CitationDraft

NOW = 1_795_953_600.0
ATTEMPTS = 8  # per caller: 16 x 8 = 128 attempts for a root that allows 64
SMALL = Limits(4, 2, 100)


# --- pure rules -------------------------------------------------------------------------------------


def _entry(inv: str, r: int = 0, c: int = 0, per: dict | None = None, limits: Limits = SMALL) -> LedgerEntry:
    return LedgerEntry(inv, "a@1", None, limits, r, c, per or {})


def test_r_budget_retrieval_refusal_checks_every_entry() -> None:
    chain = [_entry("root", r=3), _entry("leaf")]
    assert retrieval_refusal(chain, ["s@1"]) is None
    assert "root" in (retrieval_refusal(chain, ["s@1", "t@1"]) or "")
    assert "per-source" in (
        retrieval_refusal([_entry("root"), _entry("leaf", per={"s@1": 2})], ["s@1"]) or ""
    )


def test_r_budget_char_grants() -> None:
    assert chars_remaining([_entry("root", c=70), _entry("mid", c=10), _entry("leaf")]) == 30
    assert grant_chars([20, 20, 5], 30) == [20, 10, 0]
    assert grant_chars([5], 0) == [0]
    assert cut_to_source_max(["abcd", "efgh", "ij"], 6) == ["abcd", "ef", ""]


def test_r_budget_source_deadline_is_earliest_in_chain() -> None:
    assert source_timeout(NOW, 15, [None, None]) == 15.0
    assert source_timeout(NOW, 15, [NOW + 100, NOW + 4, None]) == pytest.approx(4.0)
    assert source_timeout(NOW, 15, [NOW - 1]) < 0


# --- ledger scenarios (shared with the integration layer) ---------------------------------------------


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
    chain = ledger.open_chain(root, links, NOW)
    assert [e.parent for e in chain] == [None, root, mid]
    assert chain[2].limits == Limits(8, 2, 100) and chain[2].deadline == pytest.approx(NOW + 30)
    assert ledger.open_chain(root, links, NOW) == chain  # first sight only

    ledger.charge_retrievals(root, chain, ["s@1", "t@1"])
    ledger.charge_retrievals(root, chain, ["s@1"])
    with pytest.raises(BudgetExceeded, match=f"per-source budget of invocation {leaf}"):  # leaf: 2 per source
        ledger.charge_retrievals(root, chain, ["s@1"])
    with pytest.raises(BudgetExceeded, match=f"retrieval budget of invocation {mid}"):  # mid: 4 in total
        ledger.charge_retrievals(root, chain, ["t@1", "u@1"])
    after = [ledger.entry(root, e.invocation_id) for e in chain]
    assert [e.retrievals for e in after if e] == [3, 3, 3]  # refusals charged nothing anywhere
    assert [e.per_source for e in after if e] == [{"s@1": 2, "t@1": 1}] * 3

    # Char grants: cut to the smallest remaining budget in the chain (leaf 100).
    drafts = [CitationDraft(f"fp-{i}", "s@1", f"d{i}", "x" * 60, "ret-1", leaf) for i in range(3)]
    cited = ledger.record_citations(root, [root, mid, leaf], drafts, NOW)
    assert [len(c.content) if c else None for c in cited] == [60, 40, None]
    assert [c.citation_id for c in cited if c] == ["cite-1", "cite-2"]
    assert [ledger.entry(root, i).chars for i in (root, mid, leaf)] == [100, 100, 100]
    # The same content again: the same id, no new chars; nothing new fits.
    again = ledger.record_citations(root, [root, mid, leaf], drafts[:1], NOW)
    assert again[0] is not None and again[0].citation_id == "cite-1" and not again[0].created
    assert ledger.entry(root, leaf).chars == 100

    # A sibling sub-agent spends the root's remaining 200 chars, cut to the root's limit.
    sibling = f"sib-{uuid.uuid4().hex[:6]}"
    sib_chain = ledger.open_chain(root, [links[0], ChainLink(sibling, "leaf@1", Limits(8, 2, 65536))], NOW)
    big = [CitationDraft("fp-big", "t@1", "d9", "y" * 500, "ret-2", sibling)]
    (granted,) = ledger.record_citations(root, [root, sibling], big, NOW)
    assert granted is not None and len(granted.content) == 200 and granted.citation_id == "cite-3"
    assert ledger.entry(root, root).chars == 300 and sib_chain[1].chars == 0
    assert ledger.record_citations(
        root, [root, sibling], [CitationDraft("fp-new", "t@1", "d8", "z", "ret-3", sibling)], NOW
    ) == [None]


def scenario_chain_mismatch(ledger: BudgetLedger) -> None:
    root, mid, _ = _ids()
    ledger.open_chain(
        root, [ChainLink(root, "root@1", Limits(5, 3, 300)), ChainLink(mid, "mid@1", Limits(3, 3, 200))], NOW
    )
    with pytest.raises(ProtocolError):
        ledger.open_chain(
            root,
            [ChainLink(root, "root@1", Limits(5, 3, 300)), ChainLink(mid, "other@1", Limits(3, 3, 200))],
            NOW,
        )
    with pytest.raises(ProtocolError):  # mid re-announced directly under another parent
        ledger.open_chain(
            root,
            [
                ChainLink(root, "root@1", Limits(5, 3, 300)),
                ChainLink("x", "x@1", Limits(1, 1, 1)),
                ChainLink(mid, "mid@1", Limits(3, 3, 200)),
            ],
            NOW,
        )


def scenario_concurrent_shared_root(ledger: BudgetLedger, callers: int = 16) -> dict:
    """`callers` sub-agents of one root spend until refused: the root's limits are met exactly, never
    exceeded, and every refusal left no partial charge (children sum to the root)."""
    root = f"root-{uuid.uuid4().hex[:8]}"
    root_link = ChainLink(root, "root@1", Limits(64, 16, 1000))
    sources = ["a@1", "b@1", "c@1", "d@1"]
    ledger.open_chain(root, [root_link], NOW)
    granted = [0] * callers
    refused = [0] * callers
    chars = [0] * callers
    ids: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(callers)

    def caller(n: int) -> None:
        child = f"child-{n}"
        chain = ledger.open_chain(root, [root_link, ChainLink(child, "child@1", Limits(64, 16, 65536))], NOW)
        start.wait()
        for i in range(ATTEMPTS):
            try:
                ledger.charge_retrievals(root, chain, [sources[(n + i) % 4]])
                granted[n] += 1
            except BudgetExceeded:
                refused[n] += 1
        drafts = [CitationDraft(f"{n}-{k}", "a@1", f"d{n}", "c" * 37, "r", child) for k in range(3)]
        for citation in ledger.record_citations(root, [root, child], drafts, NOW):
            if citation is not None:
                chars[n] += len(citation.content)
                with lock:
                    ids.append(citation.citation_id)

    with ThreadPoolExecutor(max_workers=callers) as pool:
        list(pool.map(caller, range(callers)))
    root_entry = ledger.entry(root, root)
    children = [ledger.entry(root, f"child-{n}") for n in range(callers)]
    assert root_entry is not None and all(children)
    assert sum(granted) == root_entry.retrievals == 64  # exactly the limit: never over, nothing lost
    assert sum(refused) == callers * ATTEMPTS - 64
    assert root_entry.per_source == dict.fromkeys(sources, 16)
    assert [c.retrievals for c in children if c] == granted  # a refusal charged no child either
    assert root_entry.chars == sum(chars) == 1000
    assert [c.chars for c in children if c] == chars
    assert len(ids) == len(set(ids))  # citation ids unique within the root
    return {"granted": sum(granted), "refused": sum(refused), "chars": sum(chars), "citations": len(ids)}


# --- on moto (unit layer) -------------------------------------------------------------------------------


@pytest.fixture
def ledger(container):
    return container.ledger


def test_r_budget_three_level_chain_moto(ledger: BudgetLedger) -> None:
    scenario_three_level_chain(ledger)


def test_r_budget_chain_mismatch_is_protocol_error_moto(ledger: BudgetLedger) -> None:
    scenario_chain_mismatch(ledger)


def test_r_budget_16_concurrent_callers_never_overspend_moto(ledger: BudgetLedger) -> None:
    scenario_concurrent_shared_root(ledger)
