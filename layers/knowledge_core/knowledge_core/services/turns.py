"""Turns (A-TURN, SPEC §2.2): run creation or resumption, `knowledge_delivery` negotiation, the
inline startup retrieval, and idempotency by request hash.

Exactly-once per turn: the turn record is claimed first with a conditional put (`pending`), then the
run is created and the context assembled, then the response is stored (`done`). A duplicate that finds
`pending` polls briefly for the stored response; one that finds a different hash, or that another
principal claimed, gets `turn_conflict`. A stored response is returned again only after its knowledge is
re-checked for the caller as a read would (a document the caller may no longer read is left out)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..codec import identity_digest
from ..domain.errors import RunNotFound, RunNotReady, SourceFailure, TurnConflict, TurnInProgress
from ..domain.models import Principal, Run, citable, owns_run
from ..domain.router import plan_startup
from ..domain.scope import KnowledgeScope
from ..domain.text import cut_title
from ..domain.turn_wire import KnowledgeDelivery, KnowledgeItem, TurnContext, TurnRequest, TurnResponse
from ..domain.wire import SearchStatus
from ..ports import Clock, RunStore, TurnRecord, TurnStore
from .access import RunGuard, authorize_route
from .knowledge import KnowledgeService
from .scope import ScopeResolver

TURN_TTL_SECONDS = 2 * 86400  # records live >= 24 h; DynamoDB TTL deletion is lazy, reads check expiry
STARTUP_QUERY_MAX_CHARS = 2000  # same bound as a search query


def turn_key(route: str, principal: Principal, turn_id: str) -> str:
    """Turn ids are the host's: scope them to the caller's tenant, client and session (digested, ids may
    hold '#')."""
    parts = json.dumps(
        [principal.client_id, principal.session_id, turn_id, principal.tenant], separators=(",", ":")
    )
    digest = base64.urlsafe_b64encode(hashlib.sha256(parts.encode("utf-8")).digest()).rstrip(b"=").decode()
    return f"TURN#{route}#{digest}"


def turn_principal(principal: Principal) -> str:
    """Who a turn is for: everything of the principal that decides what it may read (subject,
    on_behalf_of, groups, tenant) beside the client and session the key holds, digested."""
    parts = json.dumps(
        [
            principal.client_id,
            principal.session_id,
            principal.subject,
            principal.on_behalf_of,
            sorted(set(principal.groups)),
            principal.tenant,
        ],
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(hashlib.sha256(parts.encode("utf-8")).digest()).rstrip(b"=").decode()


def same_principal(stored: str | None, caller: str) -> bool:
    """A turn record is the caller's when it binds the caller's principal; a record written before records
    bound one (None) may be anyone's of that client and session: its knowledge is re-checked on replay."""
    return stored is None or hmac.compare_digest(stored, caller)


