"""HTTP transports for the host client: a stdlib (urllib) one, and the interface tests inject."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Protocol


class TransportError(Exception):
    """The request may or may not have reached the server, and no response arrived (dropped, timed out)."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Transport(Protocol):
    def __call__(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> HttpResponse:
        """Any HTTP status is a response; only a missing response raises TransportError."""


class UrllibTransport:
    def __call__(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> HttpResponse:
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return HttpResponse(resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()})
        except urllib.error.HTTPError as exc:
            return HttpResponse(exc.code, exc.read(), {k.lower(): v for k, v in (exc.headers or {}).items()})
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as exc:
            raise TransportError(f"{method} {url}: no response ({type(exc).__name__})") from None
