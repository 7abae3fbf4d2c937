"""The `kb` subcommands, one module per area: each builds its parsers next to its handlers.

A handler takes the parsed arguments and `call`, the admin/Invoke API transport (`kb_cli.http.call`
unless the caller passes another), and returns the exit code."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from ..http import DEFAULT_ENDPOINT
from ..local_env import DEFAULT_STATE
from ..parser import KbParser as KbParser  # every command module builds its parsers with it


class Call(Protocol):
    def __call__(
        self, endpoint: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any: ...


Handler = Callable[[argparse.Namespace, Call], int]
# argparse's subparsers object has no public type name.
Subparsers = Any


def add_endpoint(p: argparse.ArgumentParser, state_help: str = "") -> None:
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="kb serve / API base URL (env KB_ENDPOINT)")
    add_state(p, state_help)


def add_state(p: argparse.ArgumentParser, also: str = "") -> None:
    """--state: where the CLI reads the operator credential of the kb serve it operates (G-LOCAL)."""
    p.add_argument(
        "--state",
        default=str(DEFAULT_STATE),
        help="kb serve's state directory, where its operator credential is read (env KB_STATE)" + also,
    )
