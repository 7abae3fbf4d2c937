"""F-FILTER metadata through `kb serve` and the real S3-API server (`kb services`): `kb ingest --meta` over
an S3 prefix with Bedrock sidecars, the metadata in `kb doc show --json`, a filtered search that finds only
the matching document, and a changed sidecar re-ingesting its object on the next sync while an unchanged
one is skipped by ETag."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_durability import own_group_kb_serve
from tests.e2e.test_ingestion_jobs import SOURCE
from tests.e2e.test_s3_ingestion import bucket, hits, ingest, s3_env  # noqa: F401

pytestmark = pytest.mark.timeout(600)


def sidecar(**values: Any) -> bytes:
    return json.dumps({"metadataAttributes": values}).encode()


def test_s3_sidecars_meta_and_filtered_search_through_kb_serve(
    tmp_path: Path,
    bucket: tuple[Any, str],  # noqa: F811
) -> None:
    client, name = bucket
    term = f"zmeta{uuid.uuid4().hex[:8]}"
    put = lambda key, body: client.put_object(Bucket=name, Key=key, Body=body)  # noqa: E731
    put("docs/eu.md", f"# EU pumps\n\n{term} pump maintenance\n".encode())
    put("docs/eu.md.metadata.json", sidecar(region="eu", year=2024))
    put("docs/us.md", f"# US pumps\n\n{term} pump maintenance\n".encode())
    put("docs/us.md.metadata.json", sidecar(region="us", year=2023))
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, _):
        first = ingest(
            kb, f"s3://{name}/docs/", term, "--sync", "--meta", "site=plant-7", "--meta", "region=apac"
        )
        assert first.returncode == 0 and "ingested 2 document(s)" in first.stdout, first.stderr
        assert "(0 unchanged, 0 failed, 0 deleted)" in first.stdout  # the sidecars are not documents
        shown = kb.kb("doc", "show", "--source", SOURCE, "--doc-id", f"{term}-eu", "--json")
        # --meta wins over the sidecar key by key: region from the flag, year from the sidecar.
        assert json.loads(shown.stdout)["metadata"] == {"region": "apac", "year": 2024, "site": "plant-7"}
        again = ingest(kb, f"s3://{name}/docs/", term, "--sync", "--meta", "site=plant-7")
        assert "(0 unchanged, 0 failed, 0 deleted)" in again.stdout  # --meta changed: both re-written
        newer = {"greaterThanOrEquals": {"key": "year", "value": 2024}}
        found = kb.knowledge("demo", "search", {"query": term, "filter": newer}).json["hints"]
        assert [h["title"] for h in found] == ["EU pumps"]
        put("docs/us.md.metadata.json", sidecar(region="us", year=2025))
        changed = ingest(kb, f"s3://{name}/docs/", term, "--sync", "--meta", "site=plant-7")
        assert "(1 unchanged, 0 failed, 0 deleted)" in changed.stdout, changed.stdout  # eu skipped by ETag
        found = kb.knowledge("demo", "search", {"query": term, "filter": newer}).json["hints"]
        assert sorted(h["title"] for h in found) == ["EU pumps", "US pumps"]
        assert hits(kb, term)  # unfiltered: both
