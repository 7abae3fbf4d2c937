"""`kb invoke`: one event through a handler, as `sam local invoke` would."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
    p.add_argument(
        "--endpoint",
        help="a running kb serve (env KB_ENDPOINT); default: in-process on fresh embedded state",
    )
    p.set_defaults(func=cmd_invoke)


def cmd_invoke(args: argparse.Namespace, call: Call) -> int:
    from ..events import load_event

    event = load_event(args.event)
    endpoint = invoke_endpoint(args)
    if endpoint:
        result = invoke_remote(call, endpoint, args.function, event)
    else:
        from .. import demo
        from ..gateway import Handlers

        print(
            "kb invoke: in-process on fresh embedded state with the demo workspace (no --endpoint or "
            "KB_ENDPOINT)",
            file=sys.stderr,
        )
        # Handler output (EMF metrics, logs) goes to stderr, as with `sam local invoke`: stdout is the result.
        with tempfile.TemporaryDirectory(prefix="kb-invoke-") as tmp, contextlib.redirect_stdout(sys.stderr):
            demo.seed(local_container(Path(tmp)), with_token=False)
            result = Handlers().invoke(args.function, event)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def invoke_endpoint(args: argparse.Namespace) -> str | None:
    """Where `kb invoke` sends the event: --endpoint, else KB_ENDPOINT, else nowhere (in-process)."""
    return args.endpoint or os.environ.get("KB_ENDPOINT") or None


def invoke_remote(call: Call, endpoint: str, function: str, event: dict) -> object:
    """The event through the Lambda Invoke API of a running service
    (`POST /2015-03-31/functions/{FunctionName}/invocations`, as `sam local start-lambda` serves it)."""
    return call(endpoint, "POST", f"/2015-03-31/functions/{seg(function)}/invocations", event)
