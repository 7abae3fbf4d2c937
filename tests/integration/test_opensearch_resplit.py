"""Re-index on upgrade on a real OpenSearch node: a passages index cut by the previous
splitter (v3) is rebuilt by `prepare` from the documents index into passages-v4 — structure-aware
passages with heading paths — and the alias moves in one call; the old index answers until then and is
left for the operator."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from knowledge_core.adapters.opensearch import (
    PASSAGES_VERSION,
    RESPLIT_BEFORE,
    OpenSearchBackend,
    doc_key,
)
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.services.retrieval import Retrieval

from tests.contract.conftest import ranked

VIEWER = Viewer(tenant="acme", subject="alice")
KEY = "kit@1.0.0"
BODY = (
    "# Runbook\n\n## Promote\n\nPromote the standby replica with patronictl.\n\n## Verify\n\nCheck the lag."
)
RUNBOOK = Document(
    source_key=KEY, doc_id="runbook", title="Runbook", body=BODY, acl=DocumentAcl(tenant="acme")
)


@pytest.fixture
def backend() -> Iterator[OpenSearchBackend]:
    from tests.contract.conftest import real_endpoints_or_skip

    url = real_endpoints_or_skip()["OPENSEARCH_URL"]
    made = OpenSearchBackend(url, index_prefix=f"kbr-{uuid.uuid4().hex[:10]}")
    yield made
    made.drop_indices()
    made.client.indices.delete(index=f"{made.index_prefix}-passages-v3", ignore_unavailable=True)


def _as_previous_splitter_left_it(backend: OpenSearchBackend, old: str) -> None:
    """Indices as the previous version made them, its one passage holding the whole body, headings too."""
    for name, body in backend.index_templates(knn=False).items():
        index = old if name == backend.passages_index else name
        alias = backend.passages_alias if name == backend.passages_index else backend.documents_alias
        backend.client.indices.create(index=index, body={**body["template"], "aliases": {alias: {}}})
    backend._ready = True  # type: ignore[attr-defined]
    backend.put_documents([RUNBOOK])
    backend.client.delete_by_query(index=old, body={"query": {"match_all": {}}}, refresh=True)
    parent = doc_key(KEY, "runbook")
    backend.client.index(
        index=old,
        id=f"{parent}-0",
        body={
            "source_key": KEY,
            "doc_id": "runbook",
            "doc_key": parent,
            "passage_no": 0,
            "title": "Runbook",
            "text": BODY,
            "revision": RUNBOOK.revision,
            "status": "ready",
            "acl_tenant": ["acme"],
            "acl_open": True,
            "acl_subjects": [],
            "acl_groups": [],
        },
        refresh=True,
    )
    backend.client.update(
        index=backend.documents_alias, id=parent, body={"doc": {"passage_count": 1}}, refresh=True
    )


def test_i_ingest_opensearch_prepare_resplits_into_a_new_index_and_moves_the_alias(
    backend: OpenSearchBackend,
) -> None:
    old = f"{backend.index_prefix}-passages-v3"
    _as_previous_splitter_left_it(backend, old)
    hits = ranked(Retrieval(backend), KEY, 5, "promote standby", VIEWER)
    assert [h.passage for h in hits] == [BODY]  # served from v3 before the upgrade

    upgraded = OpenSearchBackend(backend._url, index_prefix=backend.index_prefix)  # type: ignore[attr-defined]
    upgraded.prepare()
    assert list(upgraded.client.indices.get_alias(name=upgraded.passages_alias)) == [upgraded.passages_index]
    assert upgraded.passages_index.endswith(f"-passages-{PASSAGES_VERSION}")
    assert int(PASSAGES_VERSION[1:]) == RESPLIT_BEFORE > 3 and upgraded.client.indices.exists(index=old)
    rows = upgraded.client.search(
        index=upgraded.passages_alias, body={"query": {"match_all": {}}, "sort": [{"passage_no": "asc"}]}
    )["hits"]["hits"]
    assert [(r["_source"]["text"], r["_source"].get("headings")) for r in rows] == [
        ("Promote the standby replica with patronictl.", "Promote"),
        ("Check the lag.", "Verify"),
    ]
    hits = ranked(Retrieval(upgraded), KEY, 5, "verify", VIEWER)  # the heading path is matched
    assert [h.passage for h in hits] == ["Check the lag."]
    assert upgraded._passage_counts(list({r["_source"]["doc_key"] for r in rows})) == {  # type: ignore[attr-defined]
        rows[0]["_source"]["doc_key"]: 2
    }
