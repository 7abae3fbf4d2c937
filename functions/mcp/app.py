"""POST /mcp — the agent knowledge API as a stateless Streamable HTTP MCP server, JSON responses (M-MCP).

The principal comes from the authorizer like every public function; the route is the one the endpoint
URL names (`?route=`) or the token's only route. The `mcp` SDK is imported on the first request."""

import base64
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.edge import NO_STORE, make_resolver, principal_of
from knowledge_core.mcp_server import ServiceDoor, connection_route, serve_http
from knowledge_core.observability import logger, metrics, tracer

app = make_resolver()


@app.route("/mcp", method=["GET", "POST", "DELETE"])
def mcp() -> Response[str]:
    principal = principal_of(app)
    event = app.current_event
    route = connection_route(principal, event.get_query_string_value("route"))
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


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
