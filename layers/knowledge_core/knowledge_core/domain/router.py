"""Source selection (R-MODE, R-ROUTE): which sources of a scope a query goes to, and why."""

from __future__ import annotations

from dataclasses import dataclass

from .analyzer import unique_terms
from .models import Source
from .scope import KnowledgeScope


@dataclass(frozen=True)
class PlannedSource:
    source: Source
    reason: str  # rule | always | match | explicit | eager | legacy

    @property
    def key(self) -> str:
        return self.source.key


def plan_search(scope: KnowledgeScope, query: str, trusted_context: dict[str, str] | None = None) -> list[PlannedSource]:
    """The sources a search for `query` goes to. Legacy: every searchable source; EAGER: the first
    `maxSources` by exact key; AUTO / ON_DEMAND: matched rules, then description/tag matches."""
    searchable = scope.searchable()
    routing = scope.routing
    if routing.mode is None:
        return [PlannedSource(s, "legacy") for s in searchable]
    if routing.mode == "EAGER":
        ordered = sorted(searchable, key=lambda s: s.key)[: routing.max_sources]
        return [PlannedSource(s, "eager") for s in ordered]
    return _route(scope, query, trusted_context or {})[: routing.max_sources]


def plan_startup(scope: KnowledgeScope, query: str,
                 trusted_context: dict[str, str] | None = None) -> list[PlannedSource]:
    """Startup retrieval of a turn / agent start (R-MODE): legacy every allowed source, EAGER the first
    `maxSources` by exact key, AUTO the routed sources, ON_DEMAND none."""
    if scope.routing.mode == "ON_DEMAND":
        return []
    return plan_search(scope, query, trusted_context)


def _route(scope: KnowledgeScope, query: str, context: dict[str, str]) -> list[PlannedSource]:
    lowered = query.lower()
    query_terms = set(unique_terms(query))
    by_key = {s.key: s for s in scope.searchable()}
    ruled: list[tuple[int, str, PlannedSource]] = []
    ruled_keys: set[str] = set()
    for rule in scope.routing.rules:
        source = by_key.get(rule.knowledge.key)
        if source is None:
            continue
        ruled_keys.add(source.key)
        if rule.context_equals and any(context.get(k) != v for k, v in rule.context_equals.items()):
            continue
        if rule.always:
            ruled.append((-rule.priority, source.key, PlannedSource(source, "always")))
            continue
        if not (rule.query_terms or rule.tags):
            ruled.append((-rule.priority, source.key, PlannedSource(source, "rule")))
            continue
        terms_ok = not rule.query_terms or any(t.lower() in lowered for t in rule.query_terms)
        tags_ok = not rule.tags or any(
            t in source.definition.tags and t.lower() in lowered for t in rule.tags)
        if terms_ok and tags_ok:
            ruled.append((-rule.priority, source.key, PlannedSource(source, "rule")))
    matched: list[tuple[int, str, PlannedSource]] = []
    for key, source in by_key.items():
        if key in ruled_keys:
            continue
        described = set(unique_terms(source.definition.description + " " + " ".join(source.definition.tags)))
        overlap = len(query_terms & described)
        if overlap:
            matched.append((-overlap, key, PlannedSource(source, "match")))
    return [p for *_, p in sorted(ruled, key=lambda r: r[:2])] + [p for *_, p in sorted(matched, key=lambda r: r[:2])]
