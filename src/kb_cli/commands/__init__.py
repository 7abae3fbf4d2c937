"""The `kb` subcommands, one module per area: each builds its parsers next to its handlers.

A handler takes the parsed arguments and `call`, the admin/Invoke API transport (`kb_cli.http.call`
unless the caller passes another), and returns the exit code."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from ..http import DEFAULT_ENDPOINT


class Call(Protocol):
    def __call__(
        self, endpoint: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any: ...


Handler = Callable[[argparse.Namespace, Call], int]
# argparse's subparsers object has no public type name.
Subparsers = Any


def add_endpoint(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="kb serve / API base URL (env KB_ENDPOINT)")
