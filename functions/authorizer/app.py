"""HTTP API Lambda authorizer (payload 2.0, simple responses): bearer token -> principal context.

An unknown or expired token still passes with an empty context, so that the function answers the
typed 401 with `Cache-Control: no-store` (an authorizer denial cannot carry either)."""

from typing import Any

from aws_lambda_powertools.utilities.data_classes import event_source
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerEventV2,
    APIGatewayAuthorizerResponseV2,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.errors import TokenExpired, Unauthorized
from knowledge_core.observability import logger


@logger.inject_lambda_context(clear_state=True, log_event=False)
@event_source(data_class=APIGatewayAuthorizerEventV2)
def lambda_handler(event: APIGatewayAuthorizerEventV2, context: LambdaContext) -> dict[str, Any]:
    try:
        principal = bootstrap.container().access.authenticate(event.headers.get("authorization"))
    except Unauthorized as refused:
        logger.info("unauthenticated request")
        # An expired token is named so that the function's 401 says so; any other gets no context.
        refusal = {"refused": TokenExpired.refusal} if isinstance(refused, TokenExpired) else {}
        return APIGatewayAuthorizerResponseV2(authorize=True, context=refusal).asdict()
    logger.append_keys(client_id=principal.client_id, session_id=principal.session_id)
    return APIGatewayAuthorizerResponseV2(
        authorize=True, context={"principal": principal.model_dump_json()}
    ).asdict()
