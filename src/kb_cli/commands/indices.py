"""`kb search-indices status|prepare|compact`: how the passages index is stored, its schema, and merging its
segments after a bulk load. Ingestion jobs compact on their own when they leave it fragmented."""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import Call, Subparsers, add_endpoint
from .inventory import add_json, emit

PATH = "/admin/v1/search-indices"


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "search-indices", help="the search indices: segments (status), schema (prepare), merging (compact)"
    )
    p.add_argument("action", choices=["status", "prepare", "compact"])
    p.add_argument(
        "--wait",
        action="store_true",
        help="compact: return once no index is merging (polls `status`; exit 1 after --timeout seconds)",
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="compact --wait: at most this many seconds")
    add_endpoint(p)
    add_json(p)
    p.set_defaults(func=cmd_search_indices)


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _show(listing: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return
    rows = [
        [
            i["index"],
            str(i["shards"]),
            str(i["segments"]),
            str(i["target_segments"]),
            _size(i["size_bytes"]),
            "yes" if i["fragmented"] else "no",
            "yes" if i["merging"] else "no",
        ]
        for i in listing["indices"]
    ]
    emit(rows, ["INDEX", "SHARDS", "SEGMENTS", "TARGET", "SIZE", "FRAGMENTED", "MERGING"], "index(es)")


def cmd_search_indices(args: argparse.Namespace, call: Call) -> int:
    if args.action == "prepare":
        call(args.endpoint, "POST", PATH, {})
        print("search indices prepared")
        return 0
    if args.action == "compact":
        result = call(args.endpoint, "POST", f"{PATH}/compact", {})
        if not args.wait:
            _show(result, args.json)
            if not args.json:
                print(
                    "compaction started in the background: `kb search-indices status` shows it end"
                    if result["started"]
                    else "nothing to compact: every index is at its target segments"
                )
            return 0
        return _wait(args, call, result["started"])
    _show(call(args.endpoint, "GET", PATH), args.json)
    return 0


def _wait(args: argparse.Namespace, call: Call, started: bool, poll_s: float = 2.0) -> int:
    """`compact --wait`: poll the listing until the merge has ended — nothing merging, and either a merge was
    seen or every index is at its target (OpenSearch may list a merge just asked for a moment later) — then
    show it; 1 on timeout."""
    deadline = time.monotonic() + args.timeout
    seen = not started
    while True:
        listing = call(args.endpoint, "GET", PATH)
        indices = listing["indices"]
        merging = any(i["merging"] for i in indices)
        seen = seen or merging
        if not merging and (seen or all(i["segments"] <= i["target_segments"] for i in indices)):
            _show(listing, args.json)
            if not args.json:
                print("compacted" if started else "nothing to compact: every index is at its target segments")
            return 0
        if time.monotonic() >= deadline:
            _show(listing, args.json)
            print(f"kb: still merging after {args.timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(poll_s)
