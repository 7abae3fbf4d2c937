"""Abstract interfaces the services depend on; adapters implement them (ports and adapters)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from .domain.errors import SourceFailure
from .domain.models import AgentDefinition, Document, Run, Session, Source, SourceDefinition, SourceState, Viewer


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
