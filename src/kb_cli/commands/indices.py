"""`kb search-indices status|prepare|compact`: how the passages index is stored, its schema, and merging its
segments after a bulk load (issue 23). Ingestion jobs compact on their own when they leave it fragmented."""

from __future__ import annotations

import argparse
import json

from . import Call, Subparsers, add_endpoint
from .inventory import add_json, emit

PATH = "/admin/v1/search-indices"


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "search-indices", help="the search indices: segments (status), schema (prepare), merging (compact)"
    )
    p.add_argument("action", choices=["status", "prepare", "compact"])
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
        _show(result, args.json)
        if not args.json:
            print(
                "compaction started in the background: `kb search-indices status` shows it end"
                if result["started"]
                else "nothing to compact: every index is at its target segments"
            )
        return 0
    _show(call(args.endpoint, "GET", PATH), args.json)
    return 0
