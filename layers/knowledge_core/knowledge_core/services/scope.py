"""Resolving a workspace route to its knowledge scope, with a short per-process cache.

Agent definitions are immutable and cached for the process lifetime; the workspace pointer and sources
(whose switches change) are re-read after `ttl_seconds` (and at once after a write in this process)."""

from __future__ import annotations

import threading

from ..domain.errors import WorkspaceNotFound
from ..domain.models import AgentDefinition, Source
from ..domain.scope import KnowledgeScope
from ..ports import Clock, Registry


class ScopeResolver:
    def __init__(self, registry: Registry, clock: Clock, ttl_seconds: float = 2.0) -> None:
        self._registry = registry
        self._clock = clock
        self._ttl = ttl_seconds
        self._scopes: dict[str, tuple[float, KnowledgeScope]] = {}
        self._agents: dict[str, AgentDefinition] = {}
        self._sources: dict[str, tuple[float, Source | None]] = {}
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

    def uncached_agents(self, keys: list[str]) -> list[str]:
        """The agent keys whose definitions this process has not seen yet."""
        return [k for k in dict.fromkeys(keys) if k not in self._agents]

    def remember_agents(self, agents: dict[str, AgentDefinition | None]) -> None:
        """Definitions someone read on the way (published versions never change)."""
        with self._lock:
            self._agents.update({k: a for k, a in agents.items() if a is not None})

    def sources(self, keys: list[str]) -> dict[str, Source | None]:
        """Sources by exact key, each re-read after `ttl_seconds`."""
        now = self._clock.now()
        found: dict[str, Source | None] = {}
        stale: list[str] = []
        for key in dict.fromkeys(keys):
            cached = self._sources.get(key)
            if cached is not None and now - cached[0] < self._ttl:
                found[key] = cached[1]
            else:
                stale.append(key)
        if stale:
            fresh = self._registry.get_sources(stale)
            found |= {k: fresh.get(k) for k in stale}
            with self._lock:
                self._sources.update({k: (now, found[k]) for k in stale})
        return found

    def _load(self, route: str) -> KnowledgeScope:
        agent_key = self._registry.get_workspace_agent(route)
        agent = self.agent(agent_key) if agent_key else None
        if agent is None:
            raise WorkspaceNotFound(route)
        return KnowledgeScope(
            route=route, agent=agent, sources=self._registry.get_sources(agent.allowed_keys)
        )

    def invalidate(self) -> None:
        with self._lock:
            self._scopes.clear()
            self._sources.clear()
