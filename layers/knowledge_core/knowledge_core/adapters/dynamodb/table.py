"""The service's one DynamoDB table: its definition, keys and the base every store on it shares.

Keys: pk/sk strings; `ttl` (epoch seconds) expires sessions and other short-lived records.
TABLE_DEFINITION is the one description of the table; template.yaml carries the same (checked by a test)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ...domain.errors import StateUnavailable
from ...domain.models import (
    AgentDefinition,
)

TABLE_DEFINITION: dict[str, Any] = {
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}
TTL_ATTRIBUTE = "ttl"
TOKEN_LIST_PK = "TOKENS"
# The registry's index for operators' listings: sk = SRC#<key> | AGENT#<key> | WS#<route> (with `agent`),
# written beside each definition or pointer; a listing is one Query, never a Scan of the table.
REGISTRY_PK = "REGISTRY"
_UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "LimitExceededException",
        "ResourceNotFoundException",
    }
)
T = TypeVar("T")


def _s(value: str) -> dict[str, Any]:
    return {"S": value}


def _n(value: float) -> dict[str, Any]:
    return {"N": str(value)}


def create_table(client: Any, table_name: str) -> None:
    """The service's table as TABLE_DEFINITION describes it, with TTL on; a no-op when it exists."""
    from botocore.exceptions import ClientError

    try:
        client.create_table(TableName=table_name, **TABLE_DEFINITION)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
    client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 0.2})
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
    except ClientError as exc:
        if "already enabled" not in str(exc).lower():
            raise


def agent_from(item: dict[str, Any]) -> AgentDefinition:
    return AgentDefinition.model_validate_json(item["doc"]["S"])


class TableAdapter:
    """What every store of the single table shares: the low-level client, the fault mapping, the one
    conditional write and the one batch read."""

    def __init__(self, client: Any, table_name: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError  # lazy: botocore is heavy

        self._client = client
        self._table = table_name
        self._client_error = ClientError
        self._botocore_error = BotoCoreError

    @contextmanager
    def _call(self) -> Iterator[None]:
        """Storage faults become StateUnavailable (503) with no internals; logic errors propagate."""
        try:
            yield
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") in _UNAVAILABLE_CODES:
                raise StateUnavailable() from exc
            raise
        except self._botocore_error as exc:
            raise StateUnavailable() from exc

    def _conditional(self, op: str, **kwargs: Any) -> dict[str, Any] | None:
        """A conditional write (`put_item`, `update_item`, `delete_item`): its response, or None when its
        condition does not hold."""
        with self._call():
            try:
                response: dict[str, Any] = getattr(self._client, op)(TableName=self._table, **kwargs)
                return response
            except self._client_error as exc:
                if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    return None
                raise

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        with self._call():
            item: dict[str, Any] | None = self._client.get_item(
                TableName=self._table, Key={"pk": _s(pk), "sk": _s(sk)}, ConsistentRead=True
            ).get("Item")
        return item

    def _query(self, pk: str, sk_prefix: str | None = None) -> list[dict[str, Any]]:
        """Every item of one partition (whose sort key starts with `sk_prefix`), consistent, all pages."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk" + (" AND begins_with(sk, :prefix)" if sk_prefix else ""),
            "ExpressionAttributeValues": {":pk": _s(pk), **({":prefix": _s(sk_prefix)} if sk_prefix else {})},
        }
        items: list[dict[str, Any]] = []
        while True:
            with self._call():
                page = self._client.query(**request)
            items.extend(page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Consistent reads of `keys` (pk/sk dicts), 100 a request, unprocessed keys asked again."""
        items: list[dict[str, Any]] = []
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {self._table: {"Keys": keys[i : i + 100], "ConsistentRead": True}}
            while request:
                with self._call():
                    resp = self._client.batch_get_item(RequestItems=request)
                items.extend(resp["Responses"].get(self._table, []))
                request = resp.get("UnprocessedKeys") or {}
        return items
