"""`kb invoke`: one event through a handler, as `sam local invoke` would."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from ..http import seg
from ..local_env import local_container
from . import Call, Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("invoke", help="run one event through a handler, as sam local invoke would")
    p.add_argument("function", help="logical id (SearchFunction) or short name (search)")
    p.add_argument("-e", "--event", required=True)
    p.add_argument("--endpoint", help="a running kb serve; default: in-process on fresh embedded state")
    p.set_defaults(func=cmd_invoke)


def cmd_invoke(args: argparse.Namespace, call: Call) -> int:
    from ..events import load_event

    event = load_event(args.event)
    if args.endpoint:
        result = call(args.endpoint, "POST", f"/2015-03-31/functions/{seg(args.function)}/invocations", event)
    else:
        from .. import demo
        from ..gateway import Handlers

        # Handler output (EMF metrics, logs) goes to stderr, as with `sam local invoke`: stdout is the result.
        with tempfile.TemporaryDirectory(prefix="kb-invoke-") as tmp, contextlib.redirect_stdout(sys.stderr):
            demo.seed(local_container(Path(tmp)), with_token=False)
            result = Handlers().invoke(args.function, event)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0
