"""POST /agent-api/v1/workspaces/{route}/knowledge/search — bounded, signed hints (A-SEARCH)."""

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.wire import SearchRequest, parse_request
from knowledge_core.edge import body_of, json_response, make_resolver, principal_of
from knowledge_core.observability import logger, metrics, tracer

app = make_resolver()


@app.post("/agent-api/v1/workspaces/<route>/knowledge/search")
def search(route: str) -> Response[str]:
    principal = principal_of(app)
    request = parse_request(SearchRequest, body_of(app))
    body = bootstrap.container().knowledge.search(principal, route, request)
    metrics.add_metric(name="SearchHints", unit=MetricUnit.Count, value=len(body.hints))
    return json_response(body)


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True, log_event=False
)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
