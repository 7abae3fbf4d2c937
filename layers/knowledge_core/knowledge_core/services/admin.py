"""Operations (SPEC §4): publishing sources and agents, workspaces, documents, switches, tokens, runs."""

from __future__ import annotations

import re

from ..domain.errors import InvalidRequest, NotFound
from ..domain.models import ROUTE_PATTERN, AgentDefinition, Document, SourceDefinition, SourceState
from ..ports import Registry, RunStore, SearchBackend
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
    ) -> None:
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
        self._backend.prepare()

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
        for key in {d.source_key for d in documents}:
            self._source_state(key)
        self._backend.put_documents(documents)

    def migrate_tenant(self, source_key: str, tenant: str, apply: bool) -> list[str]:
        """The documents of a source stored without a tenant (visible to no one); with `apply`, each is
        re-stored under `tenant` (same title and body, so the same revision: outstanding refs stay valid)."""
        self._source_state(source_key)
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
        if not self._backend.delete_document(source_key, doc_id):
            raise NotFound("document not found", field="doc_id")

    def set_document_status(self, source_key: str, doc_id: str, status: str) -> None:
        if status not in ("ready", "disabled"):
            raise InvalidRequest("status: must be ready or disabled", field="status")
        if not self._backend.set_document_status(source_key, doc_id, status):
            raise NotFound("document not found", field="doc_id")

    def end_run(self, run_id: str, state: str) -> None:
        if self._runs.transition_run(run_id, ("preparing", "context_ready"), state) is None:
            raise NotFound("run not found or already ended", field="run_id")
        self._run_guard.forget(run_id)
