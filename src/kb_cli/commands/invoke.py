"""`kb invoke`: one event through a handler, as `sam local invoke` would."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..http import LOCAL_ENDPOINT, seg
from ..local_env import local_container
from . import Call, Subparsers, add_state


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "invoke",
        help="run one event through a handler, as sam local invoke would",
        description="Send one event to a function of a running kb serve (its Lambda Invoke API): --endpoint, "
        f"else KB_ENDPOINT, else the kb serve at {LOCAL_ENDPOINT} when one answers there. With none, or "
        "with --in-process, the function runs in this process on a fresh embedded state that holds only "
        "the demo workspace (said at once: your own sources, agents and tokens are not there).",
    )
    p.add_argument("function", help="logical id (SearchFunction) or short name (search)")
    add_state(p)
    p.add_argument("-e", "--event", required=True)
    p.add_argument(
        "--endpoint",
        help=f"a running kb serve (env KB_ENDPOINT); default: the one at {LOCAL_ENDPOINT} if it answers, "
        "else in-process on a fresh embedded state",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run in this process on a fresh embedded state with the demo workspace, even if a kb serve "
        "answers",
    )
    p.set_defaults(func=cmd_invoke)


def cmd_invoke(args: argparse.Namespace, call: Call) -> int:
    from ..events import load_event

    event = load_event(args.event)
    endpoint = invoke_endpoint(args)
    result = invoke_remote(call, endpoint, args.function, event) if endpoint else _in_process(args, event)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def _in_process(args: argparse.Namespace, event: dict[str, Any]) -> object:
    """The event through the handler in this process, on a fresh embedded state seeded with the demo: said
    first, before anything slow (imports, the demo's embedding)."""
    why = (
        "--in-process"
        if args.in_process
        else f"no --endpoint or KB_ENDPOINT, and no kb serve at {LOCAL_ENDPOINT}"
    )
    print(
        "kb invoke: running in-process on a fresh embedded state that holds only the demo workspace "
        f"({why}): your own sources, agents and tokens are not there, and embedding the demo can take "
        "minutes. To use your state, start `kb serve` (make serve) or pass --endpoint URL (or KB_ENDPOINT).",
        file=sys.stderr,
        flush=True,
    )
    from .. import demo
    from ..gateway import Handlers

    # Handler output (EMF metrics, logs) goes to stderr, as with `sam local invoke`: stdout is the result.
    with tempfile.TemporaryDirectory(prefix="kb-invoke-") as tmp, contextlib.redirect_stdout(sys.stderr):
        demo.seed(local_container(Path(tmp)), with_token=False)
        return Handlers().invoke(args.function, event)


def invoke_endpoint(args: argparse.Namespace) -> str | None:
    """Where `kb invoke` sends the event: --endpoint, else KB_ENDPOINT, else the local kb serve if one
    listens on its default port, else nowhere (in-process); `--in-process` always runs here."""
    if args.in_process:
        return None
    given = args.endpoint or os.environ.get("KB_ENDPOINT")
    if given:
        return str(given)
    if listening(LOCAL_ENDPOINT):
        print(f"kb invoke: sending to the kb serve at {LOCAL_ENDPOINT}", file=sys.stderr)
        return LOCAL_ENDPOINT
    return None


def listening(endpoint: str, timeout_s: float = 0.5) -> bool:
    """Whether something accepts connections at `endpoint`'s host and port (refused at once if not)."""
    url = urlsplit(endpoint)
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=timeout_s):
            return True
    except OSError:
        return False


def invoke_remote(call: Call, endpoint: str, function: str, event: dict) -> object:
    """The event through the Lambda Invoke API of a running service
    (`POST /2015-03-31/functions/{FunctionName}/invocations`, as `sam local start-lambda` serves it)."""
    return call(endpoint, "POST", f"/2015-03-31/functions/{seg(function)}/invocations", event)
