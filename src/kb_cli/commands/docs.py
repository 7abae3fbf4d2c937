"""`kb doc delete|disable|enable` and `kb tenant migrate`: a source's documents."""

from __future__ import annotations

import argparse
import sys

from ..http import seg
from . import Call, Subparsers, add_endpoint
from .inventory import add_json, cmd_doc_list, cmd_doc_show


def register_tenant(sub: Subparsers) -> None:
    p = sub.add_parser("tenant", help="document tenants")
    tnsub = p.add_subparsers(dest="action", required=True)
    t = tnsub.add_parser(
        "migrate", help="list a source's documents stored without a tenant; --apply assigns them one"
    )
    add_endpoint(t)
    t.add_argument("--source", required=True, help="exact id@version")
    t.add_argument("--tenant", required=True)
    t.add_argument("--apply", action="store_true", help="change them (default: only say what would change)")
    t.set_defaults(func=cmd_tenant_migrate)


def register_doc(sub: Subparsers) -> None:
    p = sub.add_parser("doc", help="list a source's documents, show one, or delete, disable or enable one")
    p.add_argument("action", choices=["delete", "disable", "enable", "list", "show"])
    p.add_argument("doc", nargs="?", metavar="DOC_ID", help="the document, as --doc-id: kb doc show ID")
    add_endpoint(p)
    p.add_argument("--source", required=True)
    p.add_argument("--doc-id", help="the document (every action but list)")
    add_json(p)
    p.set_defaults(func=cmd_doc)


def cmd_tenant_migrate(args: argparse.Namespace, call: Call) -> int:
    """Documents stored before every document named its tenant are visible to no one: list them, and with
    --apply assign them a tenant. Never silent: it prints what it finds and what it does."""
    path = f"/admin/v1/sources/{seg(args.source)}/tenant-migration"
    result = call(args.endpoint, "POST", path, {"tenant": args.tenant, "apply": bool(args.apply)})
    docs = result["documents"]
    verb = "assigned" if args.apply else "would assign (dry run; add --apply)"
    print(f"{args.source}: {len(docs)} document(s) without a tenant; {verb} tenant {args.tenant!r}")
    for doc_id in docs:
        print(f"  {doc_id}")
    return 0


def cmd_doc(args: argparse.Namespace, call: Call) -> int:
    """The document is `--doc-id` or the word after the action (`kb doc show ID --source S`), not both."""
    refused = _doc_argument(args)
    if refused:
        print(f"kb doc {args.action}: {refused}", file=sys.stderr)
        return 2
    if args.action == "list":
        return cmd_doc_list(args, call)
    if args.action == "show":
        return cmd_doc_show(args, call)
    base = f"/admin/v1/sources/{seg(args.source)}/documents/{seg(args.doc_id)}"
    if args.action == "delete":
        call(args.endpoint, "DELETE", base)
    else:
        call(args.endpoint, "POST", f"{base}/{args.action}", {})
    print(f"{args.action.removesuffix('e')}ed {args.source} {args.doc_id}")
    return 0


def _doc_argument(args: argparse.Namespace) -> str | None:
    """Why the document arguments do not fit the action (None: they do); sets `args.doc_id` from DOC_ID."""
    if args.action == "list":
        return f"list takes no document (given: {args.doc})" if args.doc is not None else None
    if args.doc is not None and args.doc_id is not None and args.doc != args.doc_id:
        return f"two documents given: {args.doc} and --doc-id {args.doc_id}"
    args.doc_id = args.doc_id if args.doc_id is not None else args.doc
    return None if args.doc_id else "the following arguments are required: DOC_ID (or --doc-id)"
