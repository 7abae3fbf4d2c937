"""F-FILTER metadata on every backend: an ingestion job's documents carry their `metadata` through the job
store (SQLite, or DynamoDB items) into the search backend (SQLite, or OpenSearch), and the "unchanged" rule
compares it (SPEC §1): the same metadata again is skipped, other metadata is an update."""

from __future__ import annotations

import json

from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.models import SourceDefinition
from knowledge_core.domain.wire import parse_request

from tests.contract.conftest import PRINCIPAL, World


def test_i_ingest_job_metadata_is_stored_and_compared_on_every_backend(world: World) -> None:
    key = world.key("meta-jobs")
    id_, version = key.split("@")
    world.c.admin.publish_source(SourceDefinition.model_validate({"id": id_, "version": version}))

    def job(metadata: dict) -> dict:
        doc = {"doc_id": "note", "title": "Note", "body": "pump seals", "acl": {"tenant": PRINCIPAL.tenant}}
        body = {"documents": [doc | {"metadata": metadata}]}
        accepted = world.c.ingestion.submit(key, parse_request(IngestionJobRequest, json.dumps(body)))
        world.c.ingestion.work("w1", job_id=accepted.job_id)
        return world.c.ingestion.status(key, accepted.job_id).counts.model_dump()

    assert job({"region": "eu", "year": 2024, "tags": ["a"], "public": True})["done"] == 1
    stored = world.c.backend.get_document(key, "note")
    assert stored is not None and stored.metadata == {
        "region": "eu",
        "year": 2024,
        "tags": ["a"],
        "public": True,
    }
    assert job({"region": "eu", "year": 2024, "tags": ["a"], "public": True})["unchanged"] == 1
    assert job({"region": "us"})["done"] == 1
    listed = {d.doc_id: d.metadata for d in world.c.admin.list_documents(key).documents}
    assert listed == {"note": {"region": "us"}}
