"""What the service holds, from the CLI: `kb source list`, `kb doc list|show`,
`kb agent list`, `kb workspace list`. Each prints an aligned table with a header (or `--json`: the admin
API's listing as is); times are UTC, to the second."""

from __future__ import annotations

import argparse
import json
import sys

from ..http import seg
from . import Call, Subparsers, add_endpoint


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="list: the admin API's listing as JSON")


def register_agent(sub: Subparsers) -> None:
    p = sub.add_parser("agent", help="published agent versions")
    asub = p.add_subparsers(dest="action", required=True)
    a = asub.add_parser("list", help="every agent version: routing mode, tool calling, routes pointing at it")
    add_endpoint(a)
    add_json(a)
    a.set_defaults(func=cmd_agent_list)


def table(rows: list[list[str]], header: list[str]) -> str:
    """Columns padded to their widest cell; the last column is not padded (no trailing blanks)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)) + "  " + row[-1]
        for row in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def readable_time(value: str | int | float | None) -> str:
    """ISO-8601 UTC or epoch seconds as `2026-12-01 22:43:39Z`; `—` when there is none."""
    from datetime import UTC, datetime

    if value is None or value == "":
        return "—"
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return value.replace("T", " ")


def emit(rows: list[list[str]], header: list[str], what: str) -> None:
    if rows:
        print(table(rows, header))
    print(f"{len(rows)} {what}", file=sys.stderr)


def cmd_source_list(args: argparse.Namespace, call: Call) -> int:
    listing = call(args.endpoint, "GET", "/admin/v1/sources")
    if args.json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    rows = [
        [
            s["key"],
            s["status"],
            "enabled" if s["enabled"] else "disabled",
            "yes" if s["searchable"] else "no",
            str(s["top_k"]),
            str(s["min_score"]),
            s["description"],
        ]
        for s in listing["sources"]
    ]
    emit(rows, ["SOURCE", "STATUS", "SWITCH", "SEARCHABLE", "TOPK", "MINSCORE", "DESCRIPTION"], "source(s)")
    return 0


def metadata_text(metadata: dict | None) -> str:
    """A document's metadata (SPEC §8) on one line, `key=value` in key order, each as `kb ingest --meta`
    would read it back (lists and numbers as JSON; a string quoted only where it would read as another
    type, so `code="2024"` stays apart from `year=2024`); `—` when it has none."""
    from knowledge_core.domain.metadata_sources import MetadataError, parse_meta_flag

    if not metadata:
        return "—"

    def shown(value: object) -> str:
        try:
            if isinstance(value, str) and parse_meta_flag(f"k={value}")[1] == value:
                return value
        except MetadataError:
            pass  # `[eu`: not JSON, so quoted
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    return " ".join(f"{k}={shown(v)}" for k, v in sorted(metadata.items()))


def documents(args: argparse.Namespace, call: Call) -> dict:
    return call(args.endpoint, "GET", f"/admin/v1/sources/{seg(args.source)}/documents")


def cmd_doc_list(args: argparse.Namespace, call: Call) -> int:
    listing = documents(args, call)
    if args.json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    rows = [
        [
            d["doc_id"],
            d.get("tenant") or "—",
            d["status"],
            str(d["chars"]),
            readable_time(d["updated_at"]),
            metadata_text(d.get("metadata")),
            d["title"],
        ]
        for d in listing["documents"]
    ]
    header = ["DOC_ID", "TENANT", "STATUS", "CHARS", "UPDATED", "METADATA", "TITLE"]
    emit(rows, header, f"document(s) in {args.source}")
    if listing.get("truncated"):
        print(f"(the first {len(rows)} only)", file=sys.stderr)
    return 0


def cmd_doc_show(args: argparse.Namespace, call: Call) -> int:
    found = [d for d in documents(args, call)["documents"] if d["doc_id"] == args.doc_id]
    if not found:
        print(f"kb doc show: {args.source} has no document {args.doc_id!r}", file=sys.stderr)
        return 1
    doc = found[0]
    if args.json:
        print(json.dumps(doc, ensure_ascii=False, indent=2))
        return 0
    fields = [
        ("doc_id", doc["doc_id"]),
        ("title", doc["title"]),
        ("tenant", doc.get("tenant") or "— (none: visible to no one; see kb tenant migrate)"),
        ("status", doc["status"]),
        ("chars", str(doc["chars"])),
        ("revision", doc["revision"]),
        ("updated", readable_time(doc["updated_at"])),
        ("metadata", metadata_text(doc.get("metadata"))),
    ]
    print("\n".join(f"{k + ':':10} {v}" for k, v in fields))
    return 0


def cmd_agent_list(args: argparse.Namespace, call: Call) -> int:
    listing = call(args.endpoint, "GET", "/admin/v1/agents")
    if args.json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    rows = [
        [
            a["key"],
            a["mode"] or "—",
            "yes" if a["tool_mode"] else "no",
            ",".join(a["routes"]) or "—",
            ",".join(f"{k['id']}@{k['version']}" for k in a["definition"].get("allowedKnowledge", [])),
        ]
        for a in listing["agents"]
    ]
    emit(rows, ["AGENT", "MODE", "TOOLS", "ROUTES", "ALLOWED KNOWLEDGE"], "agent version(s)")
    return 0


def cmd_workspace_list(args: argparse.Namespace, call: Call) -> int:
    listing = call(args.endpoint, "GET", "/admin/v1/workspaces")
    if args.json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    rows = [[w["route"], w["agent"]] for w in listing["workspaces"]]
    emit(rows, ["ROUTE", "AGENT"], "workspace route(s)")
    return 0
