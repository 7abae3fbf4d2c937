"""The `kb` command line's parser class: no abbreviated flags, and a misspelled flag named as such."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from difflib import get_close_matches
from typing import Any, NoReturn


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
