"""agent_tools — invoked directly (IAM) by the agent runtime: `startup` retrieval and the model-callable
`knowledge_search` (SPEC §3). The result is a Lambda result, success or `{"error": …}`, never HTTP."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.errors import ToolError
from knowledge_core.domain.tool_wire import failure, parse_envelope
from knowledge_core.observability import logger, metrics, tracer


@logger.inject_lambda_context(
    correlation_id_path="invocation.invocation_id", clear_state=True, log_event=False
)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        envelope = parse_envelope(event)
    except ToolError as error:
        logger.info("knowledge tool refused", extra={"code": error.code, "field": error.field})
        metrics.add_metric(name="ToolErrors", unit=MetricUnit.Count, value=1)
        return failure(error, []).wire()
    result = bootstrap.container().tools.call(envelope)
    if result.error is not None:
        metrics.add_metric(name="ToolErrors", unit=MetricUnit.Count, value=1)
    else:
        metrics.add_metric(name="ToolReferences", unit=MetricUnit.Count, value=len(result.references))
    return result.wire()
