"""Host client for bailing.agent-knowledge.v1: negotiation, turns, and the search/read model tools.

What it guarantees a host:
- negotiation: 404/405/501 from an older core = protocol not supported, keep `inline` turns; 401/403,
  5xx, a missing response or an unknown schema raise — never a silent success;
- turns are retried with the identical body (same `turn_id`) when a response is lost, so the server
  answers the stored response and no second run exists;
- reads page with the returned cursor only (a cursor the server did not give for that ref is refused);
- caches are per (account, route, turn, scope revision): a new turn, other credentials or a scope
  change start a new generation, and a response that arrives for an older generation is discarded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from .tools import READ_TOOL, SEARCH_TOOL, tool_definitions, validate_arguments
from .transport import HttpResponse, Transport, TransportError, UrllibTransport

PROTOCOL = "bailing.agent-knowledge.v1"
CAPABILITIES_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
SEARCH_SCHEMA = "bailing.agent-knowledge-search.v1"
READ_SCHEMA = "bailing.agent-knowledge-read.v1"
TURN_SCHEMA = "bailing.agent-turn.v1"
DELIVERY_SCHEMA = "bailing.agent-knowledge-delivery.v1"
LEGACY_STATUSES = frozenset({404, 405, 501})
# Server answers after which the model must search again; the client drops that generation's caches.
SCOPE_CODES = frozenset({"knowledge_scope_changed"})
RESEARCH_CODES = frozenset({"knowledge_scope_changed", "knowledge_changed", "knowledge_reference_expired"})


class KnowledgeClientError(Exception):
    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class NegotiationError(KnowledgeClientError):
    """Capabilities could not be established (auth, server error, no response, unknown schema)."""


class ProtocolError(KnowledgeClientError):
    """The server answered something this client does not understand."""


class ApiError(KnowledgeClientError):
    """The server refused a request with `{"error": {"code", "message"}}`."""


class StaleResponse(KnowledgeClientError):
    """A response arrived for a superseded turn, account, route or scope; it was discarded."""


class NoActiveTurn(KnowledgeClientError):
    """search/read need a current turn (its run scopes every ref)."""


@dataclass(frozen=True)
class Capabilities:
    supported: bool
    enabled: bool = False
    route: str | None = None
    knowledge_scope_revision: str | None = None
    delivery_modes: tuple[str, ...] = ("inline",)
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def on_demand(self) -> bool:
        return self.supported and "on_demand" in self.delivery_modes


@dataclass(frozen=True)
class Turn:
    turn_id: str
    run_id: str
    mode: Literal["inline", "on_demand"]
    instructions: str
    knowledge: list[dict[str, Any]]
    knowledge_refs: list[str]
    status: str  # knowledge_delivery.status (on_demand) or context.knowledge_status (inline)
    knowledge_scope_revision: str | None
    raw: dict[str, Any]


@dataclass
class _Generation:
    """Everything cached for one (account, route, turn, scope revision); replaced, never mutated across."""

    number: int
    account: str
    route: str
    turn: Turn | None = None
    scope_revision: str | None = None
    searches: dict[tuple, dict] = field(default_factory=dict)
    pages: dict[tuple, dict] = field(default_factory=dict)
    cursors: dict[str, set[str]] = field(default_factory=dict)  # ref -> cursors the server issued for it


def _account_label(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


class KnowledgeClient:
    def __init__(
        self,
        endpoint: str,
        route: str,
        token: str,
        *,
        account: str | None = None,
        transport: Transport | None = None,
        timeout: float = 30.0,
        read_max_bytes: int = 16384,
        turn_attempts: int = 4,
        retry_pause: float = 0.2,
    ) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._transport = transport or UrllibTransport()
        self._timeout = timeout
        self._read_max_bytes = read_max_bytes
        self._turn_attempts = turn_attempts
        self._retry_pause = retry_pause
        self._lock = threading.RLock()
        self._counter = 0
        self._token = token
        self._caps: Capabilities | None = None
        self._gen = self._new_generation(account or _account_label(token), route)

    # --- identity and generations ---------------------------------------------------------------
    def _new_generation(self, account: str, route: str, **kwargs: Any) -> _Generation:
        self._counter += 1
        return _Generation(self._counter, account, route, **kwargs)

    @property
    def route(self) -> str:
        return self._gen.route

    @property
    def current_turn(self) -> Turn | None:
        return self._gen.turn

    def set_credentials(self, token: str, *, account: str | None = None, route: str | None = None) -> None:
        """Another account, authorization or route: nothing cached or in flight carries over."""
        with self._lock:
            self._token = token
            self._caps = None
            self._gen = self._new_generation(account or _account_label(token), route or self._gen.route)

    def _advance(self, gen: _Generation, scope_revision: str) -> _Generation:
        """A new scope revision from the server: keep the turn, drop everything cached under the old one."""
        with self._lock:
            self._check_current(gen)
            self._gen = self._new_generation(
                gen.account, gen.route, turn=gen.turn, scope_revision=scope_revision
            )
            return self._gen

    def _check_current(self, gen: _Generation) -> None:
        if self._gen is not gen:
            raise StaleResponse("response discarded: the turn, account, route or scope changed meanwhile")

    # --- HTTP -----------------------------------------------------------------------------------
    def _path(self, route: str, tail: str) -> str:
        return f"{self._endpoint}/agent-api/v1/workspaces/{quote(route, safe='')}/{tail}"

    def _send(self, method: str, url: str, body: dict | None) -> HttpResponse:
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return self._transport(method, url, headers, data, self._timeout)

    @staticmethod
    def _json(resp: HttpResponse) -> Any:
        try:
            return json.loads(resp.body or b"null")
        except ValueError:
            return None

    @classmethod
    def _error(cls, resp: HttpResponse) -> ApiError:
        payload = cls._json(resp)
        err = payload.get("error") if isinstance(payload, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        message = err.get("message") if isinstance(err, dict) else None
        return ApiError(
            f"HTTP {resp.status}: {code or 'error'}: {message or ''}".rstrip(": "),
            status=resp.status,
            code=code,
        )

    # --- negotiation ----------------------------------------------------------------------------
    def negotiate(self, *, refresh: bool = False) -> Capabilities:
        with self._lock:
            if self._caps is not None and not refresh:
                return self._caps
            gen = self._gen
        try:
            resp = self._send("GET", self._path(gen.route, "knowledge/capabilities"), None)
        except TransportError as exc:
            raise NegotiationError(f"capabilities: {exc}") from None
        if resp.status in LEGACY_STATUSES:
            caps = Capabilities(supported=False, route=gen.route)
        elif resp.status != 200:
            error = self._error(resp)
            raise NegotiationError(f"capabilities: {error}", status=resp.status, code=error.code)
        else:
            payload = self._json(resp)
            if (
                not isinstance(payload, dict)
                or payload.get("schema") != CAPABILITIES_SCHEMA
                or payload.get("protocol") != PROTOCOL
                or payload.get("supported") is not True
            ):
                raise NegotiationError("capabilities: unknown schema or protocol", status=resp.status)
            caps = Capabilities(
                supported=True,
                enabled=payload.get("enabled") is True,
                route=payload.get("route"),
                knowledge_scope_revision=payload.get("knowledge_scope_revision"),
                delivery_modes=tuple(payload.get("delivery_modes") or ()),
                limits=dict(payload.get("limits") or {}),
            )
        with self._lock:
            self._check_current(gen)
            self._caps = caps
        return caps

    # --- turns ----------------------------------------------------------------------------------
    def start_turn(
        self, message: str, *, on_demand: bool = True, turn_id: str | None = None, run_id: str | None = None
    ) -> Turn:
        """Start (or, with `run_id`, continue) a run. `on_demand` is asked for only when negotiated;
        a lost response is retried with the identical body."""
        caps = self.negotiate()
        mode: Literal["inline", "on_demand"] = "on_demand" if on_demand and caps.on_demand else "inline"
        body: dict[str, Any] = {"turn_id": turn_id or str(uuid.uuid4()), "message": message}
        if run_id is not None:
            body["run_id"] = run_id
        if mode == "on_demand":
            body["knowledge_delivery"] = "on_demand"
        with self._lock:
            # A new turn supersedes the previous one at once: its in-flight responses are now late.
            gen = self._gen = self._new_generation(self._gen.account, self._gen.route)
        payload = self._post_turn(gen, body)
        turn = self._turn_from(payload, body, mode, caps)
        with self._lock:
            self._check_current(gen)
            gen.turn = turn
            gen.scope_revision = turn.knowledge_scope_revision
        return turn

    def _post_turn(self, gen: _Generation, body: dict) -> dict:
        url = self._path(gen.route, "turns")
        last: Exception | None = None
        for attempt in range(self._turn_attempts):
            if attempt:
                time.sleep(self._retry_pause * attempt)
            try:
                resp = self._send("POST", url, body)
            except TransportError as exc:
                last = exc
                continue
            if resp.status == 409 and self._error(resp).code == "turn_in_progress":
                last = self._error(resp)
                continue
            if resp.status >= 500 and resp.status != 501:
                last = self._error(resp)
                continue
            if resp.status != 200:
                raise self._error(resp)
            payload = self._json(resp)
            if not isinstance(payload, dict):
                raise ProtocolError("turn: response is not a JSON object", status=resp.status)
            return payload
        raise KnowledgeClientError(
            f"turn {body['turn_id']}: no response after {self._turn_attempts} attempts: {last}"
        )

    @staticmethod
    def _turn_from(
        payload: dict, body: dict, mode: Literal["inline", "on_demand"], caps: Capabilities
    ) -> Turn:
        context = payload.get("context")
        if (
            payload.get("schema") != TURN_SCHEMA
            or payload.get("turn_id") != body["turn_id"]
            or payload.get("run_state") != "context_ready"
            or not isinstance(payload.get("run_id"), str)
            or not isinstance(context, dict)
        ):
            raise ProtocolError("turn: unknown response schema")
        delivery = payload.get("knowledge_delivery")
        if mode == "on_demand":
            # Assemble by the echoed mode, never by guessing from empty arrays.
            if (
                not isinstance(delivery, dict)
                or delivery.get("schema_version") != DELIVERY_SCHEMA
                or delivery.get("mode") != "on_demand"
                or delivery.get("protocol") != PROTOCOL
            ):
                raise ProtocolError("turn: on_demand was asked for but not echoed")
            status = str(delivery.get("status"))
            scope_revision = delivery.get("knowledge_scope_revision")
        else:
            status = str(context.get("knowledge_status", "ok"))
            scope_revision = caps.knowledge_scope_revision
        return Turn(
            turn_id=payload["turn_id"],
            run_id=payload["run_id"],
            mode=mode,
            instructions=str(context.get("instructions", "")),
            knowledge=list(context.get("knowledge") or []),
            knowledge_refs=list(context.get("knowledge_refs") or []),
            status=status,
            knowledge_scope_revision=scope_revision,
            raw=payload,
        )

    # --- search and read ------------------------------------------------------------------------
    def _active(self) -> tuple[_Generation, Turn]:
        with self._lock:
            gen = self._gen
        if gen.turn is None:
            raise NoActiveTurn("start a turn first")
        if self._caps is None or not self._caps.supported:
            raise KnowledgeClientError("the server does not support bailing.agent-knowledge.v1 (inline only)")
        return gen, gen.turn

    def _call(self, gen: _Generation, path: str, body: dict) -> dict:
        """One POST of search/read; a lost response is retried once (both are read-only)."""
        url = self._path(gen.route, path)
        try:
            try:
                resp = self._send("POST", url, body)
            except TransportError:
                resp = self._send("POST", url, body)
        except TransportError as exc:
            raise KnowledgeClientError(f"{path}: {exc}", code="knowledge_unavailable") from None
        with self._lock:
            self._check_current(gen)
        if resp.status != 200:
            error = self._error(resp)
            if error.code in SCOPE_CODES:
                with self._lock:
                    if self._gen is gen:
                        # The scope moved on: every ref and page cached under the old one is dead.
                        self._gen = self._new_generation(gen.account, gen.route, turn=gen.turn)
            raise error
        payload = self._json(resp)
        if not isinstance(payload, dict):
            raise ProtocolError(f"{path}: response is not a JSON object")
        return payload

    def search(self, query: str, limit: int = 3, filter: dict[str, Any] | None = None) -> dict:
        """Hints for `query` in the active turn. `filter` (SPEC §8, the host's own narrowing — not a model
        tool argument) is sent as given; the server validates it. Cached per turn by query, limit, filter."""
        gen, turn = self._active()
        key = (query, limit, json.dumps(filter, sort_keys=True) if filter is not None else None)
        cached = gen.searches.get(key)
        if cached is not None:
            return cached
        body: dict[str, Any] = {"query": query, "limit": limit, "run_id": turn.run_id}
        if filter is not None:
            body["filter"] = filter
        payload = self._call(gen, "knowledge/search", body)
        if payload.get("schema") != SEARCH_SCHEMA or not isinstance(payload.get("hints"), list):
            raise ProtocolError("search: unknown response schema")
        revision = _scope_revision(payload)
        if gen.scope_revision is not None and revision != gen.scope_revision:
            gen = self._advance(gen, revision)
        with self._lock:
            self._check_current(gen)
            gen.scope_revision = revision
            gen.searches[key] = payload
        return payload

    def read(self, ref: str, cursor: str | None = None, max_bytes: int | None = None) -> dict:
        gen, turn = self._active()
        if cursor is not None and cursor not in gen.cursors.get(ref, set()):
            raise KnowledgeClientError(
                "cursor was not returned for this ref in this turn; page with next_cursor",
                code="invalid_cursor",
            )
        size = max_bytes or self._read_max_bytes
        key = (ref, cursor, size)
        cached = gen.pages.get(key)
        if cached is not None:
            return cached
        body: dict[str, Any] = {"ref": ref, "run_id": turn.run_id, "max_bytes": size}
        if cursor is not None:
            body["cursor"] = cursor
        payload = self._call(gen, "knowledge/read", body)
        if payload.get("schema") != READ_SCHEMA or not isinstance(payload.get("content"), str):
            raise ProtocolError("read: unknown response schema")
        revision = _scope_revision(payload)
        if gen.scope_revision is not None and revision != gen.scope_revision:
            gen = self._advance(gen, revision)
        with self._lock:
            self._check_current(gen)
            if payload.get("next_cursor"):
                gen.cursors.setdefault(ref, set()).add(payload["next_cursor"])
            gen.pages[key] = payload
        return payload

    def read_all(self, ref: str, max_bytes: int | None = None) -> tuple[str, dict]:
        """Every page of a ref's chain, concatenated; the last page tells whether the chain was cut."""
        parts: list[str] = []
        page = self.read(ref, max_bytes=max_bytes)
        parts.append(page["content"])
        while page.get("next_cursor"):
            page = self.read(ref, cursor=page["next_cursor"], max_bytes=max_bytes)
            parts.append(page["content"])
        return "".join(parts), page

    def api(self, action: Literal["capabilities", "search", "read"], body: dict | None = None) -> dict:
        """One request of the knowledge API exactly as given (no turn, no cache, no retry): the response
        body, or ApiError with the server's code. For proxies such as `kb mcp` that speak the API as is."""
        method = "GET" if action == "capabilities" else "POST"
        try:
            resp = self._send(method, self._path(self.route, f"knowledge/{action}"), body)
        except TransportError as exc:
            raise KnowledgeClientError(f"{action}: {exc}", code="knowledge_unavailable") from None
        if resp.status != 200:
            raise self._error(resp)
        payload = self._json(resp)
        if not isinstance(payload, dict):
            raise ProtocolError(f"{action}: response is not a JSON object", status=resp.status)
        return payload

    # --- model tools ----------------------------------------------------------------------------
    @staticmethod
    def tools(fmt: Literal["openai", "anthropic"] = "openai") -> list[dict[str, Any]]:
        return tool_definitions(fmt)

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Run one model tool call; refusals come back as a tool result `{"error": …}` for the model.
        StaleResponse propagates: a late result must not reach the current conversation."""
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
            validate_arguments(name, args)
        except ValueError as exc:
            return {"error": {"code": "invalid_arguments", "message": str(exc)}}
        try:
            if name == SEARCH_TOOL:
                result = self.search(args["query"], args.get("limit", 3))
                out = {k: result[k] for k in ("status", "trust", "truncated", "hints")}
                if result["status"] in ("unavailable", "partial"):
                    out["note"] = "the search failed for some or all sources; this is not 'no results'"
                return out
            if name == READ_TOOL:
                page = self.read(args["ref"], args.get("cursor"))
                out = {
                    k: page[k]
                    for k in (
                        "ref",
                        "title",
                        "content",
                        "trust",
                        "next_cursor",
                        "truncated",
                        "budget_exhausted",
                    )
                }
                if page["budget_exhausted"]:
                    out["note"] = "read limit reached: the document text above is incomplete"
                return out
        except ApiError as exc:
            error: dict[str, Any] = {"code": exc.code or "error", "message": str(exc)}
            if exc.code in RESEARCH_CODES:
                error["action"] = "search again"
            return {"error": error}
        except StaleResponse:
            raise
        except (NoActiveTurn, KnowledgeClientError) as exc:
            return {"error": {"code": exc.code or "unavailable", "message": str(exc)}}
        return {"error": {"code": "invalid_arguments", "message": f"unknown tool {name!r}"}}


def _scope_revision(payload: dict) -> str:
    revision = payload.get("knowledge_scope_revision")
    if not isinstance(revision, str):
        raise ProtocolError("response without knowledge_scope_revision")
    return revision
