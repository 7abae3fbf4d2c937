"""Integration fixtures: the real DynamoDB-API server on loopback (`kb services`), started on demand.

Skipped when it cannot run here, unless KB_REQUIRE_REAL_BACKENDS=1 (then the tests fail instead)."""

from __future__ import annotations

import os
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
