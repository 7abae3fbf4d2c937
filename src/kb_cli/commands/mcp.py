"""`kb mcp`: the knowledge tools as an MCP server on stdio (kb_cli/mcp_server.py runs it)."""

from __future__ import annotations

import argparse

from ..http import DEFAULT_ENDPOINT
from ..local_env import DEFAULT_STATE
from . import Call, Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("mcp", help="the knowledge tools as an MCP server on stdio (remote or --embedded)")
    from ..mcp_server import add_arguments as add_mcp_arguments

    add_mcp_arguments(p, DEFAULT_ENDPOINT, str(DEFAULT_STATE))
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace, call: Call | None = None) -> int:
    from ..mcp_server import cmd_mcp as run

    return run(args)
