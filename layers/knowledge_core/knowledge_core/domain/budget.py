"""Budget rules of agent invocations (R-BUDGET), pure: limits, ledger entries of an invocation chain,
whether a set of retrievals fits every entry, how many new citation characters the chain grants, and
source deadlines. The ledger adapter applies these atomically; nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import KnowledgeRouting

MAX_CHAIN_DEPTH = 16  # root .. self; keeps one spend inside one TransactWriteItems (<= 100 items)


@dataclass(frozen=True)
class Limits:
    max_retrievals: int
    max_queries_per_source: int
    max_context_chars: int

    @classmethod
    def of(cls, routing: KnowledgeRouting) -> Limits:
        return cls(routing.max_retrievals, routing.max_queries_per_source, routing.max_context_chars)


@dataclass(frozen=True)
class ChainLink:
    """One invocation of the chain as the runtime announced it (root first)."""

    invocation_id: str
    agent: str
    limits: Limits
    deadline: float | None = None  # epoch seconds


@dataclass(frozen=True)
class LedgerEntry:
    """One invocation's ledger: its limits (fixed on first sight) and what it and its descendants spent."""

    invocation_id: str
    agent: str
    parent: str | None
    limits: Limits
    retrievals: int = 0
    chars: int = 0
    per_source: dict[str, int] = field(default_factory=dict)
    deadline: float | None = None

    @property
    def retrievals_remaining(self) -> int:
        return max(0, self.limits.max_retrievals - self.retrievals)

    @property
    def chars_remaining(self) -> int:
        return max(0, self.limits.max_context_chars - self.chars)

    def queries(self, source_key: str) -> int:
        return self.per_source.get(source_key, 0)


def retrieval_refusal(chain: list[LedgerEntry], source_keys: list[str]) -> str | None:
    """Why one request to each of `source_keys` does not fit the chain (None = it fits everywhere)."""
    for entry in chain:
        if entry.retrievals + len(source_keys) > entry.limits.max_retrievals:
            return (
                f"retrieval budget of invocation {entry.invocation_id} exhausted "
                f"({entry.retrievals} of {entry.limits.max_retrievals} used, {len(source_keys)} requested)"
            )
        for key in source_keys:
            if entry.queries(key) + 1 > entry.limits.max_queries_per_source:
                return (
                    f"per-source budget of invocation {entry.invocation_id} exhausted for {key} "
                    f"({entry.limits.max_queries_per_source} queries)"
                )
    return None


def chars_remaining(chain: list[LedgerEntry]) -> int:
    """New citation characters the whole chain still allows: the smallest remaining budget in it."""
    return min((e.chars_remaining for e in chain), default=0)


def grant_chars(wanted: list[int], remaining: int) -> list[int]:
    """Characters granted to each new citation in order: each cut to what is left; 0 = no citation."""
    granted: list[int] = []
    for size in wanted:
        take = max(0, min(size, remaining))
        granted.append(take)
        remaining -= take
    return granted


def cut_to_source_max(contents: list[str], source_max_chars: int) -> list[str]:
    """The contents one source request delivers, in rank order, cut to `sourceMaxChars` in total."""
    left = source_max_chars
    out: list[str] = []
    for content in contents:
        out.append(content[: max(0, left)])
        left -= len(out[-1])
    return out


def source_timeout(now: float, source_timeout_seconds: float, deadlines: list[float | None]) -> float:
    """Seconds a source request may take: min(sourceTimeoutSeconds, earliest deadline in the chain - now).
    <= 0 means the chain is already out of time."""
    known = [d for d in deadlines if d is not None]
    if not known:
        return float(source_timeout_seconds)
    return min(float(source_timeout_seconds), min(known) - now)
