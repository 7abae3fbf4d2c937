"""Integration fixtures: the real DynamoDB-API server and OpenSearch node on loopback (`kb services`),
started on demand, and a fresh OpenSearch index prefix whose indices are dropped afterwards.

Skipped when it cannot run here, unless KB_REQUIRE_REAL_BACKENDS=1 (then the tests fail instead)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> str:
    try:
        from kb_cli import supervisor

        state = Path(os.environ.get("KB_SERVICES_STATE", ".kb-state"))
        return supervisor.ensure_running(state, (supervisor.DYNAMODB,))["DYNAMODB_ENDPOINT"]
    except Exception as exc:  # any reason the server cannot run here
        message = f"real DynamoDB-API server unavailable: {type(exc).__name__}: {exc}"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def opensearch_url() -> str:
    from tests.contract.conftest import real_endpoints_or_skip

    return real_endpoints_or_skip()["OPENSEARCH_URL"]


@pytest.fixture
def index_prefix(opensearch_url: str) -> Iterator[str]:
    """A fresh index prefix; its indices (one- and two-shard passages included) are dropped afterwards."""
    from knowledge_core.adapters.opensearch import OpenSearchBackend, passages_index_name

    made = f"kbs-{uuid.uuid4().hex[:10]}"
    yield made
    one = OpenSearchBackend(opensearch_url, index_prefix=made)
    one.drop_indices()
    one.client.indices.delete(index=passages_index_name(made, 2), ignore_unavailable=True)
