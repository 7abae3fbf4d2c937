"""Abstract interfaces the services depend on; adapters implement them (ports and adapters)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from .domain.budget import ChainLink, LedgerEntry
from .domain.errors import SourceFailure
from .domain.models import (
    AgentDefinition,
    Document,
    Run,
    Session,
    Source,
    SourceDefinition,
    SourceState,
    Viewer,
)


class Clock(ABC):
    @abstractmethod
    def now(self) -> float:
        """Seconds since the epoch."""


class SystemClock(Clock):
    def now(self) -> float:
        return time.time()


class Registry(ABC):
    """Published sources, agents and workspaces."""

    @abstractmethod
    def get_sources(self, keys: list[str]) -> dict[str, Source | None]: ...

    @abstractmethod
    def put_source(self, definition: SourceDefinition) -> bool:
        """Publish; True if created, False if identical already exists; Conflict if it differs."""

    @abstractmethod
    def update_source_state(self, key: str, state: SourceState) -> None: ...

    @abstractmethod
    def get_agent(self, key: str) -> AgentDefinition | None: ...

    @abstractmethod
    def put_agent(self, definition: AgentDefinition) -> bool: ...

    @abstractmethod
    def get_workspace_agent(self, route: str) -> str | None: ...

    @abstractmethod
    def set_workspace_agent(self, route: str, agent_key: str) -> None: ...


class SessionStore(ABC):
    @abstractmethod
    def put_session(self, token_hash: str, session: Session) -> None: ...

    @abstractmethod
    def get_session(self, token_hash: str) -> Session | None: ...


class RunStore(ABC):
    @abstractmethod
    def create_run(self, run: Run) -> None: ...

    @abstractmethod
    def get_run(self, run_id: str) -> Run | None: ...

    @abstractmethod
    def transition_run(self, run_id: str, from_states: tuple[str, ...], to_state: str) -> Run | None:
        """Conditional state change; None when the run is missing or not in one of `from_states`."""


@dataclass(frozen=True)
class SourceQuery:
    key: str
    top_k: int
    min_score: float
    timeout_s: float = 15.0


@dataclass(frozen=True)
class Hit:
    """A search hit rolled up to its parent document."""

    source_key: str
    doc_id: str
    title: str
    revision: str
    score: float
    passage: str
    structured_source: dict | None = None


@dataclass
class SourceResult:
    key: str
    hits: list[Hit] = field(default_factory=list)
    error: SourceFailure | None = None
    ms: float = 0.0


class Embedder(ABC):
    """Text to unit vectors (int8, see adapters.embedding) for the semantic half of hybrid ranking."""

    model_id: str

    @abstractmethod
    def embed_query(self, text: str) -> bytes | None:
        """The query's vector, or None when the model does not cover the query's script."""

    @abstractmethod
    def embed_passages(self, texts: Sequence[str]) -> list[bytes]: ...


class SearchBackend(ABC):
    """Documents and passages of every source; searched per source, hits grouped by parent document."""

    @abstractmethod
    def search(self, queries: list[SourceQuery], text: str, viewer: Viewer) -> list[SourceResult]:
        """One result per query, same order; a failing source reports its error instead of hits."""

    @abstractmethod
    def get_document(self, source_key: str, doc_id: str) -> Document | None:
        """Raises SourceFailure when the backend cannot answer."""

    @abstractmethod
    def put_documents(self, documents: list[Document]) -> None:
        """Create or replace; searchable when this returns."""

    @abstractmethod
    def delete_document(self, source_key: str, doc_id: str) -> bool: ...

    @abstractmethod
    def set_document_status(self, source_key: str, doc_id: str, status: str) -> bool: ...

    @abstractmethod
    def healthy(self, timeout_s: float = 1.0) -> bool: ...


@dataclass(frozen=True)
class TurnRecord:
    """The idempotency record of one turn (A-TURN): claimed `pending`, then `done` with its response."""

    key: str
    request_hash: str
    state: str  # pending | done
    claim: str  # the claimer's random token; only it may complete or release the record
    claimed_at: float
    expires_at: int
    run_id: str | None = None
    response: dict | None = None


class TurnStore(ABC):
    @abstractmethod
    def claim_turn(
        self, key: str, request_hash: str, claim: str, now: float, expires_at: int
    ) -> TurnRecord | None:
        """Conditional put of a `pending` record. None when this call claimed the turn, else the live
        record that exists (an expired record counts as absent)."""

    @abstractmethod
    def get_turn(self, key: str, now: float) -> TurnRecord | None: ...

    @abstractmethod
    def set_turn_run(self, key: str, claim: str, run_id: str) -> bool:
        """Remember the run of a pending claim; False when the claim was lost."""

    @abstractmethod
    def complete_turn(self, key: str, claim: str, response: dict) -> bool:
        """pending -> done with the response, only for the holder of `claim`."""

    @abstractmethod
    def release_turn(self, key: str, claim: str) -> None:
        """Drop a pending claim that failed, so a retry can start over."""

    @abstractmethod
    def take_over_turn(self, key: str, old_claim: str, new_claim: str, now: float) -> bool:
        """Replace a stale pending claim (its holder died); False when someone else moved first."""


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


class BudgetLedger(ABC):
    """Per-invocation budgets and citations of one root invocation tree (R-BUDGET), kept atomically."""

    @abstractmethod
    def open_chain(self, root_id: str, links: list[ChainLink], now: float) -> list[LedgerEntry]:
        """The entries of `links` (root first), each created on first sight with its agent's limits.
        ProtocolError when a known invocation is announced with another agent or parent."""

    @abstractmethod
    def charge_retrievals(self, root_id: str, chain: list[LedgerEntry], source_keys: list[str]) -> None:
        """One request to each source, charged to every entry of the chain in one conditional transaction;
        BudgetExceeded (and nothing charged anywhere) when any entry would go over a limit."""

    @abstractmethod
    def record_citations(
        self, root_id: str, chain_ids: list[str], drafts: list[CitationDraft], now: float
    ) -> list[Citation | None]:
        """Per draft: the existing citation of the same content (no new chars), a new one cut to the
        smallest remaining char budget of the chain, or None when no chars remain. Atomic per call."""

    @abstractmethod
    def entry(self, root_id: str, invocation_id: str) -> LedgerEntry | None: ...
