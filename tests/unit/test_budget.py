"""R-BUDGET: the pure budget rules. The ledger adapters' scenarios (chains, atomic refusal, char grants,
citation reuse, concurrent callers) are the state contract suite: tests/contract/test_state_contract.py."""

from __future__ import annotations

import pytest
from knowledge_core.domain.budget import (
    LedgerEntry,
    Limits,
    chars_remaining,
    cut_to_source_max,
    grant_chars,
    retrieval_refusal,
    source_timeout,
)

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
