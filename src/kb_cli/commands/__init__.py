"""The `kb` subcommands, one module per area: each builds its parsers next to its handlers.

A handler takes the parsed arguments and `call`, the admin/Invoke API transport (`kb_cli.http.call`
unless the caller passes another), and returns the exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from difflib import get_close_matches
from typing import Any, NoReturn, Protocol

from ..http import DEFAULT_ENDPOINT
from ..local_env import DEFAULT_STATE


class Call(Protocol):
    def __call__(
        self, endpoint: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any: ...


Handler = Callable[[argparse.Namespace, Call], int]
# argparse's subparsers object has no public type name.
Subparsers = Any


class KbParser(argparse.ArgumentParser):
    """Every `kb` parser and sub-parser: flags are never abbreviated (`--rout` is not `--route`), and a
    misspelled flag is named as unrecognized, with the flag it resembles, even when a required one is then
    missing (argparse alone reports only the missing one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        unknown = self.unknown_flags(self._given)
        if unknown and message.startswith("the following arguments are required"):
            message = "unrecognized arguments: " + ", ".join(self.described(flag) for flag in unknown)
        super().error(message)

    def unknown_flags(self, argv: list[str]) -> list[str]:
        """The `--flags` in `argv` this parser does not have (up to a lone `--`)."""
        given = argv[: argv.index("--")] if "--" in argv else argv
        flags = [a.split("=", 1)[0] for a in given if a.startswith("--") and len(a) > 2]
        return [f for f in flags if f not in self._option_string_actions]

    def described(self, flag: str) -> str:
        near = get_close_matches(flag, [o for o in self._option_string_actions if o.startswith("--")], 1)
        return f"{flag} (did you mean {near[0]}?)" if near else flag


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
