"""GET /agent-api/v1/workspaces/{route}/knowledge/capabilities — protocol negotiation (A-CAP); and
GET /agent-api/v1/openapi.json — the OpenAPI 3.1 document."""

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.errors import MethodNotAllowed, NotFound
from knowledge_core.edge import error_response, json_response, make_resolver, principal_of
from knowledge_core.observability import logger, metrics, tracer

app = make_resolver()


@app.not_found
def unknown_route(_: NotFoundError) -> Response[str]:
    """The catch-all ($default): a known path with another method is 405 naming the allowed ones."""
    from knowledge_core.openapi import allowed_methods

    allowed = allowed_methods(app.current_event.path)
    if not allowed or app.current_event.http_method.upper() in allowed:  # a segment no route admits
        return error_response(NotFound("no such route"))
    refused = error_response(
        MethodNotAllowed(f"method: not allowed on this path (allowed: {', '.join(allowed)})")
    )
    refused.headers["Allow"] = ", ".join(allowed)
    return refused


@app.get("/agent-api/v1/openapi.json")
def openapi() -> Response[str]:
    """The OpenAPI 3.1 document of every route (public: no principal needed)."""
    from knowledge_core.openapi import openapi_document  # generated on first request, not at cold start

    return json_response(openapi_document())


@app.get("/agent-api/v1/workspaces/<route>/knowledge/capabilities")
def capabilities(route: str) -> Response[str]:
    body = bootstrap.container().knowledge.capabilities(principal_of(app), route)
    metrics.add_metric(name="CapabilitiesEnabled", unit=MetricUnit.Count, value=int(body.enabled))
    return json_response(body)


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True, log_event=False
)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
