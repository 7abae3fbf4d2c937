"""`kb ingest`: documents from a file or a directory through ingestion jobs (I-INGEST), and the wait for
them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..http import seg
from . import Call, Subparsers, add_endpoint
from .jobs import job_line as _job_line


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "ingest",
        help="create or replace documents from a file or a directory (Markdown, text, HTML, PDF, DOCX) "
        "through an ingestion job",
    )
    add_endpoint(p)
    p.add_argument("--source", required=True, help="exact id@version")
    p.add_argument("--doc-id", help="document id (a prefix for a directory)")
    p.add_argument("--title")
    p.add_argument("--tenant", default="default", help="the documents' tenant (SPEC §1: always named)")
    p.add_argument(
        "--share-tenant", action="append", metavar="TENANT", help="also visible to this tenant (repeatable)"
    )
    p.add_argument(
        "--sync", action="store_true", help="directory: also delete documents under the prefix that left it"
    )
    p.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    p.add_argument("file")
    p.set_defaults(func=cmd_ingest)


def _is_loopback(endpoint: str) -> bool:
    from urllib.parse import urlparse

    return (urlparse(endpoint).hostname or "") in ("127.0.0.1", "localhost", "::1")


def _acl(args: argparse.Namespace) -> dict:
    """The documents' tenant (SPEC §1: always named) and the tenants they are shared with."""
    return {"tenant": args.tenant, "shared_tenants": list(args.share_tenant or [])}


def _file_document(args: argparse.Namespace, doc_id: str, file: Path, uri: str, title: str | None) -> dict:
    """A file as a job document: Markdown/text as a body (title from its `# heading`), other formats as
    bytes the worker extracts. `uri` is what the caller named or the path relative to the directory: never
    this machine's absolute path, which agents would see in references."""
    import base64

    from knowledge_core.domain.ingestion import file_format

    from ..demo import markdown_document

    source = {"uri": uri}
    acl = _acl(args)
    if file_format(file.name) in ("markdown", "text"):
        doc = markdown_document(args.source, doc_id, file.read_text(encoding="utf-8"), title)
        return {
            "doc_id": doc_id,
            "title": doc.title,
            "body": doc.body,
            "structured_source": source,
            "acl": acl,
        }
    document = {
        "doc_id": doc_id,
        "filename": file.name,
        "content_base64": base64.b64encode(file.read_bytes()).decode("ascii"),
        "structured_source": source,
        "acl": acl,
    }
    if title:
        document["title"] = title
    return document


def _inline_jobs(args: argparse.Namespace, path: Path) -> list[dict]:
    """Job requests carrying the files themselves (a single file, or a directory on a remote endpoint),
    at most 500 documents and about 5 MB each."""
    from knowledge_core.domain.ingestion import FORMATS, directory_doc_id

    if path.is_dir():
        prefix = args.doc_id or ""
        files = [
            (directory_doc_id(prefix, p.relative_to(path)), p, p.relative_to(path).as_posix())
            for p in sorted(path.rglob("*"))
            if p.is_file() and p.suffix.lower() in FORMATS
        ]
        title = None
    else:
        if not args.doc_id:
            raise SystemExit("kb ingest: --doc-id is required for a single file")
        files, title = [(args.doc_id, path, args.file)], args.title
    jobs: list[dict] = []
    batch: list[dict] = []
    size = 0
    for doc_id, file, uri in files:
        document = _file_document(args, doc_id, file, uri, title)
        weight = len(document.get("body") or document.get("content_base64") or "")
        if batch and (len(batch) >= 500 or size + weight > 5_000_000):
            jobs.append({"documents": batch})
            batch, size = [], 0
        batch.append(document)
        size += weight
    if batch:
        jobs.append({"documents": batch})
    return jobs


def _wait_for_jobs(args: argparse.Namespace, call: Call, job_ids: list[str], total: int) -> list[dict]:
    """Poll the jobs until they complete: a progress bar on a terminal (documents, passages, rate, ETA),
    a plain line every few seconds otherwise."""
    import time

    from tqdm import tqdm

    base = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs/"
    tty = sys.stderr.isatty()
    bar = tqdm(total=total, unit="doc", disable=not tty, dynamic_ncols=True)
    finished: dict[str, dict] = {}
    last_line = 0.0
    try:
        while len(finished) < len(job_ids):
            jobs = [finished.get(j) or call(args.endpoint, "GET", base + seg(j)) for j in job_ids]
            for job in jobs:
                if job["state"] == "completed":
                    finished[job["job_id"]] = job
            handled = sum(
                j["counts"]["done"] + j["counts"]["unchanged"] + j["counts"]["failed"] for j in jobs
            )
            bar.update(handled - bar.n)
            bar.set_postfix(passages=sum(j["passages"] for j in jobs), refresh=False)
            if not tty and (time.monotonic() - last_line > 2 or len(finished) == len(job_ids)):
                for job in jobs:
                    print(_job_line(job), flush=True)
                last_line = time.monotonic()
            if len(finished) < len(job_ids):
                time.sleep(0.2)
    finally:
        bar.close()
    return [finished[j] for j in job_ids]


def cmd_ingest(args: argparse.Namespace, call: Call) -> int:
    path = Path(args.file)
    sync = getattr(args, "sync", False)  # callers building their own Namespace may leave the job flags out
    if path.is_dir() and _is_loopback(args.endpoint):
        # kb serve reads the directory itself (its admin API answers on loopback only).
        body: dict[str, Any] = {
            "directory": str(path.resolve()),
            "doc_id_prefix": args.doc_id or "",
            "acl": _acl(args),
        }
        if sync:
            body["sync"] = True
        requests = [body]
    else:
        if sync:
            raise SystemExit("kb ingest: --sync needs a directory and a kb serve on this machine")
        requests = _inline_jobs(args, path)
    responses = [
        call(args.endpoint, "POST", f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs", request)
        for request in requests
    ]
    accepted = [a for a in responses if isinstance(a, dict) and "job_id" in a]
    if getattr(args, "no_wait", False):
        for job in accepted:
            print(job["job_id"])
        return 0
    jobs = _wait_for_jobs(args, call, [a["job_id"] for a in accepted], sum(a["total"] for a in accepted))
    ingested = sum(j["counts"]["done"] + j["counts"]["unchanged"] for j in jobs)
    failed = [(e["doc_id"], e["code"]) for j in jobs for e in j["errors"]]
    print(f"ingested {ingested} document(s) into {args.source}", end="")
    unchanged = sum(j["counts"]["unchanged"] for j in jobs)
    deleted = sum(j["counts"]["deleted"] for j in jobs)
    print(f" ({unchanged} unchanged, {len(failed)} failed, {deleted} deleted)")
    for doc_id, code in failed:
        print(f"  {doc_id}: {code}", file=sys.stderr)
    return 0
