"""`kb run complete|cancel`: end a run."""

from __future__ import annotations

import argparse

from ..http import seg
from . import Call, Subparsers, add_endpoint


def register(sub: Subparsers) -> None:
    p = sub.add_parser("run", help="end a run")
    p.add_argument("action", choices=["complete", "cancel"])
    add_endpoint(p)
    p.add_argument("--run-id", required=True)
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace, call: Call) -> int:
    state = {"complete": "completed", "cancel": "cancelled"}[args.action]
    call(args.endpoint, "POST", f"/admin/v1/runs/{seg(args.run_id)}/end", {"state": state})
    print(f"run {args.run_id} {state}")
    return 0
