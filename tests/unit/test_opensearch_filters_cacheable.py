"""The OpenSearch search body's filters are cacheable units (A-SEARCH): the node's query cache
keeps a bool query as a bitset per large segment but never a bare term, so the source-and-status part and
the ACL part are each one bool clause — the first the same for every viewer of a source, the second the same
for every source a viewer searches — in the BM25 search and in the k-NN search's filter alike."""

from __future__ import annotations

from typing import Any

from knowledge_core.adapters.opensearch import OpenSearchBackend, acl_filter, source_filter
from knowledge_core.domain.models import Viewer
from knowledge_core.ports import SourceQuery, Vector

from tests.fake_embedder import OneModelEmbedder

ALICE = Viewer(tenant="acme", subject="alice", groups=["ops"])
BOB = Viewer(tenant="acme", subject="bob")


def _filters(viewer: Viewer, keys: tuple[str, ...] = ("wiki@1.0.0",)) -> list[list[dict[str, Any]]]:
    """Every search's filter clauses of one `_msearch` body (BM25 and k-NN), in order."""
    backend = OpenSearchBackend("http://127.0.0.1:1", embedder=OneModelEmbedder())
    queries = [SourceQuery(key, 10, float("-inf"), dense_k=5) for key in keys]
    vector = Vector("m-1.5", bytes([127, 0, 0, 0]))
    body = backend.search_body(queries, "failover runbook", viewer, [vector], dense=True)
    found = []
    for search in body[1::2]:
        query = search["query"]
        if "knn" in query:
            (field,) = query["knn"].values()
            found.append(field["filter"]["bool"]["filter"])
        else:
            found.append(query["bool"]["filter"])
    return found


def test_a_search_every_filter_clause_is_a_cacheable_bool() -> None:
    searches = _filters(ALICE, ("wiki@1.0.0", "runbooks@1.0.0"))
    assert len(searches) == 4  # BM25 and k-NN for each of the two sources
    for clauses in searches:
        assert clauses and all(set(c) == {"bool"} for c in clauses)


def test_a_search_source_part_shared_by_viewers_acl_part_by_sources() -> None:
    alice, bob = _filters(ALICE, ("wiki@1.0.0", "runbooks@1.0.0")), _filters(BOB, ("wiki@1.0.0",))
    assert alice[0][0] == bob[0][0] == source_filter("wiki@1.0.0")  # one cache entry for every viewer
    assert alice[0][1] == alice[2][1] == acl_filter(ALICE)  # one for every source Alice searches
    assert alice[0] == alice[1]  # BM25 and k-NN filter alike
    assert alice[0][1] != bob[0][1]
