"""An agent's `sourceFilters` at retrieval time (SPEC §3.1, §8): the document filter the server applies to
every retrieval of a source for that agent, bound to the runtime's trusted context, and combined with
whatever filter the request itself sent (`andAll`: each only narrows).

Which doors have a trusted context: the agent tool (`startup` and `knowledge_search`) takes it from the
invocation the runtime fills. Search, MCP and turns act for the workspace route's agent — the same agent,
so its sourceFilters apply there too — but no runtime stands behind them: they bind an empty context, and a
condition whose value names the trusted context matches nothing (fail closed: a door without the context
never sees more than the runtime would have allowed). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .filters import Filter, all_of, bind_context, matches

if TYPE_CHECKING:
    from .models import KnowledgeRouting


def source_filter(routing: KnowledgeRouting, key: str, context: Mapping[str, str]) -> Filter | None:
    """The agent's filter for source `key`, its `{"context": …}` values taken from `context`; None when
    the agent has none for that source."""
    for entry in routing.source_filters:
        if entry.knowledge.key == key:
            return bind_context(entry.filter, context)
    return None


def retrieval_filter(
    routing: KnowledgeRouting,
    key: str,
    context: Mapping[str, str],
    requested: Filter | None = None,
) -> Filter | None:
    """What one retrieval of source `key` is filtered by: the agent's source filter and the request's
    filter, both (`andAll`); None when neither narrows it."""
    return chain_filter([routing], key, context, requested)


def chain_filter(
    routings: Sequence[KnowledgeRouting],
    key: str,
    context: Mapping[str, str],
    requested: Filter | None = None,
) -> Filter | None:
    """What a retrieval of source `key` by the last agent of an invocation chain (root first) is filtered
    by: every agent's source filter for it, each bound to the invocation's trusted context, and the
    request's, all and-ed (R-CFG): like budgets, an ancestor's filters bind its sub-agents, which never
    see a document an ancestor's retrievals exclude. None when nothing narrows it."""
    return all_of([*(source_filter(r, key, context) for r in routings), requested])


def admits(routing: KnowledgeRouting, key: str, metadata: Mapping[str, Any] | None) -> bool:
    """Whether the agent's filter for source `key`, bound to no trusted context (a read by ref has no
    runtime behind it), admits a document with `metadata`: a document its retrievals exclude is not
    readable either. True when the agent has no filter for that source."""
    node = source_filter(routing, key, {})
    return node is None or matches(metadata, node)
