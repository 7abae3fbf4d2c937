"""The `kb` command: run the service locally, operate it, and drive its handlers.

This module assembles the parser from the command modules (`kb_cli/commands/`, each building its parsers
next to its handlers) and dispatches; `call` here is the admin/Invoke API transport every handler gets."""

from __future__ import annotations

import argparse
import sys

from .commands import (
    KbParser,
    backends,
    docs,
    evaluate,
    indices,
    ingest,
    inventory,
    invoke,
    jobs,
    mcp,
    registry,
    runs,
    search,
    serve,
    tokens,
)
from .http import ApiError, EndpointUnreachable, call, use_state
from .local_env import (
    DEFAULT_STATE,
    STATE_FILE,
    OperatorCredentialUnreadable,
    _write_private,
    configure_local_env,
    local_container,
)

__all__ = ["DEFAULT_STATE", "STATE_FILE", "_write_private", "configure_local_env", "local_container"]

# In `kb --help` order.
_REGISTER = (
    serve.register,
    tokens.register,
    ingest.register,
    docs.register_tenant,
    jobs.register,
    docs.register_doc,
    registry.register_publish,
    registry.register_workspace,
    inventory.register_agent,
    registry.register_source,
    indices.register,
    runs.register,
    tokens.register_secret,
    invoke.register,
    search.register,
    mcp.register,
    evaluate.register,
    backends.register_services,
    backends.register_models,
)


def build_parser() -> argparse.ArgumentParser:
    parser = KbParser(prog="kb", description="Agent Knowledge Service tools")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in _REGISTER:
        register(sub)
    return parser


def cmd_ingest(args: argparse.Namespace) -> int:
    """`kb ingest` through this module's transport (scripts and tests call it with their own Namespace)."""
    return ingest.cmd_ingest(args, call)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; `kb ingest` also takes paths after its flags (`kb ingest a.md --source s b.md`),
    which argparse alone refuses (it reads one run of positionals)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "ingest" and not any(a.startswith("-") for a in extra):
        args.file = [*([args.file] if isinstance(args.file, str) else args.file), *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    use_state(getattr(args, "state", None))  # the operator credential is read from the command's --state
    try:
        return int(args.func(args, call) or 0)
    except (ApiError, EndpointUnreachable, OperatorCredentialUnreadable) as exc:
        print(f"kb: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"kb: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
