"""Document metadata from S3 (SPEC §7), on moto's in-process S3: a prefix's sidecars are
read as their objects' metadata and never ingested or counted; a changed sidecar re-ingests its object
though the object's ETag is equal (and an unchanged one still skips without a read); a malformed sidecar is
its document's typed error; object events for a sidecar re-ingest its file; sync deletion is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from knowledge_core.adapters.s3_objects import S3ObjectStore
from knowledge_core.bootstrap import Container
from knowledge_core.domain.s3_source import ObjectEvent

from tests.conftest import FakeClock
from tests.unit.test_s3_ingestion import BUCKET, SOURCE, container, put, s3, sync  # noqa: F401


def attributes(**values: Any) -> str:
    return json.dumps({"metadataAttributes": values})


def metadata(c: Container, doc_id: str) -> dict[str, Any] | None:
    doc = c.backend.get_document(SOURCE, doc_id)
    assert doc is not None
    return doc.metadata


def test_i_ingest_s3_sidecars_are_metadata_and_a_sidecar_change_re_ingests(
    tmp_path: Path,
    clock: FakeClock,
    s3: Any,  # noqa: F811
) -> None:
    reads: list[str] = []
    store = S3ObjectStore(client=s3)
    original = store.get_object

    def counting(bucket: str, key: str, max_bytes: int) -> tuple[bytes, str]:
        reads.append(key)
        return original(bucket, key, max_bytes)

    store.get_object = counting  # type: ignore[method-assign]
    c = container(tmp_path, clock, store)
    put(s3, "docs/pumps.md", "# Pumps\n\nCentrifugal pumps move water.")
    put(s3, "docs/pumps.md.metadata.json", attributes(region="eu", year=2024))
    put(s3, "docs/valves.md", "# Valves\n\nGate valves.")
    put(s3, "docs/orphan.md.metadata.json", attributes(region="us"))
    first = sync(c, f"s3://{BUCKET}/docs/")
    assert first.total == 2 and (first.counts.done, first.counts.failed) == (2, 0)
    assert metadata(c, "kb-pumps") == {"region": "eu", "year": 2024} and metadata(c, "kb-valves") is None
    reads.clear()
    again = sync(c, f"s3://{BUCKET}/docs/")
    assert again.counts.unchanged == 2 and reads == []  # ETags of object and sidecar equal: no read
    put(s3, "docs/pumps.md.metadata.json", attributes(region="us", year=2024))
    changed = sync(c, f"s3://{BUCKET}/docs/")
    assert (changed.counts.done, changed.counts.unchanged) == (1, 1) and metadata(c, "kb-pumps")[
        "region"
    ] == "us"
    s3.delete_object(Bucket=BUCKET, Key="docs/pumps.md.metadata.json")
    removed = sync(c, f"s3://{BUCKET}/docs/")
    assert removed.counts.done == 1 and removed.counts.deleted == 0 and metadata(c, "kb-pumps") is None


def test_i_ingest_s3_job_metadata_wins_and_a_change_of_it_re_ingests(
    tmp_path: Path,
    clock: FakeClock,
    s3: Any,  # noqa: F811
) -> None:
    from knowledge_core.domain.admin_wire import IngestionJobRequest
    from knowledge_core.domain.wire import parse_request

    c = container(tmp_path, clock, S3ObjectStore(client=s3))
    put(s3, "docs/pumps.md", "# Pumps\n\nCentrifugal pumps move water.")
    put(s3, "docs/pumps.md.metadata.json", attributes(region="eu", team="ops"))

    def job(meta: dict[str, Any]) -> Any:
        body = {
            "s3_uri": f"s3://{BUCKET}/docs/",
            "doc_id_prefix": "kb",
            "acl": {"tenant": "acme"},
            "metadata": meta,
        }
        accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
        c.ingestion.work("w1", job_id=accepted.job_id)
        return c.ingestion.status(SOURCE, accepted.job_id)

    assert job({"region": "apac"}).counts.done == 1
    assert metadata(c, "kb-pumps") == {"region": "apac", "team": "ops"}
    assert job({"region": "apac"}).counts.unchanged == 1
    assert job({"region": "emea"}).counts.done == 1 and metadata(c, "kb-pumps")["region"] == "emea"


def test_i_ingest_s3_malformed_sidecar_is_a_typed_document_error(
    tmp_path: Path,
    clock: FakeClock,
    s3: Any,  # noqa: F811
) -> None:
    c = container(tmp_path, clock, S3ObjectStore(client=s3))
    put(s3, "docs/a.md", "# A\n\nalpha")
    put(s3, "docs/a.md.metadata.json", "{not really json")
    put(s3, "docs/b.md", "# B\n\nbeta")
    status = sync(c, f"s3://{BUCKET}/docs/")
    assert (status.counts.done, status.counts.failed) == (1, 1)
    assert [(e.doc_id, e.code) for e in status.errors] == [("kb-a", "invalid_metadata")]
    assert "not really" not in status.model_dump_json()


def test_i_ingest_s3_sidecar_events_re_ingest_their_file(
    tmp_path: Path,
    clock: FakeClock,
    s3: Any,  # noqa: F811
) -> None:
    c = container(
        tmp_path,
        clock,
        S3ObjectStore(client=s3),
        ingest_directories=False,
        ingest_s3_uri=f"s3://{BUCKET}/docs/",
        ingest_s3_source=SOURCE,
        ingest_s3_tenant="acme",
    )
    events = c.s3_events
    assert events is not None
    put(s3, "docs/a.md", "# A\n\nalpha")
    put(s3, "docs/a.md.metadata.json", attributes(region="eu"))
    assert events.handle([ObjectEvent("created", BUCKET, "docs/a.md", "e", 10)]) == 1
    while c.ingestion.work("w1") is not None:
        pass
    assert metadata(c, "s3-a") == {"region": "eu"}  # a created object's sidecar is read with it
    put(s3, "docs/a.md.metadata.json", attributes(region="us"))
    assert events.handle([ObjectEvent("created", BUCKET, "docs/a.md.metadata.json", "e2", 20)]) == 1
    while c.ingestion.work("w1") is not None:
        pass
    assert metadata(c, "s3-a") == {"region": "us"}
    s3.delete_object(Bucket=BUCKET, Key="docs/a.md.metadata.json")
    assert events.handle([ObjectEvent("removed", BUCKET, "docs/a.md.metadata.json")]) == 1
    while c.ingestion.work("w1") is not None:
        pass
    assert metadata(c, "s3-a") is None and set(c.backend.document_ids(SOURCE)) == {"s3-a"}
    # A sidecar event whose file is not there does nothing (and deletes nothing).
    assert events.handle([ObjectEvent("created", BUCKET, "docs/ghost.md.metadata.json", "e", 1)]) == 0
