"""One Logger, Tracer and Metrics shared by every function.

Nothing secret or document-derived reaches a trace: handler responses (tokens, pages, citations) and
errors are never captured as X-Ray metadata, whatever POWERTOOLS_TRACER_CAPTURE_* says (S1).

The Powertools Tracer is built on first use: constructing it imports the X-Ray SDK, which imports
botocore — hundreds of milliseconds a cold import would otherwise pay before any handler runs."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics

SERVICE = "agent-knowledge"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace="AgentKnowledge", service=SERVICE)


class LazyTracer:
    """Delegates to `aws_lambda_powertools.Tracer`, constructed once, on the first traced call."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._tracer: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        if self._tracer is None:
            with self._lock:
                if self._tracer is None:
                    from aws_lambda_powertools import Tracer

                    self._tracer = Tracer(service=self._service)
        return self._tracer

    def capture_lambda_handler(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        traced: list[Callable[..., Any]] = []

        @functools.wraps(handler)
        def wrapper(event: Any, context: Any) -> Any:
            if _tracing_disabled():  # (kb serve): no X-Ray SDK import, 0.6 s of a cold worker's first request
                return handler(event, context)
            if not traced:
                traced.append(
                    self.get().capture_lambda_handler(handler, capture_response=False, capture_error=False)
                )
            return traced[0](event, context)

        return wrapper

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


def _tracing_disabled() -> bool:
    """POWERTOOLS_TRACE_DISABLED set true, as Powertools reads it."""
    from aws_lambda_powertools.shared.functions import strtobool

    try:
        return strtobool(os.environ.get("POWERTOOLS_TRACE_DISABLED", "false"))
    except ValueError:
        return False


tracer = LazyTracer(SERVICE)
