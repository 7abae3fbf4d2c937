"""Operations (SPEC §4): publishing sources and agents, workspaces, documents, switches, tokens, runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime

from ..domain.admin_wire import (
    AgentListResponse,
    AgentSummary,
    CompactionResponse,
    DocumentListResponse,
    DocumentSummary,
    LedgerEntryView,
    LedgerResponse,
    ModelCheck,
    SearchIndexSummary,
    SearchIndicesResponse,
    SourceListResponse,
    SourceSummary,
    WorkspaceListResponse,
    WorkspaceSummary,
)
from ..domain.budget import LedgerEntry
from ..domain.errors import InvalidRequest, KnowledgeUnavailable, NotFound, SourceFailure
from ..domain.metadata_quota import MetadataQuota, metadata_quota_refusals
from ..domain.models import (
    ROUTE_PATTERN,
    TOOL_MODES,
    AgentDefinition,
    Document,
    Source,
    SourceDefinition,
    SourceState,
)
from ..domain.wire import RankingExtension
from ..ports import BudgetLedger, Registry, RunStore, SearchBackend
from .access import RunGuard
from .scope import ScopeResolver


class AdminService:
    def __init__(
        self,
        registry: Registry,
        backend: SearchBackend,
        scopes: ScopeResolver,
        runs: RunStore,
        run_guard: RunGuard,
        ledger: BudgetLedger,
        metadata_quota: MetadataQuota | None = None,
        ranking: Callable[[], RankingExtension] | None = None,
    ) -> None:
        """`ranking`: how searches rank now (`Retrieval.ranking_state`), shown with the indices."""
        self._ledger = ledger
        self._metadata_quota = metadata_quota or MetadataQuota()
        self._ranking = ranking
        self._registry = registry
        self._backend = backend
        self._scopes = scopes
        self._runs = runs
        self._run_guard = run_guard

    def publish_source(self, definition: SourceDefinition) -> bool:
        created = self._registry.put_source(definition)
        self._scopes.invalidate()
        return created

    def prepare_search(self) -> None:
        """Deploy time: the search backend's indices and templates."""
        with _write_faults():
            self._backend.prepare()

    def search_indices(self) -> SearchIndicesResponse:
        """How the full-text indices are stored (operators: is a compaction due, or running)."""
        try:
            states = self._backend.index_states()
        except SourceFailure:
            raise KnowledgeUnavailable() from None
        summaries = [SearchIndexSummary(**asdict(s)) for s in states]
        if self._ranking is None:
            return SearchIndicesResponse(indices=summaries)
        return SearchIndicesResponse(indices=summaries, ranking=self._ranking())

    def compact_search(self) -> CompactionResponse:
        """An operator's compaction (after a bulk load, say): every index above its target segments is merged
        down in the background, fragmented or not; this returns at once."""
        indices = self.search_indices().indices
        with _write_faults():
            started = self._backend.compact(force=True)
        return CompactionResponse(started=started, indices=indices)

    def publish_agent(self, definition: AgentDefinition) -> bool:
        return self._registry.put_agent(definition)

    def set_workspace(self, route: str, agent_key: str) -> None:
        if not re.fullmatch(ROUTE_PATTERN, route):
            raise InvalidRequest("route: must be lower-case letters, digits and '-' (1-63)", field="route")
        if self._scopes.agent(agent_key) is None:
            raise NotFound(f"agent {agent_key} is not published", field="agent")
        self._registry.set_workspace_agent(route, agent_key)
        self._scopes.invalidate()

    def _source_state(self, key: str) -> SourceState:
        source = self._registry.get_sources([key]).get(key)
        if source is None:
            raise NotFound(f"source {key} is not published", field="source")
        return source.state

    def set_source_enabled(self, key: str, enabled: bool) -> None:
        state = self._source_state(key)
        self._registry.update_source_state(key, state.model_copy(update={"enabled": enabled}))
        self._scopes.invalidate()

    def put_documents(self, documents: list[Document]) -> None:
        """Store `documents` (one write); a document past its metadata key quota refuses them all first
        (400 naming the document and the limit)."""
        for key in {d.source_key for d in documents}:
            self._source_state(key)
        with _write_faults():
            refused = metadata_quota_refusals(documents, self._metadata_quota, self._backend.metadata_keys)
            if refused:
                i, exc = min(refused.items())
                where = f"documents[{i}]." if len(documents) > 1 else ""
                raise InvalidRequest(f"{where}{exc}", field=f"{where}{exc.field}")
            self._backend.put_documents(documents)

    def migrate_tenant(self, source_key: str, tenant: str, apply: bool) -> list[str]:
        """The documents of a source stored without a tenant (visible to no one); with `apply`, each is
        re-stored under `tenant` (same title and body, so the same revision: outstanding refs stay valid)."""
        self._source_state(source_key)
        with _write_faults():
            doc_ids = self._backend.untenanted_documents(source_key)
            if apply:
                for i in range(0, len(doc_ids), 50):
                    docs = [self._backend.get_document(source_key, d) for d in doc_ids[i : i + 50]]
                    self._backend.put_documents(
                        [
                            d.model_copy(update={"acl": d.acl.model_copy(update={"tenant": tenant})})
                            for d in docs
                            if d is not None and d.acl.tenant is None
                        ]
                    )
        return doc_ids

    def delete_document(self, source_key: str, doc_id: str) -> None:
        with _write_faults():
            deleted = self._backend.delete_document(source_key, doc_id)
        if not deleted:
            raise NotFound("document not found", field="doc_id")

    def set_document_status(self, source_key: str, doc_id: str, status: str) -> None:
        if status not in ("ready", "disabled"):
            raise InvalidRequest("status: must be ready or disabled", field="status")
        with _write_faults():
            changed = self._backend.set_document_status(source_key, doc_id, status)
        if not changed:
            raise NotFound("document not found", field="doc_id")

    # --- listings (operators and the console) ----------------------------------------------------------
    def list_sources(self) -> SourceListResponse:
        return SourceListResponse(sources=[_source_summary(s) for s in self._registry.list_sources()])

    def list_documents(self, key: str, limit: int = 1000) -> DocumentListResponse:
        self._source_state(key)
        try:
            found = self._backend.list_documents(key, limit + 1)
        except SourceFailure:
            raise KnowledgeUnavailable() from None
        return DocumentListResponse(
            source=key,
            documents=[
                DocumentSummary(
                    doc_id=d.doc_id,
                    title=d.title,
                    revision=d.revision,
                    status=d.status,
                    chars=d.chars,
                    updated_at=datetime.fromtimestamp(d.updated_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    tenant=d.tenant,
                    metadata=d.metadata or {},
                )
                for d in found[:limit]
            ],
            truncated=len(found) > limit,
        )

    def list_agents(self) -> AgentListResponse:
        routes: dict[str, list[str]] = {}
        for route, agent in self._registry.list_workspaces().items():
            routes.setdefault(agent, []).append(route)
        return AgentListResponse(
            agents=[_agent_summary(a, routes.get(a.key, [])) for a in self._registry.list_agents()]
        )

    def list_workspaces(self) -> WorkspaceListResponse:
        return WorkspaceListResponse(
            workspaces=[
                WorkspaceSummary(route=r, agent=a) for r, a in self._registry.list_workspaces().items()
            ]
        )

    def ledger(self, root_id: str) -> LedgerResponse:
        entries = self._ledger.tree(root_id)
        if not entries:
            raise NotFound("no ledger for that root invocation", field="root_id")
        return LedgerResponse(root_id=root_id, entries=[_ledger_view(e) for e in entries])

    def end_run(self, run_id: str, state: str) -> None:
        if self._runs.transition_run(run_id, ("preparing", "context_ready"), state) is None:
            raise NotFound("run not found or already ended", field="run_id")
        self._run_guard.forget(run_id)


def _source_summary(source: Source) -> SourceSummary:
    d, st = source.definition, source.state
    return SourceSummary(
        key=d.key,
        id=d.id,
        version=d.version,
        description=d.description,
        tags=list(d.tags),
        top_k=d.top_k,
        min_score=d.min_score,
        status=st.status,
        enabled=st.enabled,
        lease_until=st.lease_until,
        searchable=st.enabled and st.status == "active",
    )


def _agent_summary(agent: AgentDefinition, routes: list[str]) -> AgentSummary:
    mode = agent.knowledge_routing.mode if agent.knowledge_routing else None
    tool_mode = mode in TOOL_MODES
    return AgentSummary(
        key=agent.key,
        definition=agent.model_dump(mode="json", by_alias=True, exclude_none=True),
        mode=mode,
        tool_mode=tool_mode,
        models=[
            ModelCheck(
                model=c.model,
                tool_calling=c.tool_calling,
                compatible=not tool_mode or c.tool_calling is True,
            )
            for c in agent.model_profile.candidates
        ],
        routes=sorted(routes),
    )


def _ledger_view(entry: LedgerEntry) -> LedgerEntryView:
    return LedgerEntryView(
        invocation_id=entry.invocation_id,
        agent=entry.agent,
        parent=entry.parent,
        max_retrievals=entry.limits.max_retrievals,
        retrievals=entry.retrievals,
        retrievals_remaining=entry.retrievals_remaining,
        max_queries_per_source=entry.limits.max_queries_per_source,
        per_source=dict(entry.per_source),
        max_context_chars=entry.limits.max_context_chars,
        chars=entry.chars,
        chars_remaining=entry.chars_remaining,
    )


_WRITE_FAILURE_MESSAGES = {
    "throttled": "search backend is throttling writes; retry",
    "rejected": "search backend rejected the write",
    "too_many_fields": "search backend rejected the write: its field limit is reached (too many distinct "
    "metadata keys across the deployment)",
}


@contextmanager
def _write_faults() -> Iterator[None]:
    """The search backend failing a write (or its schema) is 503 knowledge_unavailable, saying when it is
    throttling (retry later) or refused the write (retrying will not help)."""
    try:
        yield
    except SourceFailure as exc:
        raise KnowledgeUnavailable(_WRITE_FAILURE_MESSAGES.get(exc.cause or exc.kind)) from None
