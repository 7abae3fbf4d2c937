"""SPEC §1 re-ingest on every search backend (SQLite FTS5, OpenSearch): a re-ingest is
"unchanged" only when everything stored is equal (title, body, ACL, status, structured source), not only
the revision; moving a document to another tenant is an update, and the old tenant's refs answer 409
`knowledge_changed` as for any change."""

from __future__ import annotations

import json

import pytest
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import KnowledgeChanged
from knowledge_core.domain.wire import parse_request

from tests.contract.conftest import PRINCIPAL, World


def _ingest(world: World, key: str, **document: object) -> dict[str, int]:
    body = {"doc_id": "valve", "title": "Valve", "body": "gasket torque sequence", "acl": {"tenant": "acme"}}
    request = parse_request(IngestionJobRequest, json.dumps({"documents": [body | document]}))
    accepted = world.c.ingestion.submit(key, request)
    assert world.c.ingestion.work("w") == accepted.job_id
    counts = world.c.ingestion.status(key, accepted.job_id).counts
    return {"done": counts.done, "unchanged": counts.unchanged}


def test_reingest_compares_everything_stored(world: World) -> None:
    (key,) = world.publish({"manuals": {}})
    assert _ingest(world, key) == {"done": 1, "unchanged": 0}
    assert _ingest(world, key) == {"done": 0, "unchanged": 1}  # everything equal: skipped
    ref = world.search("gasket torque")["hints"][0]["ref"]
    assert world.read(ref)["content"]

    # Same title and body (same revision), another structured source, status or ACL: each an update.
    assert _ingest(world, key, structured_source={"uri": "manuals/valve.md"}) == {"done": 1, "unchanged": 0}
    assert _ingest(world, key, structured_source={"uri": "manuals/valve.md"}) == {"done": 0, "unchanged": 1}
    shared = {"tenant": "acme", "groups": ["eng"]}
    assert _ingest(world, key, structured_source={"uri": "manuals/valve.md"}, acl=shared)["done"] == 1
    moved = {"structured_source": {"uri": "manuals/valve.md"}, "acl": {"tenant": "globex"}}
    assert _ingest(world, key, **moved) == {"done": 1, "unchanged": 0}
    stored = world.c.backend.get_document(key, "valve")
    assert stored is not None and stored.acl.tenant == "globex"
    with pytest.raises(KnowledgeChanged):  # the old tenant's ref: 409 knowledge_changed
        world.read(ref, principal=PRINCIPAL)
    assert world.search("gasket torque")["hints"] == []
    assert _ingest(world, key, **moved, status="disabled") == {"done": 1, "unchanged": 0}
