"""Resolving a workspace route to its knowledge scope, with a short per-process cache.

Agent and source definitions are immutable and cached for the process lifetime; the workspace pointer
and source switches are re-read after `ttl_seconds` (and at once after a write in this process)."""

from __future__ import annotations

import threading

from ..domain.errors import NotFound
from ..domain.models import AgentDefinition
from ..domain.scope import KnowledgeScope
from ..ports import Clock, Registry


class ScopeResolver:
    def __init__(self, registry: Registry, clock: Clock, ttl_seconds: float = 2.0) -> None:
        self._registry = registry
        self._clock = clock
        self._ttl = ttl_seconds
        self._scopes: dict[str, tuple[float, KnowledgeScope]] = {}
        self._agents: dict[str, AgentDefinition] = {}
        self._lock = threading.Lock()

    def resolve(self, route: str) -> KnowledgeScope:
        now = self._clock.now()
        cached = self._scopes.get(route)
        if cached and now - cached[0] < self._ttl:
            return cached[1]
        scope = self._load(route)
        with self._lock:
            self._scopes[route] = (now, scope)
        return scope

    def agent(self, key: str) -> AgentDefinition | None:
        agent = self._agents.get(key)
        if agent is None:
            agent = self._registry.get_agent(key)
            if agent is not None:
                self._agents[key] = agent
        return agent

    def _load(self, route: str) -> KnowledgeScope:
        agent_key = self._registry.get_workspace_agent(route)
        agent = self.agent(agent_key) if agent_key else None
        if agent is None:
            raise NotFound("workspace not found", field="route")
        return KnowledgeScope(
            route=route, agent=agent, sources=self._registry.get_sources(agent.allowed_keys)
        )

    def invalidate(self) -> None:
        with self._lock:
            self._scopes.clear()
