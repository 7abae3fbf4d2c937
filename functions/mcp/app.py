"""POST /mcp — the agent knowledge API as a stateless Streamable HTTP MCP server, JSON responses (M-MCP).

The principal comes from the authorizer like every public function; the route is the one the endpoint
URL names (`?route=`) or the token's only route. With an OAuth authorization server configured (M-AUTH),
the Protected Resource Metadata (RFC 9728) is served here too, and every 401/403 of /mcp carries the
`WWW-Authenticate` challenge that points a client to it. The `mcp` SDK is imported on the first request."""

import base64
import json
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.errors import Forbidden, NotFound, Unauthorized
from knowledge_core.domain.models import Principal
from knowledge_core.edge import NO_STORE, error_response, make_resolver, principal_of
from knowledge_core.mcp_server import ServiceDoor, connection_route, serve_http
from knowledge_core.observability import logger, metrics, tracer
from knowledge_core.services.oauth import WELL_KNOWN, InvalidToken, OAuthResource

app = make_resolver()


def _oauth() -> OAuthResource | None:
    """The configured OAuth resource as this request's domain sees it; None when not configured."""
    oauth = bootstrap.container().oauth
    if oauth is None:
        return None
    try:
        return oauth.on_domain(app.current_event.request_context.domain_name)
    except InvalidToken:
        return None


def _caller() -> tuple[Principal, str] | Response[str]:
    """The principal and the connection's route, or the refusal: with OAuth configured, a 401/403 that
    carries the challenge (resource metadata, the scope this route needs, why a token was refused)."""
    event = app.current_event
    requested = event.get_query_string_value("route")
    try:
        principal = principal_of(app)
        return principal, connection_route(principal, requested)
    except (Unauthorized, Forbidden) as refused:
        oauth = _oauth()
        if oauth is None:
            raise
        presented = bool(event.headers.get("authorization"))
        challenge = oauth.challenge(refused, route=requested, presented=presented)
        logger.info("MCP request refused", extra={"code": refused.code})
        answer = error_response(refused)
        answer.headers["WWW-Authenticate"] = challenge
        return answer


@app.route("/mcp", method=["GET", "POST", "DELETE"])
def mcp() -> Response[str]:
    caller = _caller()
    if isinstance(caller, Response):
        return caller
    principal, route = caller
    event = app.current_event
    door = ServiceDoor(bootstrap.container().knowledge, principal, route)
    body = base64.b64decode(event.body or "") if event.is_base64_encoded else (event.body or "").encode()
    answer = serve_http(
        door,
        method=event.http_method,
        path=event.path,
        query=event.raw_query_string or "",
        headers=dict(event.headers),
        body=body,
    )
    metrics.add_metric(name="McpRequests", unit=MetricUnit.Count, value=1)
    content_type = answer.headers.pop("content-type", None)
    return Response(
        status_code=answer.status,
        content_type=content_type,
        body=answer.body.decode("utf-8"),
        headers={**answer.headers, **NO_STORE},
    )


@app.get(WELL_KNOWN)
@app.get(WELL_KNOWN + "/mcp")
def protected_resource_metadata() -> Response[str]:
    """RFC 9728: public, cacheable for an hour; 404 when no authorization server is configured."""
    oauth = _oauth()
    if oauth is None or app.current_event.path not in oauth.metadata_paths:
        raise NotFound("no OAuth protected resource here (the service's own bearer tokens only)")
    return Response(
        status_code=200,
        content_type="application/json",
        body=json.dumps(oauth.metadata(), separators=(",", ":")),
        headers={"Cache-Control": "public, max-age=3600"},
    )


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
