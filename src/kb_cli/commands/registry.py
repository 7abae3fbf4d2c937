"""`kb publish`, `kb workspace set`, `kb source enable|disable`: the registry of sources, agents and
workspace routes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..http import seg
from . import Call, Subparsers, add_endpoint
from .inventory import add_json, cmd_source_list, cmd_workspace_list


def register_publish(sub: Subparsers) -> None:
    p = sub.add_parser("publish", help="publish an immutable source or agent version")
    p.add_argument("kind", choices=["source", "agent"])
    p.add_argument("file")
    add_endpoint(p)
    p.set_defaults(func=cmd_publish)


def register_workspace(sub: Subparsers) -> None:
    p = sub.add_parser(
        "workspace", help="point a workspace route at an agent version (rollback = point back)"
    )
    wsub = p.add_subparsers(dest="action", required=True)
    w = wsub.add_parser("set")
    w.add_argument("route")
    w.add_argument("--agent", required=True, help="exact id@version")
    add_endpoint(w)
    w.set_defaults(func=cmd_workspace_set)
    w = wsub.add_parser("list", help="every workspace route and the agent version it points at")
    add_endpoint(w)
    add_json(w)
    w.set_defaults(func=cmd_workspace_list)


def register_source(sub: Subparsers) -> None:
    p = sub.add_parser("source", help="list the published sources, or enable or disable one")
    p.add_argument("action", choices=["enable", "disable", "list"])
    add_endpoint(p)
    p.add_argument("--source", help="exact id@version (enable, disable)")
    add_json(p)
    p.set_defaults(func=cmd_source)


def cmd_publish(args: argparse.Namespace, call: Call) -> int:
    definition = json.loads(Path(args.file).read_text(encoding="utf-8"))
    result = call(args.endpoint, "POST", f"/admin/v1/{args.kind}s", definition)
    key = f"{definition.get('id')}@{definition.get('version')}"
    print(
        f"published {args.kind} {key}"
        if result["created"]
        else f"{args.kind} {key} already published (identical)"
    )
    return 0


def cmd_workspace_set(args: argparse.Namespace, call: Call) -> int:
    call(args.endpoint, "PUT", f"/admin/v1/workspaces/{seg(args.route)}", {"agent": args.agent})
    print(f"workspace {args.route} -> {args.agent}")
    return 0


def cmd_source(args: argparse.Namespace, call: Call) -> int:
    if args.action == "list":
        return cmd_source_list(args, call)
    if not args.source:
        print(f"kb source {args.action}: the following arguments are required: --source", file=sys.stderr)
        return 2
    call(args.endpoint, "POST", f"/admin/v1/sources/{seg(args.source)}/{args.action}", {})
    print(f"{args.source} {args.action}d")
    return 0
