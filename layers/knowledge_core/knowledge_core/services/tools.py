"""Cited retrieval, the agent tool (SPEC §3): `startup` and the model-callable `knowledge_search` — budgeted,
cited references (not the hint search of §2.3 that MCP's tool of the same name answers).

Order of one call: validate (mode, explicit sources) -> plan (R-ROUTE) -> open the invocation chain's
ledger -> leases and deadline of the selected sources -> charge every request to the whole chain in one
transaction (R-BUDGET) -> the one retrieval step (K-PIPE: query analysis, candidates, ranking, one batched
live check) -> failure policy (R-FAIL) -> fuse (R-FUSE) -> each reference's passage in its context where
the whole quote fits (one read of the passages around theirs; domain.citing) -> cut to sourceMaxChars and
the remaining chars, cite (ids unique per root) -> events (R-EVENT)."""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import replace
from datetime import UTC, datetime

from ..domain.budget import (
    ChainLink,
    CitationDraft,
    LedgerEntry,
    Limits,
    chain_mismatch,
    chars_remaining,
    cut_to_source_max,
    effective_chain,
    source_timeout,
)
from ..domain.citing import fitting_quotes, in_context
from ..domain.errors import (
    ProtocolError,
    SourceFailure,
    SourceTimeout,
    SourceUnavailable,
    StateUnavailable,
    ToolError,
    tool_error_for,
)
from ..domain.fusion import Fused, RankedList, content_fingerprint, fuse
from ..domain.models import AgentDefinition, Viewer
from ..domain.router import PlannedSource, expired_leases, plan_startup, plan_tool
from ..domain.scope import KnowledgeScope
from ..domain.source_filters import chain_filter
from ..domain.tool_wire import (
    CitationCreated,
    KnowledgeFused,
    KnowledgeId,
    KnowledgePlanned,
    KnowledgeRetrieved,
    PlannedSourceRef,
    Reference,
    ReferenceSource,
    SearchArguments,
    ToolEnvelope,
    ToolEvent,
    ToolResult,
    event_wire,
    failure,
    success,
)
from ..ports import BudgetLedger, ChainSnapshot, Clock, SearchBackend
from .retrieval import Retrieval, SourceAsk, SourceOutcome
from .scope import ScopeResolver

logger = logging.getLogger(__name__)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Events:
    """The R-EVENT record of one call, in order: each event stamped with the time and the invocation."""

    def __init__(self, clock: Clock, invocation_id: str) -> None:
        self._clock = clock
        self._invocation_id = invocation_id
        self.items: list[ToolEvent] = []

    def planned(self, planned: list[PlannedSource]) -> None:
        sources = [PlannedSourceRef(knowledge=p.key, reason=p.reason) for p in planned]
        self.items.append(KnowledgePlanned(**self._stamp(), sources=sources))

    def retrieved(self, retrieval_id: str, knowledge: str, status: str, count: int, ms: float) -> None:
        self.items.append(
            KnowledgeRetrieved(
                **self._stamp(),
                retrieval_id=retrieval_id,
                knowledge=knowledge,
                status=status,
                count=count,
                ms=ms,
            )
        )

    def fused(self, entry: LedgerEntry, count: int, rerank: str) -> None:
        """Budgets of this invocation as this call left them."""
        self.items.append(
            KnowledgeFused(
                **self._stamp(),
                count=count,
                rerank=rerank,
                retrievals_used=entry.retrievals,
                retrievals_remaining=entry.retrievals_remaining,
                chars_used=entry.chars,
                chars_remaining=entry.chars_remaining,
            )
        )

    def cited(self, citation_id: str, retrieval_id: str, knowledge_version: str, fusion_score: float) -> None:
        self.items.append(
            CitationCreated(
                **self._stamp(),
                citation_id=citation_id,
                retrieval_id=retrieval_id,
                knowledge_version=knowledge_version,
                fusion_score=fusion_score,
            )
        )

    def _stamp(self) -> dict[str, str]:
        return {"at": _iso(self._clock.now()), "invocation_id": self._invocation_id}


