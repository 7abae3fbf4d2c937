"""`kb job status|list|cancel`: ingestion jobs of a source."""

from __future__ import annotations

import argparse
import json
import sys

from ..http import seg
from . import Call, Subparsers, add_endpoint
from .inventory import readable_time


def register(sub: Subparsers) -> None:
    p = sub.add_parser("job", help="ingestion jobs: status of one, the latest of a source, or cancel one")
    add_endpoint(p)
    p.add_argument("--source", help="exact id@version")
    p.add_argument("--json", action="store_true", help="status: the whole job as JSON")
    actions = p.add_subparsers(dest="action", required=True, metavar="{status,list,cancel}")
    # Flags before or after the action (`kb job status --source S JOB_ID`, the README's order, included):
    # each action takes them too, without a default of its own that would hide the job parser's.
    helps = {
        "status": "one job's counts, errors, timestamps",
        "list": "the source's latest jobs",
        "cancel": "stop a job after its current batch (state cancelled, counts kept)",
    }
    for action, help_text in helps.items():
        a = actions.add_parser(action, help=help_text)
        if action != "list":
            a.add_argument("job_id", nargs="?")
        a.add_argument(
            "--endpoint", default=argparse.SUPPRESS, help="kb serve / API base URL (env KB_ENDPOINT)"
        )
        a.add_argument("--source", default=argparse.SUPPRESS, help="exact id@version")
        a.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the whole job as JSON")
        a.set_defaults(func=cmd_job)


def job_line(job: dict) -> str:
    counts = job["counts"]
    handled = counts["done"] + counts["unchanged"] + counts["failed"]
    return (
        f"job {job['job_id']} {job['state']}: {handled}/{job['total']} documents "
        f"({counts['done']} done, {counts['unchanged']} unchanged, {counts['failed']} failed, "
        f"{counts['deleted']} deleted), {job['passages']} passages"
    )


def cmd_job(args: argparse.Namespace, call: Call) -> int:
    if not args.source:
        print(f"kb job {args.action}: the following arguments are required: --source", file=sys.stderr)
        return 2
    base = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs"
    if args.action == "list":
        jobs = call(args.endpoint, "GET", base)["jobs"]
        for job in jobs:
            print(f"{readable_time(job['created_at'])}  {job_line(job)}")
        print(f"{len(jobs)} job(s) of {args.source} (the latest 20)", file=sys.stderr)
        return 0
    if not getattr(args, "job_id", None):
        raise SystemExit(f"kb job {args.action}: give a JOB_ID")
    if args.action == "cancel":  # stops after its current batch, counts kept
        job = call(args.endpoint, "POST", f"{base}/{seg(args.job_id)}/cancel")
    else:
        job = call(args.endpoint, "GET", f"{base}/{seg(args.job_id)}")
    if args.json:
        print(json.dumps(job, ensure_ascii=False, indent=2))
        return 0
    print(job_line(job))
    if job.get("cancel_requested") and job["state"] != "cancelled":
        print("  cancel requested: the job stops after its current batch")
    for key in ("created_at", "started_at", "finished_at"):
        if job[key]:
            print(f"  {key}: {readable_time(job[key])}")
    for error in job["errors"]:
        print(f"  {error['doc_id']}: {error['code']}")
    return 0
