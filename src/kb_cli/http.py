"""A small JSON-over-HTTP client for the admin API and the Lambda Invoke API of `kb serve`."""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from .local_env import DEFAULT_STATE, OperatorCredentialUnreadable, read_operator_credential

LOCAL_ENDPOINT = "http://127.0.0.1:3000"  # where `kb serve` listens by default
DEFAULT_ENDPOINT = os.environ.get("KB_ENDPOINT", LOCAL_ENDPOINT)
# G-LOCAL: the header carrying the local operator credential on the admin and Invoke APIs of `kb serve`.
OPERATOR_HEADER = "X-Kb-Operator"
_OPERATOR_PREFIXES = ("/admin/", "/2015-03-31/functions/")
_command_state: list[Path] = []  # the running kb command's --state (one command per process)


def use_state(state: Path | str | None) -> None:
    """Where `call` reads the operator credential for the rest of this command (its --state)."""
    _command_state[:] = [Path(state)] if state else []


def needs_operator(path: str) -> bool:
    """Whether `path` is on the admin API or the Invoke API (the operator's doors, not the agents')."""
    return path.startswith(_OPERATOR_PREFIXES)


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
    state: Path | str | None = None,
) -> Any:
    """`method path` at `endpoint`; on the admin and Invoke APIs of a loopback endpoint with the operator
    credential of `state` (default: the command's --state, else $KB_STATE, else ./.kb-state) unless
    `headers` carry one. One that cannot be read is the error when the server answers 401 (an endpoint
    that is down is still named as such)."""
    headers = dict(headers or {})
    unreadable: OperatorCredentialUnreadable | None = None
    if needs_operator(path) and OPERATOR_HEADER not in headers and _is_loopback(endpoint):
        try:
            where = Path(state) if state else next(iter(_command_state), DEFAULT_STATE)
            headers[OPERATOR_HEADER] = read_operator_credential(where)
        except OperatorCredentialUnreadable as exc:
            unreadable = exc
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        endpoint.rstrip("/") + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 401 and unreadable is not None:
            raise unreadable from None
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


def _is_loopback(endpoint: str) -> bool:
    """The local operator credential goes to a kb serve on this machine only, never to a remote endpoint."""
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def seg(value: str) -> str:
    return quote(value, safe="@")
