"""Typed errors of the domain core. The edge maps them to HTTP or tool results by type, never by text."""

from __future__ import annotations

from typing import Any


class KnowledgeError(Exception):
    """Base of every error the core raises on purpose. `code` and `status` are the wire contract."""

    code = "internal_error"
    status = 500
    default_message = "internal error"

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        self.message = message or self.default_message
        self.field = field
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


class InvalidRequest(KnowledgeError):
    code, status, default_message = "invalid_request", 400, "invalid request"


class Unauthorized(KnowledgeError):
    code, status, default_message = "unauthorized", 401, "missing or invalid bearer token"


class TokenExpired(Unauthorized):
    """A token that was valid and has expired: the same 401 `unauthorized`, told apart by its message."""

    default_message = "token_expired: the bearer token has expired; issue a new one"
    refusal = "token_expired"  # how the authorizer tells the function (its context carries no error)


class Forbidden(KnowledgeError):
    code, status, default_message = "forbidden", 403, "route not allowed for this principal"


class NotFound(KnowledgeError):
    code, status, default_message = "not_found", 404, "not found"


class WorkspaceNotFound(NotFound):
    """No agent is published at the route: the message names the route (the caller's own path segment,
    bounded) and where the routes are listed."""

    def __init__(self, route: str) -> None:
        shown = route if len(route) <= 64 else route[:64] + "…"
        super().__init__(
            f"workspace {shown!r} not found; `kb workspace list` (GET /admin/v1/workspaces) shows the routes",
            field="route",
        )


class MethodNotAllowed(KnowledgeError):
    code, status, default_message = "method_not_allowed", 405, "method: not allowed on this path"


class RunNotFound(KnowledgeError):
    code, status, default_message = "run_not_found", 404, "run not found"


class RunNotReady(KnowledgeError):
    code, status, default_message = "run_not_ready", 409, "run is not in context_ready state"


class Conflict(KnowledgeError):
    code, status, default_message = "conflict", 409, "conflicting definition"


class TurnConflict(KnowledgeError):
    code, status, default_message = "turn_conflict", 409, "turn_id was used with a different request"


class ReferenceInvalid(KnowledgeError):
    code, status, default_message = "knowledge_reference_invalid", 400, "knowledge reference is invalid"


class ReferenceExpired(KnowledgeError):
    code, status, default_message = (
        "knowledge_reference_expired",
        410,
        "knowledge reference expired; search again",
    )


class ScopeChanged(KnowledgeError):
    code, status, default_message = (
        "knowledge_scope_changed",
        409,
        "knowledge configuration changed; search again",
    )


class KnowledgeChanged(KnowledgeError):
    code, status, default_message = (
        "knowledge_changed",
        409,
        "document changed or is no longer visible; search again",
    )


class KnowledgeUnavailable(KnowledgeError):
    code, status, default_message = "knowledge_unavailable", 503, "knowledge service unavailable"


class StateUnavailable(KnowledgeError):
    """The state store (DynamoDB) is unreachable or throttled."""

    code, status, default_message = "service_unavailable", 503, "service temporarily unavailable"


class SourceFailure(Exception):
    """A knowledge source could not answer, or take a write. `kind` is transient
    (timeout/unavailable/throttled: the same call may succeed later) or not (`rejected`: a write the
    backend refuses as it is)."""

    TRANSIENT = frozenset({"timeout", "unavailable", "throttled"})

    def __init__(self, kind: str, detail: str = "", cause: str | None = None) -> None:
        self.kind = kind
        # Why a `rejected` write was refused, when the backend said in a way we know (`too_many_fields`:
        # the index's field limit); a typed word, never the backend's message (it may quote the document).
        self.cause = cause
        super().__init__(detail or kind)

    @property
    def transient(self) -> bool:
        return self.kind in self.TRANSIENT


class TurnInProgress(KnowledgeError):
    """An identical request for this turn is still being assembled; retry the same request shortly."""

    code, status, default_message = (
        "turn_in_progress",
        409,
        "this turn is still being prepared; retry shortly",
    )


# --- the agent tool (SPEC §3): returned as a Lambda result {"error": {...}}, never as HTTP ---------


class ToolError(KnowledgeError):
    """An error of the `agent_tools` function. `transient` errors may be skipped under SKIP_TRANSIENT."""

    code, status, default_message = "PROTOCOL_ERROR", 400, "invalid tool call"
    transient = False


class ProtocolError(ToolError):
    code, status, default_message = "PROTOCOL_ERROR", 400, "invalid tool call"


class SourceDenied(ToolError):
    code, status, default_message = "KNOWLEDGE_SOURCE_DENIED", 403, "knowledge source not allowed"


class AccessDenied(ToolError):
    code, status, default_message = "KNOWLEDGE_ACCESS_DENIED", 403, "access to the knowledge source denied"


class BudgetExceeded(ToolError):
    code, status, default_message = "KNOWLEDGE_BUDGET_EXCEEDED", 429, "knowledge budget exceeded"


class SourceUnavailable(ToolError):
    code, status, default_message = "KNOWLEDGE_UNAVAILABLE", 503, "knowledge source unavailable"
    transient = True


class SourceTimeout(ToolError):
    code, status, default_message = "KNOWLEDGE_TIMEOUT", 504, "knowledge source timed out"
    transient = True


class SourceThrottled(ToolError):
    code, status, default_message = "KNOWLEDGE_THROTTLED", 429, "knowledge source throttled"
    transient = True


class SourceError(ToolError):
    """A source failed in a way that is neither transient nor a denial (e.g. it rejected the request)."""

    code, status, default_message = "KNOWLEDGE_SOURCE_ERROR", 502, "knowledge source failed"


def tool_error_for(failure: SourceFailure) -> ToolError:
    """The tool error a failing source request reports (SourceFailure.kind -> code)."""
    kinds: dict[str, type[ToolError]] = {
        "timeout": SourceTimeout,
        "unavailable": SourceUnavailable,
        "throttled": SourceThrottled,
        "access_denied": AccessDenied,
        "forbidden": AccessDenied,
    }
    return kinds.get(failure.kind, SourceError)()
