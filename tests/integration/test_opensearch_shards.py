"""The passages index's shard count on a real OpenSearch node (A-SEARCH): `passage_shards` (the
setting `KB_OPENSEARCH_PASSAGE_SHARDS`) makes the index with that many primary shards; changing it moves
the alias to a new index with every row copied, as an upgrade does, and searches answer the same; moving
back never revives the rows an earlier move left behind (a document deleted meanwhile stays deleted)."""

from __future__ import annotations

from knowledge_core.adapters.opensearch import OpenSearchBackend, passages_index_name, retired_alias

from tests.integration.opensearch_kit import DOCS, KEY, row_ids, top_doc


def _held_by(backend: OpenSearchBackend, alias: str) -> list[str]:
    return sorted(backend.client.indices.get_alias(name=alias))


def test_a_search_passage_shards_make_the_index_and_a_change_moves_the_alias(
    opensearch_url: str, index_prefix: str
) -> None:
    one = OpenSearchBackend(opensearch_url, index_prefix=index_prefix)
    one.prepare()
    one.put_documents(DOCS)
    assert one.passages_index == f"{index_prefix}-passages-v5" and top_doc(one, "promote standby") == [
        "failover"
    ]
    before = row_ids(one)

    two = OpenSearchBackend(opensearch_url, index_prefix=index_prefix, passage_shards=2)
    assert two.passages_index == passages_index_name(index_prefix, 2) == f"{index_prefix}-passages-v5-s2"
    two.prepare()
    assert _held_by(two, two.passages_alias) == [two.passages_index]
    settings = two.client.indices.get_settings(index=two.passages_index)[two.passages_index]["settings"]
    assert settings["index"]["number_of_shards"] == "2"
    assert row_ids(two) == before  # every row copied
    for query, doc in (
        ("promote standby", "failover"),
        ("heartbeat seconds", "gateway"),
        ("safety valve", "boiler"),
    ):
        assert top_doc(two, query) == [doc]
    assert _held_by(two, retired_alias(two.passages_alias)) == [one.passages_index]

    # Written while on two shards: one document deleted, one changed.
    assert two.delete_document(KEY, "backup")
    changed = DOCS[2].model_copy(update={"body": "# Gateway\n\nThe gateway reports its uplink state hourly."})
    two.put_documents([changed])
    after = row_ids(two)
    assert after != before

    back = OpenSearchBackend(opensearch_url, index_prefix=index_prefix)
    back.prepare()  # the one-shard index held the alias before: cleared and refilled, not revived
    assert _held_by(back, back.passages_alias) == [back.passages_index]
    assert row_ids(back) == after
    assert top_doc(back, "nightly base backups") == []
    assert top_doc(back, "uplink state") == ["gateway"] and top_doc(back, "heartbeat") == []
    assert _held_by(back, retired_alias(back.passages_alias)) == [two.passages_index]
    shards = back.client.indices.get_settings(index=back.passages_index)[back.passages_index]["settings"]
    assert shards["index"]["number_of_shards"] == "1"
