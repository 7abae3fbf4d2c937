"""S3 sync throughput (I-INGEST): a sync job over a prefix of small Markdown objects on the local
S3-API server (`kb services`, versitygw), worked by the ingestion service on the embedded defaults (SQLite
state and index, BM25 only) — beside, in the same run, a raw ListObjectsV2 + GetObject + extract of the
same objects with the same client (the floor a sync cannot beat). Then the same sync again, every object
unchanged (ETag and size: no object read). Target: sync throughput >= 0.5x raw.

    .venv/bin/python bench/s3_sync_bench.py [--objects 10000] [--state DIR] [--model-dir DIR | --no-hybrid]

The S3-API server is started in --state (default $KB_S3_SERVICES_STATE, else $KB_SERVICES_STATE, else
.kb-state) when it is not running, and left running. The model directory (hybrid ranking) defaults to
none: the target is for BM25-only sources."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from knowledge_core.adapters.s3_objects import S3ObjectStore  # noqa: E402
from knowledge_core.bootstrap import Container  # noqa: E402
from knowledge_core.domain.admin_wire import IngestionJobRequest  # noqa: E402
from knowledge_core.domain.models import SourceDefinition  # noqa: E402
from knowledge_core.extraction import extract  # noqa: E402
from knowledge_core.ports import SystemClock  # noqa: E402
from knowledge_core.settings import Settings  # noqa: E402

from kb_cli import supervisor  # noqa: E402

SOURCE = "bench-s3@1.0.0"
PARAGRAPH = "Routine maintenance keeps the plant running: inspect the seals, bearings and filters. "


def s3_client(state: Path) -> Any:
    """A boto3 client of the local S3-API server, found the way the service finds it (the environment)."""

    endpoint = supervisor.ensure_running(state, (supervisor.S3,))["S3_ENDPOINT"]
    os.environ.update({"AWS_ENDPOINT_URL_S3": endpoint, "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.update(supervisor.s3_credentials(state))
    return S3ObjectStore(region="us-east-1").client


def upload(client: Any, bucket: str, prefix: str, n: int) -> int:
    """n small Markdown objects (about 0.5-1 KB each), uploaded in parallel (not timed)."""

    def put(i: int) -> int:
        body = f"# Object {i}\n\nSection of object {i}. " + PARAGRAPH * (3 + i % 5)
        client.put_object(Bucket=bucket, Key=f"{prefix}o{i:05d}.md", Body=body.encode())
        return len(body)

    with ThreadPoolExecutor(16) as pool:
        return sum(pool.map(put, range(n)))


def raw_list_get_extract(client: Any, bucket: str, prefix: str) -> tuple[float, int]:
    """ListObjectsV2 (pages of 1000) then GetObject + extract of each, one at a time like the worker."""
    started = time.perf_counter()
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    for key in keys:
        extract(key, client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return time.perf_counter() - started, len(keys)


def container(tmp: str, client: Any, model_dir: str | None) -> Container:
    settings = Settings(
        state_backend="sqlite",
        state_path=f"{tmp}/state.sqlite3",
        search_backend="sqlite",
        sqlite_path=f"{tmp}/index.sqlite3",
        token_secret="bench-secret-0123456789abcdef",
        embedding_model_dir=model_dir,
        ingest_directories=True,
    )
    c = Container(settings, clock=SystemClock(), object_store=S3ObjectStore(client=client))
    c.admin.publish_source(SourceDefinition.model_validate({"id": "bench-s3", "version": "1.0.0"}))
    return c


def sync(c: Container, uri: str) -> dict:
    request = IngestionJobRequest.model_validate(
        {"s3_uri": uri, "doc_id_prefix": "bench", "sync": True, "acl": {"tenant": "bench"}}
    )
    started = time.perf_counter()
    accepted = c.ingestion.submit(SOURCE, request)
    while c.ingestion.work("bench") is not None:
        pass
    seconds = time.perf_counter() - started
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.failed == 0, status
    return {
        "seconds": seconds,
        "objects": status.total,
        "done": status.counts.done,
        "unchanged": status.counts.unchanged,
        "objects_per_s": status.total / seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=10_000)
    default_state = os.environ.get("KB_S3_SERVICES_STATE") or os.environ.get("KB_SERVICES_STATE", ".kb-state")
    parser.add_argument("--state", default=default_state, help="the services state dir of the S3 server")
    parser.add_argument("--model-dir", help="rank hybrid (embeds every passage); default BM25 only")
    parser.add_argument("--no-hybrid", action="store_true", help="BM25 only (the default)")
    args = parser.parse_args()
    model_dir = None if args.no_hybrid else args.model_dir
    client = s3_client(Path(args.state))
    bucket, prefix = f"bench-{uuid.uuid4().hex[:10]}", "docs/"
    client.create_bucket(Bucket=bucket)
    results: dict = {"objects": args.objects, "ranking": "hybrid" if model_dir else "bm25"}
    try:
        size = upload(client, bucket, prefix, args.objects)
        print(f"corpus: {args.objects} Markdown objects, {size / 1e6:.1f} MB, s3://{bucket}/{prefix}")
        raw_s, listed = raw_list_get_extract(client, bucket, prefix)
        results["raw"] = {"seconds": raw_s, "objects_per_s": listed / raw_s}
        print(f"raw list+get+extract  {raw_s:7.2f} s  {listed / raw_s:8.1f} objects/s")
        with tempfile.TemporaryDirectory(prefix="kb-s3-bench-") as tmp:
            c = container(tmp, client, model_dir)
            first = sync(c, f"s3://{bucket}/{prefix}")
            again = sync(c, f"s3://{bucket}/{prefix}")
        results |= {"sync": first, "sync_unchanged": again}
        ratio = first["objects_per_s"] / results["raw"]["objects_per_s"]
        results["sync_vs_raw"] = ratio
        print(
            f"sync ({results['ranking']})           {first['seconds']:7.2f} s  {first['objects_per_s']:8.1f} "
            f"objects/s | {ratio:4.2f}x raw (target >= 0.5x)"
        )
        print(
            f"sync again, unchanged {again['seconds']:7.2f} s  {again['objects_per_s']:8.1f} objects/s "
            f"({again['unchanged']} unchanged by ETag and size)"
        )
    finally:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            for key in keys:
                client.delete_object(Bucket=bucket, Key=key["Key"])
        client.delete_bucket(Bucket=bucket)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "s3_sync_bench.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
