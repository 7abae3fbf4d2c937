"""The knowledge scope of a workspace and its revision (SPEC §1)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from .models import AgentDefinition, KnowledgeRouting, Source


@dataclass(frozen=True)
class KnowledgeScope:
    route: str
    agent: AgentDefinition
    sources: dict[str, Source | None]  # allowed key -> current source (None = not published)

    @cached_property
    def revision(self) -> str:
        """Computed when first asked (the agent tool path never needs it)."""
        return scope_revision(self.agent, self.sources)

    @property
    def routing(self) -> KnowledgeRouting:
        return self.agent.routing

    def searchable(self) -> list[Source]:
        """Sources in scope that are published, active and enabled, in allowedKnowledge order."""
        return [
            s
            for key in self.agent.allowed_keys
            if (s := self.sources.get(key)) is not None and s.state.enabled and s.state.status == "active"
        ]


def scope_revision(agent: AgentDefinition, sources: dict[str, Source | None]) -> str:
    """hex SHA-256 of the canonical JSON (sorted keys, no spaces) of the scope."""
    doc = {
        "agent": agent.key,
        "knowledgeRouting": agent.knowledge_routing.model_dump(mode="json", by_alias=True)
        if agent.knowledge_routing
        else None,
        "sources": [
            {
                "key": key,
                "definition": src.definition.model_dump(mode="json", by_alias=True) if src else None,
                "enabled": bool(src and src.state.enabled and src.state.status == "active"),
                "minScore": src.definition.min_score if src else None,
            }
            for key in agent.allowed_keys
            for src in [sources.get(key)]
        ],
    }
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
