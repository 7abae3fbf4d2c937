"""The ingestion worker (I-INGEST): one SQS message per job id; the job is claimed under a lease and worked
until done, or until the invocation is close to its timeout (then it is queued again)."""

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.admin_wire import JobMessage
from knowledge_core.domain.wire import parse_request
from knowledge_core.observability import logger, metrics, tracer

processor = BatchProcessor(event_type=EventType.SQS)
MARGIN_SECONDS = 60  # stop taking batches this long before the timeout: a batch must finish in time


def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> None:
    message = parse_request(JobMessage, record.body)
    container = bootstrap.container()
    remaining = lambda_context.get_remaining_time_in_millis() / 1000
    deadline = container.clock.now() + max(remaining - MARGIN_SECONDS, 1)
    container.ingestion.work_message(lambda_context.aws_request_id, message.job_id, deadline)
    metrics.add_metric(name="IngestionJobMessages", unit="Count", value=1)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response: dict[str, Any] = dict(
        process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    )
    return response