class ToolsService:
    def __init__(
        self,
        agents: ScopeResolver,
        backend: SearchBackend,
        ledger: BudgetLedger,
        clock: Clock,
        retrieval: Retrieval | None = None,
    ) -> None:
        self._agents = agents
        self._retrieval = retrieval or Retrieval(backend)
        self._ledger = ledger
        self._clock = clock

    # --- entry point ---------------------------------------------------------------------------------
    def call(self, envelope: ToolEnvelope) -> ToolResult:
        """References and events, or the typed error and the events so far."""
        events = Events(self._clock, envelope.invocation.invocation_id)
        try:
            result = success(self._run(envelope, events), events.items)
        except ToolError as error:
            result = failure(error, events.items)
        except StateUnavailable:
            # The ledger cannot be kept: nothing may be retrieved without it.
            result = failure(SourceUnavailable("knowledge budget ledger unavailable"), events.items)
        _log(envelope, result)
        return result

    # --- one call --------------------------------------------------------------------------------------
    def _agent(self, key: str) -> AgentDefinition:
        agent = self._agents.agent(key)
        if agent is None:
            raise ProtocolError(f"agent {key} is not published")
        return agent

    def _run(self, envelope: ToolEnvelope, events: Events) -> list[Reference]:
        inv = envelope.invocation
        now = self._clock.now()
        # One read for the chain's ledger entries and any agent definition this process has not seen.
        chain_ids = [a.invocation_id for a in inv.ancestors] + [inv.invocation_id]
        agent_keys = [a.agent for a in inv.ancestors] + [inv.agent]
        snapshot = self._ledger.open_chain(inv.root_id, chain_ids, self._agents.uncached_agents(agent_keys))
        self._agents.remember_agents(snapshot.agents)
        agent = self._agent(inv.agent)
        scope = KnowledgeScope(route="", agent=agent, sources=self._agents.sources(agent.allowed_keys))
        routing = scope.routing
        query = envelope.arguments.query
        if envelope.operation == "knowledge_search":
            sources = envelope.arguments.sources if isinstance(envelope.arguments, SearchArguments) else None
            planned = plan_tool(scope, query, inv.trusted_context, sources)
        else:
            planned = plan_startup(scope, query, inv.trusted_context)
        ancestors = [self._agent(a.agent) for a in inv.ancestors]
        links = [
            ChainLink(a.invocation_id, a.agent, Limits.of(d.routing))
            for a, d in zip(inv.ancestors, ancestors, strict=True)
        ]
        links.append(ChainLink(inv.invocation_id, agent.key, Limits.of(routing), inv.deadline_epoch))
        mismatch = chain_mismatch(links, snapshot.entries)
        if mismatch:
            raise ProtocolError(mismatch)
        chain = effective_chain(links, snapshot.entries)
        events.planned(planned)
        if not planned:
            events.fused(chain[-1], 0, routing.rerank)
            return []

        # Leases and the chain's deadline fail a source before it is asked or charged.
        expired = expired_leases(scope, planned, now)
        timeout = source_timeout(
            now, routing.source_timeout_seconds, [e.deadline for e in chain] + [inv.deadline_epoch]
        )
        retrieval_ids = {p.key: "ret-" + uuid.uuid4().hex[:16] for p in planned}
        failures: dict[str, ToolError] = {}
        for p in planned:
            if p.key in expired:
                failures[p.key] = SourceUnavailable(f"lease of {p.key} expired")
            elif timeout <= 0:
                failures[p.key] = SourceTimeout("the invocation deadline has passed")
        to_call = [p for p in planned if p.key not in failures]
        if failures and (routing.failure_policy == "FAIL_FAST" or not to_call):
            self._retrieved_failures(events, planned, failures, retrieval_ids)
            raise next(failures[p.key] for p in planned if p.key in failures)

        snapshot = self._ledger.charge_retrievals(snapshot, links, [p.key for p in to_call], now)
        viewer = Viewer(tenant=inv.tenant, subject=inv.subject, groups=inv.groups)
        # The sourceFilters of the agent and of every ancestor (as budgets), bound to the runtime's trusted
        # context (§3.1): never the model's input.
        context = inv.trusted_context
        routings = [d.routing for d in ancestors] + [routing]
        asks = [SourceAsk.of(p, None, chain_filter(routings, p.key, context)) for p in to_call]
        retrieved = self._retrieval.run(asks, self._retrieval.analyse(query), viewer, timeout)
        lists: list[RankedList] = []
        for p, outcome in zip(to_call, retrieved.outcomes, strict=True):
            if outcome.error is not None:
                failures[p.key] = tool_error_for(outcome.error)
            else:
                definition = p.source.definition
                lists.append(RankedList(p.key, outcome.hits, definition.top_k, definition.min_score))
        self._retrieved(events, planned, retrieved.outcomes, to_call, failures, retrieval_ids, lists)
        self._apply_policy(routing.failure_policy, planned, failures)

        fused = fuse(lists, query=query, top_k=routing.top_k, rerank=routing.rerank)
        fused = self._in_context(fused, routing.source_max_chars, chars_remaining(snapshot.chain()))
        references, snapshot = self._cite(
            snapshot, inv.invocation_id, fused, retrieval_ids, routing.source_max_chars, events, now
        )
        events.fused(snapshot.entries[inv.invocation_id], len(references), routing.rerank)
        return references

    def _in_context(self, fused: list[Fused], source_max_chars: int, remaining: int) -> list[Fused]:
        """Each fused reference quoting its passage in context (`domain.citing.in_context`) where the whole
        quote fits what is left to spend (`fitting_quotes`), the passages around theirs read in one batch
        (never the documents' bodies). When that read fails the references quote their passages alone:
        still the passages that matched, and the call does not fail."""
        if not fused:
            return fused
        hits = [f.candidate for f in fused]
        try:
            neighbours = self._retrieval.neighbour_passages(hits)
        except SourceFailure as exc:
            logger.warning("references quote their passages alone (%s)", exc.kind)
            return fused
        quoted = [in_context(h, neighbours.get((h.source_key, h.doc_id), [])) for h in hits]
        chosen = fitting_quotes(list(zip(hits, quoted, strict=True)), source_max_chars, remaining)
        return [replace(f, candidate=hit) for f, hit in zip(fused, chosen, strict=True)]

    @staticmethod
    def _apply_policy(policy: str, planned: list[PlannedSource], failures: dict[str, ToolError]) -> None:
        """R-FAIL: denials and protocol errors always end the call; FAIL_FAST ends it on any failure;
        SKIP_TRANSIENT skips timeouts, unavailability and throttling — unless no source answered at all,
        which is a failure, never "no results"."""
        ordered = [failures[p.key] for p in planned if p.key in failures]
        if not ordered:
            return
        fatal = [e for e in ordered if not e.transient]
        if fatal:
            raise fatal[0]
        if policy == "FAIL_FAST" or len(ordered) == len(planned):
            raise ordered[0]

    def _cite(
        self,
        snapshot: ChainSnapshot,
        invocation_id: str,
        fused: list[Fused],
        retrieval_ids: dict[str, str],
        source_max_chars: int,
        events: Events,
        now: float,
    ) -> tuple[list[Reference], ChainSnapshot]:
        by_source: dict[str, list[int]] = {}
        for i, item in enumerate(fused):
            by_source.setdefault(item.candidate.source_key, []).append(i)
        contents = [item.candidate.passage for item in fused]
        for indexes in by_source.values():
            for i, cut in zip(
                indexes, cut_to_source_max([contents[i] for i in indexes], source_max_chars), strict=True
            ):
                contents[i] = cut
        drafts: list[CitationDraft] = []
        cited: list[Fused] = []
        for item, content in zip(fused, contents, strict=True):
            if not content:
                continue
            cand = item.candidate
            fingerprint = hashlib.sha256(
                f"{cand.source_key}\0{cand.doc_id}\0{content_fingerprint(content)}".encode()
            ).hexdigest()
            drafts.append(
                CitationDraft(
                    fingerprint,
                    cand.source_key,
                    cand.doc_id,
                    content,
                    retrieval_ids[cand.source_key],
                    invocation_id,
                )
            )
            cited.append(item)
        references: list[Reference] = []
        citations, snapshot = self._ledger.record_citations(snapshot, drafts, now)
        for item, citation in zip(cited, citations, strict=True):
            if citation is None:
                continue  # no chars left: no new citation
            cand = item.candidate
            knowledge_id, _, version = cand.source_key.partition("@")
            fusion_score = round(item.fusion_score, 6)
            source = ReferenceSource(
                title=cand.title,
                doc_id=cand.doc_id,
                revision=cand.revision,
                structured=cand.structured_source,
            )
            references.append(
                Reference(
                    citation_id=citation.citation_id,
                    knowledge=KnowledgeId(id=knowledge_id, version=version),
                    content=citation.content,
                    source=source,
                    fusion_score=fusion_score,
                    score=round(cand.score, 6),
                )
            )
            if citation.created:
                events.cited(citation.citation_id, citation.retrieval_id, citation.knowledge, fusion_score)
        return references, snapshot

    # --- events ------------------------------------------------------------------------------------------
    @staticmethod
    def _retrieved_failures(
        events: Events,
        planned: list[PlannedSource],
        failures: dict[str, ToolError],
        retrieval_ids: dict[str, str],
    ) -> None:
        for p in planned:
            if p.key in failures:
                events.retrieved(retrieval_ids[p.key], p.key, failures[p.key].code, 0, 0.0)

    @staticmethod
    def _retrieved(
        events: Events,
        planned: list[PlannedSource],
        results: list[SourceOutcome],
        to_call: list[PlannedSource],
        failures: dict[str, ToolError],
        retrieval_ids: dict[str, str],
        lists: list[RankedList],
    ) -> None:
        answered = {p.key: r for p, r in zip(to_call, results, strict=True)}
        counts = {ranked.source_key: len(ranked.candidates) for ranked in lists}
        for p in planned:
            result = answered.get(p.key)
            if p.key in failures:
                status, count = failures[p.key].code, 0
            else:
                count = counts.get(p.key, 0)
                status = "OK" if count else "EMPTY"
            events.retrieved(
                retrieval_ids[p.key], p.key, status, count, round(result.ms, 3) if result else 0.0
            )


def _log(envelope: ToolEnvelope, result: ToolResult) -> None:
    from ..observability import logger

    inv = envelope.invocation
    for event in result.events:
        logger.info(
            event.type,
            extra={
                "knowledge_event": event_wire(event),
                "operation": envelope.operation,
                "agent": inv.agent,
                "root_invocation": inv.root_id,
            },
        )
    if result.error is not None:
        logger.info(
            "knowledge tool refused",
            extra={
                "code": result.error.code,
                "operation": envelope.operation,
                "agent": inv.agent,
                "invocation_id": inv.invocation_id,
            },
        )
