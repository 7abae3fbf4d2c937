"""I-INGEST with S3 as the data source, end to end: the S3-API server of `kb services start`
(versitygw on loopback, reached through boto3's own AWS_ENDPOINT_URL_S3 and credential variables), `kb
serve`, and `kb ingest --sync s3://bucket/prefix/`: created, changed and deleted objects are ingested,
re-ingested and deleted, a sidecar is no document, another prefix is untouched; and `kb serve` killed with
SIGKILL in the middle of an S3 sync resumes on restart and ends with every object ingested exactly once,
none half-written."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_cli import supervisor
from tests.e2e.conftest import KbServer, index_integrity
from tests.e2e.test_durability import own_group_kb_serve
from tests.e2e.test_ingestion_jobs import JOBS, SOURCE, kill_mid_job, until_completed
from tests.unit.test_extraction import make_pdf

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def s3_env() -> dict[str, str]:
    """The S3-API server's endpoint and key pair (started in the services state dir when not running)."""
    state = Path(os.environ.get("KB_S3_SERVICES_STATE") or os.environ.get("KB_SERVICES_STATE", ".kb-state"))
    if (
        not supervisor.status(state, (supervisor.S3,))[supervisor.S3]["running"]
        and shutil.which("go") is None
    ):
        pytest.skip("the S3-API server is not running and go is not on PATH to build it")
    endpoint = supervisor.ensure_running(state, (supervisor.S3,))["S3_ENDPOINT"]
    return {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_DEFAULT_REGION": "us-east-1"} | supervisor.s3_credentials(
        state
    )


@pytest.fixture
def bucket(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """A fresh bucket; the test's `kb serve` and `kb` find the server through the environment only."""
    import boto3

    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    client = boto3.Session().client("s3")  # a session of its own: the env of this test, not cached
    name = f"kb-e2e-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield client, name
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=name, Key=obj["Key"])
    client.delete_bucket(Bucket=name)


def ingest(kb: KbServer, uri: str, prefix: str, *extra: str) -> Any:
    return kb.kb("ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", prefix, *extra, uri)


def hits(kb: KbServer, query: str) -> list[dict]:
    return kb.knowledge("demo", "search", {"query": query}).json["hints"]


def test_i_ingest_s3_sync_created_changed_deleted_and_another_prefix_untouched(
    tmp_path: Path, bucket: tuple[Any, str]
) -> None:
    client, name = bucket
    term = f"zs3{uuid.uuid4().hex[:8]}"
    put = lambda key, body: client.put_object(Bucket=name, Key=key, Body=body)  # noqa: E731
    for i in range(6):
        put(f"docs/guide-{i}.md", f"# Guide {i}\n\n{term} guide {term}g{i}\n".encode())
    cover = "Cover page. " + "Routine maintenance keeps the plant running; inspect seals and filters. " * 12
    put("docs/manual.pdf", make_pdf([cover, f"{term} on page two {term}pdf"]))
    put("docs/guide-0.md.metadata.json", json.dumps({"metadataAttributes": {"team": "ops"}}).encode())
    put("docs/broken.pdf", b"%PDF-1.4 truncated")
    put("team/notes.md", f"# Notes\n\n{term} team {term}team\n".encode())
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, _):
        first = ingest(kb, f"s3://{name}/docs/", term, "--sync")
        assert first.returncode == 1, first.stderr  # a document failed (the corrupt PDF)
        assert (
            "ingested 7 document(s)" in first.stdout and "(0 unchanged, 1 failed, 0 deleted)" in first.stdout
        )
        assert f"{term}-broken: corrupt (s3://{name}/docs/broken.pdf)" in first.stderr
        team = ingest(kb, f"s3://{name}/team/", f"{term}team", "--sync")
        assert team.returncode == 0 and "ingested 1 document(s)" in team.stdout, team.stderr
        assert hits(kb, f"{term}g3") and hits(kb, f"{term}team")
        assert hits(kb, f"{term}pdf")[0]["summary"].startswith("p. 2: ")

        put("docs/guide-1.md", f"# Guide 1\n\n{term} rewritten {term}new1\n".encode())  # changed
        client.delete_object(Bucket=name, Key="docs/guide-2.md")  # deleted
        put("docs/guide-9.md", f"# Guide 9\n\n{term} created {term}g9\n".encode())  # created
        again = ingest(kb, f"s3://{name}/docs/", term, "--sync")
        assert again.returncode == 1, again.stderr
        # 7 objects: 5 unchanged by ETag, 1 changed, 1 created; the deleted one is deleted.
        assert "(5 unchanged, 1 failed, 1 deleted)" in again.stdout, again.stdout
        assert hits(kb, f"{term}new1") and not hits(kb, f"{term}g1")
        assert hits(kb, f"{term}g9") and not hits(kb, f"{term}g2")
        assert hits(kb, f"{term}team")  # the other prefix's document is untouched
        listed = kb.request("GET", JOBS).json["jobs"]
        assert listed[0]["errors"] == [
            {"doc_id": f"{term}-broken", "code": "corrupt", "uri": f"s3://{name}/docs/broken.pdf"}
        ]
        missing = ingest(kb, f"s3://{name}-missing/docs/", term, "--sync")
        assert missing.returncode != 0 and "bucket does not exist" in missing.stderr
        empty = ingest(kb, f"s3://{name}/dcos/", term, "--sync")
        assert empty.returncode != 0 and "no objects under the prefix" in empty.stderr
        assert hits(kb, f"{term}g3")  # a typo'd prefix deleted nothing


def test_i_ingest_s3_kill_9_mid_sync_then_restart_ingests_every_object_exactly_once(
    tmp_path: Path, bucket: tuple[Any, str]
) -> None:
    client, name = bucket
    term = f"zk{uuid.uuid4().hex[:8]}"
    paragraph = "Routine maintenance keeps the plant running; inspect seals, bearings and filters. " * 6
    objects = 400
    for i in range(objects):
        body = f"# Doc {i}\n\n{term} document {i} {term}x{i}\n\n" + "\n\n".join([paragraph] * 3)
        client.put_object(Bucket=name, Key=f"bulk/doc-{i:04d}.md", Body=body.encode())
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, proc):
        submitted = ingest(kb, f"s3://{name}/bulk/", term, "--sync", "--no-wait")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        seen = kill_mid_job(kb, proc, job_id)
    assert seen["state"] == "running" and seen["counts"]["queued"] > 0, "killed too late to test anything"
    documents, orphans, empty, unindexed = index_integrity(state, term)
    assert 50 <= documents < objects and orphans == empty == unindexed == 0  # whole documents only

    with own_group_kb_serve(state) as (kb, _):
        done = until_completed(kb, job_id, 180)
        counts = done["counts"]
        assert counts["failed"] == 0 and counts["queued"] == 0 and counts["deleted"] == 0, done["errors"]
        assert counts["done"] + counts["unchanged"] == objects == done["total"]
        assert index_integrity(state, term) == (objects, 0, 0, 0)  # exactly once each, none half-written
        for i in (0, 199, 399):
            assert hits(kb, f"{term}x{i}"), i
