"""`kb job status|list`: ingestion jobs of a source."""

from __future__ import annotations

import argparse
import json

from ..http import seg
from . import Call, Subparsers, add_endpoint


def register(sub: Subparsers) -> None:
    p = sub.add_parser("job", help="ingestion jobs: status of one, or the latest of a source")
    p.add_argument("action", choices=["status", "list"])
    p.add_argument("job_id", nargs="?")
    add_endpoint(p)
    p.add_argument("--source", required=True, help="exact id@version")
    p.add_argument("--json", action="store_true", help="status: the whole job as JSON")
    p.set_defaults(func=cmd_job)


def job_line(job: dict) -> str:
    counts = job["counts"]
    handled = counts["done"] + counts["unchanged"] + counts["failed"]
    return (
        f"job {job['job_id']} {job['state']}: {handled}/{job['total']} documents "
        f"({counts['done']} done, {counts['unchanged']} unchanged, {counts['failed']} failed, "
        f"{counts['deleted']} deleted), {job['passages']} passages"
    )


def cmd_job(args: argparse.Namespace, call: Call) -> int:
    base = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs"
    if args.action == "list":
        for job in call(args.endpoint, "GET", base)["jobs"]:
            print(f"{job['created_at']}  {job_line(job)}")
        return 0
    if not args.job_id:
        raise SystemExit("kb job status: give a JOB_ID")
    job = call(args.endpoint, "GET", f"{base}/{seg(args.job_id)}")
    if args.json:
        print(json.dumps(job, ensure_ascii=False, indent=2))
        return 0
    print(job_line(job))
    for key in ("created_at", "started_at", "finished_at"):
        if job[key]:
            print(f"  {key}: {job[key]}")
    for error in job["errors"]:
        print(f"  {error['doc_id']}: {error['code']}")
    return 0