class TurnService:
    def __init__(
        self,
        scopes: ScopeResolver,
        knowledge: KnowledgeService,
        runs: RunStore,
        run_guard: RunGuard,
        turns: TurnStore,
        clock: Clock,
        *,
        wait_seconds: float = 10.0,
        claim_lease_seconds: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._scopes = scopes
        self._knowledge = knowledge
        self._runs = runs
        self._run_guard = run_guard
        self._turns = turns
        self._clock = clock
        self._wait = wait_seconds
        self._lease = claim_lease_seconds
        self._sleep = sleep

    def start(self, principal: Principal, route: str, request: TurnRequest) -> TurnResponse:
        authorize_route(principal, route)
        scope = self._scopes.resolve(route)
        key = turn_key(route, principal, request.turn_id)
        return self._claim(principal, route, scope, request, key, uuid.uuid4().hex, request.request_hash())

    def _replay(
        self, principal: Principal, route: str, scope: KnowledgeScope, stored: dict[str, Any]
    ) -> TurnResponse:
        """The stored response again (A-TURN: no new run, no new retrieval), without any knowledge item or
        hint whose ref the caller could no longer read: same shape, only fewer items."""
        response = TurnResponse.model_validate(stored)
        delivery = response.knowledge_delivery
        hints = delivery.hints if delivery is not None else []
        refs = [i.ref for i in response.context.knowledge] + [
            h["ref"] for h in hints if isinstance(h.get("ref"), str)
        ]
        if not refs:
            return response
        readable = self._knowledge.readable_refs(principal, route, scope, response.run_id, refs)
        if readable.issuperset(refs):
            return response
        context = response.context.model_copy(
            update={
                "knowledge": [i for i in response.context.knowledge if i.ref in readable],
                "knowledge_refs": [r for r in response.context.knowledge_refs if r in readable],
            }
        )
        if delivery is not None:
            kept = [h for h in hints if not isinstance(h.get("ref"), str) or h["ref"] in readable]
            delivery = delivery.model_copy(update={"hints": kept})
        return response.model_copy(update={"context": context, "knowledge_delivery": delivery})

    # --- claim, or the same turn seen before -----------------------------------------------------------
    def _claim(
        self,
        principal: Principal,
        route: str,
        scope: KnowledgeScope,
        request: TurnRequest,
        key: str,
        claim: str,
        request_hash: str,
    ) -> TurnResponse:
        """Claim the turn and assemble it; if it was seen before: the stored response, a conflict, or
        (briefly) wait for the claimer."""
        deadline = time.monotonic() + self._wait
        pause = 0.02
        record: TurnRecord | None = None
        caller = turn_principal(principal)
        while True:
            now = self._clock.now()
            if record is None:  # not claimed yet, or the claimer failed and released the turn
                record = self._turns.claim_turn(
                    key, request_hash, claim, now, int(now) + TURN_TTL_SECONDS, principal=caller
                )
                if record is None:
                    return self._assemble(principal, route, scope, request, key, claim, None)
                continue
            if record.request_hash != request_hash:
                raise TurnConflict()
            if not same_principal(record.principal, caller):
                raise TurnConflict("turn_id was used by another principal")
            if record.state == "done" and record.response is not None:
                return self._replay(principal, route, scope, record.response)
            if now - record.claimed_at > self._lease and self._turns.take_over_turn(
                key, record.claim, claim, now
            ):
                # Its holder died: finish the turn, on the run it had already created if any.
                return self._assemble(principal, route, scope, request, key, claim, record.run_id)
            if time.monotonic() >= deadline:
                raise TurnInProgress()
            self._sleep(pause)
            pause = min(pause * 1.5, 0.25)
            record = self._turns.get_turn(key, self._clock.now())

    # --- the one assembly -------------------------------------------------------------------------------
    def _assemble(
        self,
        principal: Principal,
        route: str,
        scope: KnowledgeScope,
        request: TurnRequest,
        key: str,
        claim: str,
        orphan_run_id: str | None,
    ) -> TurnResponse:
        created: str | None = None
        try:
            if request.run_id is not None:
                run_id = self._resume(principal, route, request.run_id)
            elif orphan_run_id is not None:
                run_id = orphan_run_id
            else:
                run_id = created = str(uuid.uuid4())
                self._runs.create_run(
                    Run(
                        run_id=run_id,
                        session_id=principal.session_id,
                        client_id=principal.client_id,
                        route=route,
                        state="preparing",
                        turn_id=request.turn_id,
                        tenant=principal.tenant,
                    )
                )
                if not self._turns.set_turn_run(key, claim, run_id):
                    raise TurnInProgress()
            response = self._context(principal, route, scope, request, run_id)
            if self._runs.transition_run(run_id, ("preparing", "context_ready"), "context_ready") is None:
                raise RunNotReady()
            self._run_guard.forget(run_id)
            body = response.wire()
        except BaseException:
            self._turns.release_turn(key, claim)
            if created is not None:
                self._runs.transition_run(created, ("preparing",), "failed")
            raise
        if not self._turns.complete_turn(key, claim, body):
            # Our claim was taken over as stale meanwhile: the record's response is the turn's answer.
            stored = self._turns.get_turn(key, self._clock.now())
            if stored is not None and stored.state == "done" and stored.response is not None:
                return self._replay(principal, route, scope, stored.response)
        return response

    def _resume(self, principal: Principal, route: str, run_id: str) -> str:
        run = self._runs.get_run(run_id)
        if run is None or not owns_run(run, principal, route):
            raise RunNotFound()
        if run.state not in ("preparing", "context_ready"):
            raise RunNotReady()
        return run_id

    def _context(
        self, principal: Principal, route: str, scope: KnowledgeScope, request: TurnRequest, run_id: str
    ) -> TurnResponse:
        delivery: KnowledgeDelivery | None = None
        if request.mode == "on_demand":
            items: list[KnowledgeItem] = []
            status = self._delivery_status(scope)
            delivery = KnowledgeDelivery(knowledge_scope_revision=scope.revision, status=status)
        else:
            status, items = self._startup_knowledge(principal, route, scope, request.message, run_id)
        context = TurnContext(
            instructions=scope.agent.system_prompt,
            knowledge=items,
            knowledge_refs=[i.ref for i in items],
            knowledge_status=status,
        )
        return TurnResponse(
            turn_id=request.turn_id, run_id=run_id, context=context, knowledge_delivery=delivery
        )

    def _delivery_status(self, scope: KnowledgeScope) -> SearchStatus:
        if not scope.searchable():
            return "disabled"
        return "ok" if self._knowledge.backend_healthy() else "unavailable"

    def _startup_knowledge(
        self, principal: Principal, route: str, scope: KnowledgeScope, message: str, run_id: str
    ) -> tuple[SearchStatus, list[KnowledgeItem]]:
        """The agent's startup retrieval (R-MODE), bounded by `maxContextChars` of body characters in
        total and `sourceMaxChars` per source; every item's ref is bound to this run."""
        if not scope.searchable():
            return "disabled", []
        query = message[:STARTUP_QUERY_MAX_CHARS]
        planned = plan_startup(scope, query)
        if not planned:
            return "ok", []
        status, hits = self._knowledge.retrieve(scope, query, principal, planned)
        routing = scope.routing
        hits = hits[: routing.top_k]
        try:  # the bodies, in one read
            documents = self._knowledge.retrieval.documents(hits)
        except SourceFailure:
            return ("partial" if status == "ok" else status) if hits else status, []
        remaining = routing.max_context_chars
        per_source: dict[str, int] = {}
        identity = identity_digest(principal, route, run_id)
        items: list[KnowledgeItem] = []
        for hit in hits:
            allowance = min(remaining, routing.source_max_chars - per_source.get(hit.source_key, 0))
            if allowance <= 0:
                if remaining <= 0:
                    break
                continue
            doc = documents.get((hit.source_key, hit.doc_id))
            # The document may have changed since the hit: never pair a newer body with the hit's revision.
            if not citable(doc, hit.source_key, hit.revision, principal.viewer):
                continue
            assert doc is not None  # citable
            content = doc.body[:allowance]
            ref, _ = self._knowledge.mint_ref(hit, identity, scope.revision)
            items.append(
                KnowledgeItem(ref=ref, title=cut_title(doc.title), content=content, revision=doc.revision)
            )
            remaining -= len(content)
            per_source[hit.source_key] = per_source.get(hit.source_key, 0) + len(content)
        return status, items
