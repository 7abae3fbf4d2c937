"""G-LOCAL: with tracing disabled (POWERTOOLS_TRACE_DISABLED, as kb serve runs its workers) a handler runs
without the Powertools Tracer, so a cold worker's first request does not import the X-Ray SDK; with tracing
on, the Tracer wraps it as on Lambda."""

from __future__ import annotations

from typing import Any

import pytest
from knowledge_core.observability import LazyTracer


def _handler(event: Any, context: Any) -> dict:
    return {"ok": event}


@pytest.mark.parametrize(("disabled", "built"), [("true", False), ("1", False), ("false", True)])
def test_g_local_tracer_built_only_when_tracing_is_on(
    monkeypatch: pytest.MonkeyPatch, disabled: str, built: bool
) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", disabled)
    tracer = LazyTracer("test")
    assert tracer.capture_lambda_handler(_handler)({"q": 1}, None) == {"ok": {"q": 1}}
    assert (tracer._tracer is not None) is built
