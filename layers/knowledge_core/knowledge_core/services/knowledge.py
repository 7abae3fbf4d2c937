"""The agent knowledge API (SPEC §2): capabilities, bounded search hints, and paginated reads by ref."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from ..codec import RefClaims, TokenCodec, identity_digest
from ..domain.analyzer import unique_terms
from ..domain.errors import (
    KnowledgeChanged,
    KnowledgeUnavailable,
    ReferenceInvalid,
    ScopeChanged,
    SourceFailure,
)
from ..domain.filters import Filter
from ..domain.fusion import Hit
from ..domain.models import Document, DocumentState, Principal, Viewer, citable
from ..domain.passages import page_label
from ..domain.router import PlannedSource, expired_leases, plan_search
from ..domain.scope import KnowledgeScope
from ..domain.source_filters import admits, retrieval_filter
from ..domain.summary import focused_excerpt
from ..domain.text import cut_title, escaped_size, fit_bytes, fit_text, json_size
from ..domain.wire import (
    LIMITS,
    CapabilitiesResponse,
    Extensions,
    Hint,
    ReadRequest,
    ReadResponse,
    SearchRequest,
    SearchResponse,
    SearchStatus,
    to_wire,
)
from ..ports import Clock, SearchBackend
from .access import RunGuard, authorize_route
from .retrieval import Retrieval, Retrieved, SourceAsk
from .scope import ScopeResolver

# A summary's bytes (UTF-8): 320 CJK characters, about three times that in English. With
# three hints the response's 4096 bytes leave less: each hint's summary gets its share (`_summary_budget`).
SUMMARY_MAX_BYTES = 960
MIN_SUMMARY_BYTES = 120
HEALTH_CACHE_SECONDS = 10.0
MAX_RANK_DEPTH = 1000


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KnowledgeService:
    def __init__(
        self,
        scopes: ScopeResolver,
        backend: SearchBackend,
        codec: TokenCodec,
        runs: RunGuard,
        clock: Clock,
        retrieval: Retrieval | None = None,
    ) -> None:
        self._scopes = scopes
        self._backend = backend
        self.retrieval = retrieval or Retrieval(backend)
        self._codec = codec
        self._runs = runs
        self._clock = clock
        self._health: tuple[float, bool] | None = None
        self._health_lock = threading.Lock()

    def _enter(self, principal: Principal, route: str, run_id: str | None) -> KnowledgeScope:
        """Identity and route first, then the workspace, then the run."""
        authorize_route(principal, route)
        scope = self._scopes.resolve(route)
        self._runs.check(principal, route, run_id)
        return scope

    # --- A-CAP --------------------------------------------------------------------------------------
    def backend_healthy(self) -> bool:
        """Health probe (<= 1 s), cached for 10 s."""
        now = self._clock.now()
        cached = self._health
        if cached and now - cached[0] < HEALTH_CACHE_SECONDS:
            return cached[1]
        with self._health_lock:
            healthy = self._backend.healthy(timeout_s=1.0)
            self._health = (now, healthy)
        return healthy

    def capabilities(self, principal: Principal, route: str) -> CapabilitiesResponse:
        scope = self._enter(principal, route, None)
        enabled = bool(scope.searchable()) and self.backend_healthy()
        extensions = Extensions(ranking=self.retrieval.ranking_state())
        return CapabilitiesResponse(
            route=route, enabled=enabled, knowledge_scope_revision=scope.revision, extensions=extensions
        )

    # --- A-SEARCH -----------------------------------------------------------------------------------
    def search(self, principal: Principal, route: str, request: SearchRequest) -> SearchResponse:
        scope = self._enter(principal, route, request.run_id)
        response = SearchResponse(
            route=route,
            run_id=request.run_id,
            knowledge_scope_revision=scope.revision,
            status="ok",
            hints=[],
            truncated=False,
        )
        if not scope.searchable():
            response.status = "disabled"
            return response
        response.status, hits = self._ranked_hits(scope, request.query, principal, None, request.filter)
        identity = identity_digest(principal, route, request.run_id)
        query_terms = unique_terms(request.query)
        shown = hits[: request.limit]
        hints = [self._hint(h, identity, scope.revision) for h in shown]
        budget = _summary_budget(response, hints)
        hints = [_summarised(hint, hit, query_terms, budget) for hint, hit in zip(hints, shown, strict=True)]
        # A summary held to its share of the bytes was shortened to fit: `truncated` says so (§2.3).
        shortened = budget < SUMMARY_MAX_BYTES and any(
            escaped_size(_summarised(h, hit, query_terms, SUMMARY_MAX_BYTES).summary) > budget
            for h, hit in zip(hints, shown, strict=True)
        )
        response.hints, response.truncated = _fit_hints(response, hints)
        response.truncated = response.truncated or shortened
        return response

    def rank(
        self, principal: Principal, route: str, query: str, depth: int, *, cut: bool = True
    ) -> list[tuple[str, str, float]]:
        """The evaluation door (`kb eval`; not exposed over HTTP): exactly what `search` runs — the same
        planning, retrieval step and merge — but the top-`depth` (source_key, doc_id, score) instead of at
        most 3 bounded hints. Depth is the only difference — and `cut=False`, which measures the ranking
        without the relevance cut (`domain.relevance`: deep metrics such as nDCG@10 and R@100)."""
        if not 1 <= depth <= MAX_RANK_DEPTH:
            raise ValueError(f"depth must be 1..{MAX_RANK_DEPTH}")
        scope = self._enter(principal, route, None)
        if not scope.searchable():
            return []
        status, hits = self._retrieve(
            scope, query, principal, depth, plan_search(scope, query), cut=cut, cite=False
        )
        if status != "ok":
            # A measurement must not count a failing source as "no results".
            raise KnowledgeUnavailable()
        return [(h.source_key, h.doc_id, h.score) for h in hits[:depth]]

    def retrieve(
        self, scope: KnowledgeScope, query: str, principal: Principal, planned: list[PlannedSource]
    ) -> tuple[SearchStatus, list[Hit]]:
        """(status, merged hits) over sources someone else planned: a turn's startup retrieval (R-MODE)."""
        return self._retrieve(scope, query, principal, depth=None, planned=planned)

    def mint_ref(self, hit: Hit, identity: str, scope_revision: str) -> tuple[str, int]:
        """A signed ref (and its expiry) for a hit's parent document, bound to `identity` (A-REF)."""
        return self._codec.issue_ref(
            identity=identity,
            scope_revision=scope_revision,
            source_key=hit.source_key,
            doc_id=hit.doc_id,
            revision=hit.revision,
            version=hit.version,
        )

    def _ranked_hits(
        self,
        scope: KnowledgeScope,
        query: str,
        principal: Principal,
        depth: int | None,
        filter_: Filter | None = None,
    ) -> tuple[SearchStatus, list[Hit]]:
        return self._retrieve(scope, query, principal, depth, plan_search(scope, query), filter_)

    def _retrieve(
        self,
        scope: KnowledgeScope,
        query: str,
        principal: Principal,
        depth: int | None,
        planned: list[PlannedSource],
        filter_: Filter | None = None,
        cut: bool = True,
        cite: bool = True,
    ) -> tuple[SearchStatus, list[Hit]]:
        """(status, hits merged by raw score): each planned source asked for its `topK`
        (or `depth`) documents among those `filter_` admits (§8) through the one retrieval step (K-PIPE);
        `cite` off: the hits' passages are not chosen (the evaluation door's ranking shows none)."""
        if not planned:
            return "ok", []
        # An expired runtime lease makes a source unavailable without querying it (R-ROUTE).
        expired = expired_leases(scope, planned, self._clock.now())
        to_call = [p for p in planned if p.key not in expired]
        retrieved = (
            self.retrieval.run(
                # The route's agent's sourceFilters and the request's filter, and-ed; no runtime stands
                # behind this door, so no trusted context (§3.1: a context-bound condition matches nothing).
                [
                    SourceAsk.of(p, depth, retrieval_filter(scope.routing, p.key, {}, filter_), cut, cite)
                    for p in to_call
                ],
                self.retrieval.analyse(query),
                principal.viewer,
                float(scope.routing.source_timeout_seconds),
            )
            if to_call
            else Retrieved([])
        )
        failed = len(expired) + sum(1 for o in retrieved.outcomes if o.error is not None)
        status: SearchStatus = "unavailable" if failed == len(planned) else "partial" if failed else "ok"
        # Several sources merge by raw score; ties break on source key, then keep the source's own order
        # (K-PIPE: one source answers every door in the same order).
        ranked = [(h, i) for o in retrieved.outcomes for i, h in enumerate(o.hits)]
        hits = [h for h, _ in sorted(ranked, key=lambda p: (-p[0].score, p[0].source_key, p[1]))]
        return status, hits

    def _hint(self, hit: Hit, identity: str, scope_revision: str) -> Hint:
        """The hint of `hit` without its summary (`_summarised` adds it within its share of the bytes)."""
        ref, expires_at = self.mint_ref(hit, identity, scope_revision)
        return Hint(
            ref=ref,
            title=cut_title(hit.title),
            summary="",
            revision=hit.revision,
            score=round(hit.score, 6),
            expires_at=iso(expires_at),
        )

    # --- A-READ -------------------------------------------------------------------------------------
    def read(self, principal: Principal, route: str, request: ReadRequest) -> ReadResponse:
        scope = self._enter(principal, route, request.run_id)
        claims = self._codec.open_ref(request.ref, identity=identity_digest(principal, route, request.run_id))
        offset = 0
        if request.cursor is not None:
            offset = self._codec.open_cursor(request.cursor, ref=request.ref).offset
        if not self._codec.scope_matches(claims, scope.revision):
            raise ScopeChanged()
        if claims.source_key not in {s.key for s in scope.searchable()}:
            raise KnowledgeChanged()
        try:
            doc = self._backend.get_document(claims.source_key, claims.doc_id)
        except SourceFailure:
            raise KnowledgeUnavailable() from None
        if not readable_by_ref(doc, claims, scope, principal.viewer):
            raise KnowledgeChanged()
        assert doc is not None  # readable
        return self._page(
            scope,
            route,
            request,
            doc.title,
            doc.revision,
            doc.body.encode("utf-8"),
            offset,
            claims.expires_at,
        )

    def readable_refs(
        self, principal: Principal, route: str, scope: KnowledgeScope, run_id: str | None, refs: list[str]
    ) -> set[str]:
        """Those of `refs` (issued to `principal` on `route` for `run_id`) whose document a read would still
        serve the principal now — its source searchable in `scope` and `readable_by_ref` — expiry aside:
        the re-check of a stored answer that carries them (a turn's replay). One batched document read;
        a ref that does not open for this principal is not readable. Raises KnowledgeUnavailable when the
        documents cannot be read."""
        identity = identity_digest(principal, route, run_id)
        searchable = {s.key for s in scope.searchable()}
        opened: dict[str, RefClaims] = {}
        for ref in dict.fromkeys(refs):
            try:
                claims = self._codec.ref_claims(ref, identity=identity)
            except ReferenceInvalid:
                continue
            if claims.source_key in searchable:
                opened[ref] = claims
        if not opened:
            return set()
        keys = list(dict.fromkeys((c.source_key, c.doc_id) for c in opened.values()))
        try:
            states = self._backend.document_states(keys)
        except SourceFailure:
            raise KnowledgeUnavailable() from None
        viewer = principal.viewer
        return {
            ref
            for ref, c in opened.items()
            if readable_by_ref(states.get((c.source_key, c.doc_id)), c, scope, viewer)
        }

    def _page(
        self,
        scope: KnowledgeScope,
        route: str,
        request: ReadRequest,
        title: str,
        revision: str,
        body: bytes,
        offset: int,
        expires_at: int,
    ) -> ReadResponse:
        chain_end = min(len(body), LIMITS.read_chain_max_bytes)
        # The chain limit may fall inside a code point: the chain then ends before it.
        while chain_end < len(body) and (body[chain_end] & 0xC0) == 0x80:
            chain_end -= 1
        if offset > chain_end or (offset < len(body) and (body[offset] & 0xC0) == 0x80):
            raise ReferenceInvalid("cursor is invalid")
        page = ReadResponse(
            route=route,
            run_id=request.run_id,
            knowledge_scope_revision=scope.revision,
            ref=request.ref,
            revision=revision,
            title=cut_title(title),
            content="",
            next_cursor=self._codec.issue_cursor(ref=request.ref, offset=chain_end, expires_at=expires_at),
            truncated=False,
            budget_exhausted=False,
            total_content_bytes=len(body),
        )
        # The envelope is measured with its longest cursor and flags, so the content gets the rest.
        budget = request.max_bytes - json_size(to_wire(page))
        end = fit_bytes(body[:chain_end], offset, budget)
        page.content = body[offset:end].decode("utf-8")
        if end < chain_end:
            page.next_cursor = self._codec.issue_cursor(ref=request.ref, offset=end, expires_at=expires_at)
            page.truncated = True
        else:
            page.next_cursor = None
            page.truncated = page.budget_exhausted = chain_end < len(body)
        return page


