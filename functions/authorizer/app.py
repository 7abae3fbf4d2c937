"""HTTP API Lambda authorizer (payload 2.0, simple responses): bearer token -> principal context.

An unknown or expired token still passes with an empty context, so that the function answers the
typed 401 with `Cache-Control: no-store` (an authorizer denial cannot carry either). On the MCP route, a JWT
is an OAuth access token of the configured authorization server (M-AUTH) when one is configured."""

from typing import Any

from aws_lambda_powertools.utilities.data_classes import event_source
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerEventV2,
    APIGatewayAuthorizerResponseV2,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.errors import TokenExpired, Unauthorized
from knowledge_core.domain.models import Principal
from knowledge_core.observability import logger
from knowledge_core.services.oauth import InsufficientScope, looks_like_jwt

MCP_ROUTE_KEYS = frozenset({"ANY /mcp", "POST /mcp", "GET /mcp", "DELETE /mcp"})


def _authenticate(event: APIGatewayAuthorizerEventV2) -> Principal:
    container = bootstrap.container()
    authorization = event.headers.get("authorization")
    oauth = container.oauth
    if oauth is not None and event.route_key in MCP_ROUTE_KEYS and looks_like_jwt(authorization):
        return oauth.on_domain(event.request_context.domain_name).authenticate(authorization)
    return container.access.authenticate(authorization)


@logger.inject_lambda_context(clear_state=True, log_event=False)
@event_source(data_class=APIGatewayAuthorizerEventV2)
def lambda_handler(event: APIGatewayAuthorizerEventV2, context: LambdaContext) -> dict[str, Any]:
    try:
        principal = _authenticate(event)
    except (Unauthorized, InsufficientScope) as refused:
        logger.info("unauthenticated request")
        # An expired token or a scope that grants no route is named so that the function's 401/403 says
        # so; any other refusal gets no context.
        reason = refused.refusal if isinstance(refused, TokenExpired | InsufficientScope) else None
        return APIGatewayAuthorizerResponseV2(
            authorize=True, context={"refused": reason} if reason else {}
        ).asdict()
    logger.append_keys(client_id=principal.client_id, session_id=principal.session_id)
    return APIGatewayAuthorizerResponseV2(
        authorize=True, context={"principal": principal.model_dump_json()}
    ).asdict()
