"""Budget rules of agent invocations (R-BUDGET), pure: limits, ledger entries of an invocation chain,
whether a set of retrievals fits every entry, how many new citation characters the chain grants, and
source deadlines. The ledger adapter applies these atomically; nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .models import KnowledgeRouting

INVOCATION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"  # an invocation, the ledger's key
MAX_CHAIN_DEPTH = 16  # root .. self; keeps one spend inside one TransactWriteItems (<= 100 items)
# Citations one root tree may hold: the DynamoDB ledger marks each on the root item (~80 bytes of its
# 400 KB), so a tree stops creating citations here, as when no chars remain; reuse still works.
MAX_CITATIONS_PER_ROOT = 2000


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


def chain_mismatch(links: list[ChainLink], entries: dict[str, LedgerEntry]) -> str | None:
    """Why the announced chain contradicts the ledger (None = it agrees): a known invocation announced
    with another agent or another parent (R-BUDGET: an entry's agent and place are fixed on first sight)."""
    for depth, link in enumerate(links):
        known = entries.get(link.invocation_id)
        parent = links[depth - 1].invocation_id if depth else None
        if known is not None and (known.agent != link.agent or known.parent != parent):
            return f"invocation {link.invocation_id} is already known with another agent or parent"
    return None


def effective_chain(links: list[ChainLink], entries: dict[str, LedgerEntry]) -> list[LedgerEntry]:
    """The chain root first: each link's stored entry, or the empty entry first sight would create."""
    chain: list[LedgerEntry] = []
    for depth, link in enumerate(links):
        known = entries.get(link.invocation_id)
        parent = links[depth - 1].invocation_id if depth else None
        chain.append(
            known or LedgerEntry(link.invocation_id, link.agent, parent, link.limits, deadline=link.deadline)
        )
    return chain


def charged(entry: LedgerEntry, source_keys: list[str]) -> LedgerEntry:
    """`entry` after one request to each of `source_keys`."""
    per_source = dict(entry.per_source)
    for key in source_keys:
        per_source[key] = per_source.get(key, 0) + 1
    return replace(entry, retrievals=entry.retrievals + len(source_keys), per_source=per_source)


@dataclass(frozen=True)
class CitationDraft:
    """A reference that would become a citation: `fingerprint` identifies its content within the root."""

    fingerprint: str
    knowledge: str  # exact id@version
    doc_id: str
    content: str  # already cut to the source's sourceMaxChars share
    retrieval_id: str
    invocation_id: str


@dataclass(frozen=True)
class Citation:
    citation_id: str
    fingerprint: str
    knowledge: str
    content: str
    retrieval_id: str
    created: bool  # False = an existing citation of the same content, reused without new chars


@dataclass(frozen=True)
class CitationMark:
    """An existing citation of a root tree: its id and the characters it was granted."""

    citation_id: str
    chars: int


@dataclass(frozen=True)
class CitationPlan:
    """What one call's drafts become: per draft its citation (None = no chars left), the new ones with
    their drafts, the new chars to charge to every entry of the chain, and the root's counter after."""

    citations: list[Citation | None]
    created: list[tuple[Citation, CitationDraft]]
    chars: int
    seq: int


def plan_citations(
    chain: list[LedgerEntry], seq: int, cited: dict[str, CitationMark], drafts: list[CitationDraft]
) -> CitationPlan:
    """R-BUDGET citations: identical content (same fingerprint in the root tree, or earlier in this call)
    reuses its id and spends nothing; new content is numbered `cite-<n>` on the root's counter and cut to
    the smallest remaining char budget of the chain, in order; nothing is created once no chars remain.
    `cited` needs to hold (at least) the drafts' fingerprints that the tree has cited."""
    remaining = chars_remaining(chain)
    out: list[Citation | None] = []
    created: list[tuple[Citation, CitationDraft]] = []
    first: dict[str, Citation | None] = {}
    for draft in drafts:
        mark = cited.get(draft.fingerprint)
        if mark is not None:
            content = draft.content[: mark.chars]
            out.append(
                Citation(
                    mark.citation_id, draft.fingerprint, draft.knowledge, content, draft.retrieval_id, False
                )
            )
            continue
        if draft.fingerprint in first:
            earlier = first[draft.fingerprint]
            out.append(replace(earlier, created=False) if earlier is not None else None)
            continue
        room = remaining if seq < MAX_CITATIONS_PER_ROOT else 0  # seq = citations the tree holds
        take = grant_chars([len(draft.content)], room)[0]
        citation: Citation | None = None
        if take > 0:
            seq += 1
            remaining -= take
            citation = Citation(
                f"cite-{seq}",
                draft.fingerprint,
                draft.knowledge,
                draft.content[:take],
                draft.retrieval_id,
                True,
            )
            created.append((citation, draft))
        first[draft.fingerprint] = citation
        out.append(citation)
    return CitationPlan(out, created, sum(len(c.content) for c, _ in created), seq)


def with_chars(entry: LedgerEntry, chars: int) -> LedgerEntry:
    return replace(entry, chars=entry.chars + chars)


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
