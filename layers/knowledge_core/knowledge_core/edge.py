"""HTTP edge shared by the public functions: resolver with the one error mapping, principal from the
authorizer context, JSON responses that always carry `Cache-Control: no-store`."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from re import Match
from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError

from .domain.errors import InvalidRequest, KnowledgeError, NotFound, TokenExpired, Unauthorized
from .domain.models import Principal
from .domain.wire import WireModel
from .observability import logger, metrics

NO_STORE = {"Cache-Control": "no-store"}


def json_response(body: WireModel | dict[str, Any], status: int = 200) -> Response[str]:
    """The one place a response body becomes JSON (services return typed bodies)."""
    data = body.wire() if isinstance(body, WireModel) else body
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(data, ensure_ascii=False, separators=(",", ":")),
        headers=dict(NO_STORE),
    )


def error_response(error: KnowledgeError) -> Response[str]:
    return json_response(error.body(), error.status)


class _Resolver(APIGatewayHttpResolver):
    """Route arguments as API Gateway decodes them (`pathParameters`: `demo-docs%401.0.0` is the key
    `demo-docs@1.0.0`), not the raw path segments Powertools matches; each segment is decoded once when an
    event carries none."""

    def _convert_matches_into_route_keys(self, match: Match[str]) -> dict[str, str]:
        given = self.current_event.path_parameters or {}
        return {k: given.get(k) or unquote(v) for k, v in match.groupdict().items()}


def make_resolver() -> APIGatewayHttpResolver:
    app = _Resolver()

    # Powertools' exception_handler is an untyped decorator (mypy --strict allowlist: untyped-decorator).
    @app.exception_handler(KnowledgeError)  # type: ignore[untyped-decorator]
    def _known(error: KnowledgeError) -> Response[str]:
        logger.info("request refused", extra={"code": error.code, "field": error.field})
        metrics.add_metric(name="RefusedRequests", unit="Count", value=1)
        return error_response(error)

    @app.not_found
    def _unknown_route(_: NotFoundError) -> Response[str]:
        return error_response(NotFound("no such route"))

    @app.exception_handler(Exception)  # type: ignore[untyped-decorator]
    def _unexpected(error: Exception) -> Response[str]:
        # The type and where it was raised, never the message: it may quote a query, a body or an address.
        frame = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
        where = f"{Path(frame[0].filename).name}:{frame[0].lineno}" if frame else ""
        logger.error("unhandled error", extra={"error_type": type(error).__name__, "where": where})
        metrics.add_metric(name="UnhandledErrors", unit="Count", value=1)
        return error_response(KnowledgeError())

    return app


def principal_of(app: APIGatewayHttpResolver) -> Principal:
    """The principal the authorizer put in the request context; no principal = 401 (the authorizer's
    `refused: token_expired` says the token has expired; `refused: insufficient_scope`, a 403, that an OAuth
    access token grants no route)."""
    from .services.oauth import InsufficientScope

    context: dict[str, Any] = app.current_event.request_context.authorizer.get_lambda or {}
    raw = context.get("principal")
    if not raw:
        if context.get("refused") == InsufficientScope.refusal:
            raise InsufficientScope()
        raise TokenExpired() if context.get("refused") == TokenExpired.refusal else Unauthorized()
    return Principal.model_validate_json(raw)


def body_of(app: APIGatewayHttpResolver) -> str:
    event = app.current_event
    if event.is_base64_encoded:
        raise InvalidRequest("body: must be a JSON object", field="body")
    return event.body or ""
