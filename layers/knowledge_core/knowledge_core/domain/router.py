"""Source selection (R-MODE, R-ROUTE): which sources of a scope a query goes to, and why.

Permission comes first and is never widened: every plan is drawn from `scope.searchable()` (the agent's
`allowedKnowledge`, published, active and enabled). Then routing: legacy / EAGER / rules / description
and tag matching, or the model's explicit `sources` (validated before any source is called). Leases
are checked only for the selected sources (legacy: every source, which is what it selects)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from .analyzer import content_terms
from .errors import ProtocolError, SourceDenied
from .models import TOOL_MODES, RoutingRule, Source
from .scope import KnowledgeScope


@dataclass(frozen=True)
class PlannedSource:
    source: Source
    reason: str  # rule | always | match | explicit | eager | legacy

    @property
    def key(self) -> str:
        return self.source.key


def plan_search(
    scope: KnowledgeScope, query: str, trusted_context: dict[str, str] | None = None
) -> list[PlannedSource]:
    """The sources a search for `query` goes to. Legacy: every searchable source; EAGER: the first
    `maxSources` by exact key; AUTO / ON_DEMAND: matched rules, then description/tag matches."""
    searchable = scope.searchable()
    routing = scope.routing
    if routing.mode is None:
        return [PlannedSource(s, "legacy") for s in searchable]
    if routing.mode == "EAGER":
        ordered = sorted(searchable, key=lambda s: s.key)[: routing.max_sources]
        return [PlannedSource(s, "eager") for s in ordered]
    return route(scope, query, trusted_context or {})[: routing.max_sources]


def plan_startup(
    scope: KnowledgeScope, query: str, trusted_context: dict[str, str] | None = None
) -> list[PlannedSource]:
    """Startup retrieval of a turn / agent start (R-MODE): legacy every allowed source, EAGER the first
    `maxSources` by exact key, AUTO the routed sources, ON_DEMAND none."""
    if scope.routing.mode == "ON_DEMAND":
        return []
    return plan_search(scope, query, trusted_context)


def plan_tool(
    scope: KnowledgeScope,
    query: str,
    trusted_context: dict[str, str] | None = None,
    sources: list[str] | None = None,
) -> list[PlannedSource]:
    """The sources of one model `knowledge_search` call (R-TOOL). Only AUTO and ON_DEMAND expose the tool
    (else ProtocolError). Explicit `sources` select exactly those keys, in the order given, and must be
    distinct exact keys of `allowedKnowledge` that are currently searchable (else SourceDenied); without
    them the rules route as in AUTO."""
    routing = scope.routing
    if routing.mode not in TOOL_MODES:
        raise ProtocolError(
            f"knowledge_search is not exposed for knowledge routing mode {routing.mode or 'legacy'}"
        )
    if sources is None:
        return route(scope, query, trusted_context or {})[: routing.max_sources]
    if len(set(sources)) != len(sources):
        raise SourceDenied("sources: duplicated knowledge source")
    allowed = set(scope.agent.allowed_keys)
    searchable = {s.key: s for s in scope.searchable()}
    for key in sources:
        if key not in allowed:
            raise SourceDenied(f"sources: {key} is not an allowed knowledge source of this agent")
        if key not in searchable:
            raise SourceDenied(f"sources: {key} is not currently available to this agent")
    if len(sources) > routing.max_sources:
        raise ProtocolError(f"sources: at most {routing.max_sources} sources per call")
    return [PlannedSource(searchable[key], "explicit") for key in sources]


def rule_matches(rule: RoutingRule, source: Source, query: str, context: dict[str, str]) -> str | None:
    """'always' / 'rule' when `rule` selects `source` for `query`, else None. Every configured condition
    group must hold; `always` stands in for terms and tags, never for the trusted context."""
    if any(context.get(k) != v for k, v in rule.context_equals.items()):
        return None
    if rule.always:
        return "always"
    lowered = query.lower()
    if rule.query_terms and not any(t.lower() in lowered for t in rule.query_terms):
        return None
    if rule.tags:
        source_tags = {t.lower() for t in source.definition.tags}
        if not any(t.lower() in source_tags and t.lower() in lowered for t in rule.tags):
            return None
    return "rule"


def routing_terms(text: str) -> set[str]:
    """English words and Chinese character bigrams of `text`, without function words (they would make every
    English description "match": there is no query-everything fallback)."""
    return set(content_terms(text))


def description_match(source: Source, query_terms: set[str]) -> int:
    """How many distinct query terms occur in the source's description or tags."""
    definition = source.definition
    return len(query_terms & routing_terms(definition.description + "\n" + "\n".join(definition.tags)))


def route(scope: KnowledgeScope, query: str, context: dict[str, str]) -> list[PlannedSource]:
    """Automatic routing (AUTO / ON_DEMAND): sources whose rule matched (priority desc, then exact key),
    then sources without a rule that match on description/tags (match count desc, then exact key).
    A source with a rule is chosen only by its rule; nothing matches -> nothing is queried."""
    by_key = {s.key: s for s in scope.searchable()}
    ruled: list[tuple[int, str, PlannedSource]] = []
    ruled_keys: set[str] = set()
    for rule in scope.routing.rules:
        ruled_keys.add(rule.knowledge.key)
        source = by_key.get(rule.knowledge.key)
        if source is None:
            continue
        reason = rule_matches(rule, source, query, context)
        if reason is not None:
            ruled.append((-rule.priority, source.key, PlannedSource(source, reason)))
    query_terms = routing_terms(query)
    matched: list[tuple[int, str, PlannedSource]] = []
    for key, source in by_key.items():
        if key in ruled_keys:
            continue
        overlap = description_match(source, query_terms)
        if overlap:
            matched.append((-overlap, key, PlannedSource(source, "match")))
    return [p for *_, p in sorted(ruled, key=lambda r: r[:2])] + [
        p for *_, p in sorted(matched, key=lambda r: r[:2])
    ]


def lease_expired(source: Source, now: float) -> bool:
    """A runtime lease that ended at or before `now` (no lease = nothing to expire)."""
    until = source.state.lease_until
    if until is None:
        return False
    try:
        return datetime.fromisoformat(until.replace("Z", "+00:00")).timestamp() <= now
    except ValueError:
        return True  # an unreadable lease is not a valid one


def leases_to_check(scope: KnowledgeScope, planned: Iterable[PlannedSource]) -> list[Source]:
    """Whose lease gates this call: the selected sources; legacy keeps checking every source."""
    if scope.routing.mode is None:
        return scope.searchable()
    return [p.source for p in planned]


def expired_leases(scope: KnowledgeScope, planned: list[PlannedSource], now: float) -> set[str]:
    """Keys of the sources whose expired lease makes them KNOWLEDGE_UNAVAILABLE for this call."""
    return {s.key for s in leases_to_check(scope, planned) if lease_expired(s, now)}
