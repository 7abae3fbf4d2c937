"""R-BUDGET against the real DynamoDB-API server on loopback: the same ledger scenarios as the unit
layer (moto) — three-level chain, atomic refusal, char grants, citation reuse, and 16 concurrent callers
on one root that never overspend and leave no partial charge."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from knowledge_core.adapters.dynamodb import DynamoState
from knowledge_core.adapters.ledger_dynamodb import DynamoLedger

from tests.unit.test_budget import (
    scenario_chain_mismatch,
    scenario_concurrent_shared_root,
    scenario_three_level_chain,
)

pytestmark = [pytest.mark.integration, pytest.mark.dynamodb_local, pytest.mark.timeout(900)]


@pytest.fixture
def real_ledger(dynamodb_endpoint: str) -> Iterator[DynamoLedger]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "dynamodb",
        endpoint_url=dynamodb_endpoint,
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32),
    )
    table = f"kb-ledger-{uuid.uuid4().hex[:10]}"
    DynamoState(client, table).create_table()
    try:
        yield DynamoLedger(client, table)
    finally:
        client.delete_table(TableName=table)


def test_r_budget_three_level_chain_real_dynamodb(real_ledger: DynamoLedger) -> None:
    scenario_three_level_chain(real_ledger)


def test_r_budget_chain_mismatch_real_dynamodb(real_ledger: DynamoLedger) -> None:
    scenario_chain_mismatch(real_ledger)


def test_r_budget_16_concurrent_callers_never_overspend_real_dynamodb(real_ledger: DynamoLedger) -> None:
    outcome = scenario_concurrent_shared_root(real_ledger, callers=16)
    assert outcome["granted"] == 64 and outcome["chars"] == 1000
