"""A small JSON-over-HTTP client for the admin API and the Lambda Invoke API of `kb serve`."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

LOCAL_ENDPOINT = "http://127.0.0.1:3000"  # where `kb serve` listens by default
DEFAULT_ENDPOINT = os.environ.get("KB_ENDPOINT", LOCAL_ENDPOINT)


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"HTTP {status}: {error.get('code', '')} {error.get('message', body)}".strip())


class EndpointUnreachable(Exception):
    """No server answered at the endpoint: says which one and how to start or point at one."""

    def __init__(self, endpoint: str, reason: object) -> None:
        why = getattr(reason, "strerror", None) or str(reason)
        super().__init__(
            f"cannot reach {endpoint} ({why}): start the service with `make serve` (or `kb serve`), or "
            "point at a running one with --endpoint URL or KB_ENDPOINT"
        )
        self.endpoint = endpoint


def call(
    endpoint: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 120,
) -> Any:
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        endpoint.rstrip("/") + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        raise ApiError(exc.code, payload) from None
    except urllib.error.URLError as exc:
        raise EndpointUnreachable(endpoint, exc.reason) from None
    except (ConnectionError, TimeoutError) as exc:
        raise EndpointUnreachable(endpoint, exc) from None
    return json.loads(raw) if raw else None


def seg(value: str) -> str:
    return quote(value, safe="@")
