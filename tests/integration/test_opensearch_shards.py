"""The passages index's shard count on a real OpenSearch node (issue 23, A-SEARCH): `passage_shards` (the
setting `KB_OPENSEARCH_PASSAGE_SHARDS`) makes the index with that many primary shards; changing it moves
the alias to a new index with every row copied, as an upgrade does, and searches answer the same; moving
back never revives the rows an earlier move left behind (a document deleted meanwhile stays deleted)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from knowledge_core.adapters.opensearch import OpenSearchBackend, passages_index_name, retired_alias
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.services.retrieval import Retrieval

from tests.contract.conftest import ranked

VIEWER = Viewer(tenant="acme", subject="alice")
KEY = "kit@1.0.0"
DOCS = [
    Document(source_key=KEY, doc_id=doc_id, title=title, body=body, acl=DocumentAcl(tenant="acme"))
    for doc_id, title, body in (
        (
            "failover",
            "Failover",
            "# Failover\n\nPromote the standby replica with patronictl.\n\nCheck the lag.",
        ),
        ("backup", "Backups", "# Backups\n\nNightly base backups go to object storage.\n\nRestore weekly."),
        ("gateway", "Gateway", "# Gateway\n\nThe gateway sends a heartbeat every 60 seconds."),
        ("boiler", "Boiler", "# Boiler\n\nThe safety valve is tested every month by the operator."),
    )
]


@pytest.fixture
def url() -> Iterator[str]:
    from tests.contract.conftest import real_endpoints_or_skip

    yield real_endpoints_or_skip()["OPENSEARCH_URL"]


@pytest.fixture
def prefix(url: str) -> Iterator[str]:
    made = f"kbs-{uuid.uuid4().hex[:10]}"
    yield made
    one = OpenSearchBackend(url, index_prefix=made)
    one.drop_indices()
    one.client.indices.delete(index=passages_index_name(made, 2), ignore_unavailable=True)


def _top(backend: OpenSearchBackend, query: str) -> list[str]:
    return [h.doc_id for h in ranked(Retrieval(backend), KEY, 5, query, VIEWER)[:1]]


def _rows(backend: OpenSearchBackend) -> list[str]:
    backend.client.indices.refresh(index=backend.passages_alias)
    hits = backend.client.search(index=backend.passages_alias, body={"size": 100, "_source": False})
    return sorted(h["_id"] for h in hits["hits"]["hits"])


def _held_by(backend: OpenSearchBackend, alias: str) -> list[str]:
    return sorted(backend.client.indices.get_alias(name=alias))


def test_a_search_issue23_passage_shards_make_the_index_and_a_change_moves_the_alias(
    url: str, prefix: str
) -> None:
    one = OpenSearchBackend(url, index_prefix=prefix)
    one.prepare()
    one.put_documents(DOCS)
    assert one.passages_index == f"{prefix}-passages-v5" and _top(one, "promote standby") == ["failover"]
    before = _rows(one)

    two = OpenSearchBackend(url, index_prefix=prefix, passage_shards=2)
    assert two.passages_index == passages_index_name(prefix, 2) == f"{prefix}-passages-v5-s2"
    two.prepare()
    assert _held_by(two, two.passages_alias) == [two.passages_index]
    settings = two.client.indices.get_settings(index=two.passages_index)[two.passages_index]["settings"]
    assert settings["index"]["number_of_shards"] == "2"
    assert _rows(two) == before  # every row copied
    for query, doc in (
        ("promote standby", "failover"),
        ("heartbeat seconds", "gateway"),
        ("safety valve", "boiler"),
    ):
        assert _top(two, query) == [doc]
    assert _held_by(two, retired_alias(two.passages_alias)) == [one.passages_index]

    # Written while on two shards: one document deleted, one changed.
    assert two.delete_document(KEY, "backup")
    changed = DOCS[2].model_copy(update={"body": "# Gateway\n\nThe gateway reports its uplink state hourly."})
    two.put_documents([changed])
    after = _rows(two)
    assert after != before

    back = OpenSearchBackend(url, index_prefix=prefix)
    back.prepare()  # the one-shard index held the alias before: cleared and refilled, not revived
    assert _held_by(back, back.passages_alias) == [back.passages_index]
    assert _rows(back) == after
    assert _top(back, "nightly base backups") == []
    assert _top(back, "uplink state") == ["gateway"] and _top(back, "heartbeat") == []
    assert _held_by(back, retired_alias(back.passages_alias)) == [two.passages_index]
    shards = back.client.indices.get_settings(index=back.passages_index)[back.passages_index]["settings"]
    assert shards["index"]["number_of_shards"] == "1"
