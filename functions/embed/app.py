"""embed — invoked directly by the other functions and the ingestion worker (SPEC §0, §3.10): the models,
loaded once per instance, turn queries (one at a time) and passages (in batches) into vectors. The result is
a Lambda result (domain/embed_wire), success or `{"error": …}`, never HTTP."""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap

logger = Logger(service="agent-knowledge")


@logger.inject_lambda_context(clear_state=True, log_event=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return bootstrap.container().embed.answer(event)