def readable_by_ref(
    doc: Document | DocumentState | None, claims: RefClaims, scope: KnowledgeScope, viewer: Viewer
) -> bool:
    """What a read by ref re-checks of its document (A-REF): still citable to the viewer (that source,
    ready, ACL, the ref's revision), the stored version the ref bound (ACL, structured source, metadata:
    SPEC §1), and admitted by the route agent's `sourceFilters` (a document its retrievals exclude)."""
    return (
        citable(doc, claims.source_key, claims.revision, viewer)
        and doc is not None
        and (claims.version is None or doc.version == claims.version)
        and admits(scope.routing, claims.source_key, doc.metadata)
    )


def _summary_budget(response: SearchResponse, hints: list[Hint]) -> int:
    """Each summary's bytes: its share of what the response leaves (hints without summaries, `truncated`
    true), at most SUMMARY_MAX_BYTES, so a focused window is chosen to fit instead of cut afterwards."""
    if not hints:
        return SUMMARY_MAX_BYTES
    response.hints, response.truncated = hints, True
    room = LIMITS.search_max_bytes - json_size(to_wire(response))
    return max(0, min(SUMMARY_MAX_BYTES, room // len(hints)))


def _summarised(hint: Hint, hit: Hit, query_terms: list[str], budget: int) -> Hint:
    """`hint` with its summary: the passage's best sentence window (domain.summary) in `budget` bytes; a
    passage of a paged document (PDF) says where it is first ("p. 12: …")."""
    page = page_label(hit.structured_source)
    prefix = f"{page}: " if page else ""
    room = budget - len(prefix.encode("utf-8"))
    summary = prefix + focused_excerpt(hit.passage, query_terms, room) if room > 0 else ""
    return hint.model_copy(update={"summary": summary})


def _fit_hints(response: SearchResponse, hints: list[Hint]) -> tuple[list[Hint], bool]:
    """Keep the response <= search_max_bytes: shorten summaries (never below MIN_SUMMARY_BYTES while a
    hint can be dropped instead), then drop hints from the end."""
    limit = LIMITS.search_max_bytes
    for count in range(len(hints), 0, -1):
        kept = hints[:count]
        # Measured with `truncated: false`, the longer spelling, so the final flag never overflows.
        response.hints, response.truncated = [h.model_copy(update={"summary": ""}) for h in kept], False
        room = limit - json_size(to_wire(response))
        if room < 0 or (count > 1 and room < MIN_SUMMARY_BYTES * count):
            continue
        sizes = [escaped_size(h.summary) for h in kept]
        if sum(sizes) <= room:
            return kept, count < len(hints)
        budgets = [0] * count
        for n, i in enumerate(sorted(range(count), key=sizes.__getitem__)):
            budgets[i] = min(sizes[i], room // (count - n))
            room -= budgets[i]
        return [
            h.model_copy(update={"summary": fit_text(h.summary, b)})
            for h, b in zip(kept, budgets, strict=True)
        ], True
    return [], bool(hints)
