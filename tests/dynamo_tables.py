"""DynamoDB tables for tests: on moto in-process (fast adapter tests only; moto is never a runtime
dependency) and on the DynamoDB-API server on loopback. Each is a fresh table, deleted afterwards."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from knowledge_core.adapters.dynamodb import DynamoTable


class SerializedClient:
    """A boto3 client whose calls run one at a time. moto's TransactWriteItems rolls back by restoring a
    table snapshot, which would erase concurrent writes of other threads; a real server needs no such lock."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("get_waiter") or name == "can_paginate":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


@contextmanager
def moto_table() -> Iterator[DynamoTable]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client(
            "dynamodb", region_name="us-east-1", aws_access_key_id="moto", aws_secret_access_key="moto"
        )
        table = DynamoTable(SerializedClient(client), f"kb-{uuid.uuid4().hex[:10]}")
        table.create()
        yield table


def real_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32),
    )


@contextmanager
def real_table(endpoint: str) -> Iterator[DynamoTable]:
    table = DynamoTable(real_client(endpoint), f"kbt-{uuid.uuid4().hex[:10]}")
    table.create()
    try:
        yield table
    finally:
        table.delete()
