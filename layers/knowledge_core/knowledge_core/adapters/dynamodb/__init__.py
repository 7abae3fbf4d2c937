"""The production state adapters on one DynamoDB table (single-table design): `table` (its definition, keys
and the base every store shares), then one module per port family — registry, sessions and runs in
`state`, then `turns`, `ledger`, `jobs`. Imports go one way: this package imports its modules, they import
`table`, never the other way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...ports import StateStores
from .jobs import DynamoJobStore
from .ledger import DynamoLedger
from .state import DynamoState
from .table import TABLE_DEFINITION, TTL_ATTRIBUTE, create_table
from .turns import DynamoTurnStore

__all__ = [
    "TABLE_DEFINITION",
    "TTL_ATTRIBUTE",
    "DynamoJobStore",
    "DynamoLedger",
    "DynamoState",
    "DynamoTable",
    "DynamoTurnStore",
    "create_table",
    "dynamodb_stores",
]


@dataclass(frozen=True)
class DynamoTable:
    """The service's table: its lifecycle (local servers and tests) and the stores on it."""

    client: Any  # a low-level boto3 DynamoDB client
    name: str

    def create(self) -> None:
        create_table(self.client, self.name)

    def delete(self) -> None:
        self.client.delete_table(TableName=self.name)

    def stores(self) -> StateStores:
        return dynamodb_stores(self.client, self.name)


def dynamodb_stores(client: Any, table_name: str) -> StateStores:
    """Every state port on one table, through one low-level boto3 client."""
    state = DynamoState(client, table_name)
    return StateStores(
        registry=state,
        sessions=state,
        runs=state,
        turns=DynamoTurnStore(client, table_name),
        ledger=DynamoLedger(client, table_name),
        jobs=DynamoJobStore(client, table_name),
    )
