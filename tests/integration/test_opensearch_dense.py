"""The OpenSearch dense first stage on a real node (A-SEARCH): an index of an older template version is
upgraded by `prepare` (rows copied with their k-NN fields, alias moved), and a node that rejects k-NN
searches leaves hybrid ranking to the BM25 candidates (logged once) instead of failing the source."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from knowledge_core.adapters.embedding import OnnxEmbedder
from knowledge_core.adapters.opensearch import OpenSearchBackend, knn_field
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.services.retrieval import Retrieval

from tests.contract.conftest import ranked

VIEWER = Viewer(tenant="acme", subject="alice")
KEY = "kit@1.0.0"
NOTEBOOK = Document(
    source_key=KEY,
    doc_id="notebook",
    title="Laptop battery",
    body="Lower the screen brightness to save power.",
    acl=DocumentAcl(tenant="acme"),
)
DENSE_ONLY = "portable computer runs out of charge fast"  # no word in common with NOTEBOOK


@pytest.fixture
def backend(embedding_model_dir: str) -> Iterator[OpenSearchBackend]:
    from tests.contract.conftest import real_endpoints_or_skip

    url = real_endpoints_or_skip()["OPENSEARCH_URL"]
    made = OpenSearchBackend(
        url, index_prefix=f"kbd-{uuid.uuid4().hex[:10]}", embedder=OnnxEmbedder(embedding_model_dir)
    )
    yield made
    made.drop_indices()
    for name in (f"{made.index_prefix}-passages-v2",):
        made.client.indices.delete(index=name, ignore_unavailable=True)


def _old_indices(backend: OpenSearchBackend, passages_index: str) -> None:
    """The indices as a node without k-NN (or an older template) made them: no `index.knn`, no k-NN fields."""
    for name, body in backend.index_templates(knn=False).items():
        index = passages_index if name == backend.passages_index else name
        alias = backend.passages_alias if name == backend.passages_index else backend.documents_alias
        backend.client.indices.create(index=index, body={**body["template"], "aliases": {alias: {}}})
    backend._ready = True  # type: ignore[attr-defined]  # written as before: no k-NN fields known


def _ids(backend: OpenSearchBackend, query: str) -> list[str]:
    """The ranked documents of the retrieval step every door runs, over this backend and its model."""
    retrieval = Retrieval(backend, embedder=backend._embedder)  # type: ignore[attr-defined]
    return [h.doc_id for h in ranked(retrieval, KEY, 5, query, VIEWER)]


def test_a_search_dense_prepare_upgrades_an_older_passages_index(backend: OpenSearchBackend) -> None:
    old = f"{backend.index_prefix}-passages-v2"
    _old_indices(backend, old)
    backend.put_documents([NOTEBOOK])
    assert _ids(backend, DENSE_ONLY) == []  # no k-NN field yet: BM25 alone, which shares no word

    upgraded = OpenSearchBackend(backend._url, index_prefix=backend.index_prefix, embedder=backend._embedder)  # type: ignore[attr-defined]
    upgraded.prepare()
    assert list(upgraded.client.indices.get_alias(name=upgraded.passages_alias)) == [upgraded.passages_index]
    row = upgraded.client.get(
        index=upgraded.passages_alias,
        id=upgraded.client.search(
            index=upgraded.passages_alias, body={"query": {"term": {"doc_id": "notebook"}}}
        )["hits"]["hits"][0]["_id"],
    )
    assert knn_field("bge-small-en-v1.5-q") in row["_source"]  # copied with its model's k-NN field
    assert _ids(upgraded, DENSE_ONLY) == ["notebook"]
    upgraded.put_documents([NOTEBOOK.model_copy(update={"doc_id": "notebook-2"})])  # writes go to v3
    assert sorted(_ids(upgraded, DENSE_ONLY)) == ["notebook", "notebook-2"]


def test_a_search_dense_rejected_knn_falls_back_to_bm25_candidates(
    backend: OpenSearchBackend, caplog: pytest.LogCaptureFixture
) -> None:
    _old_indices(backend, backend.passages_index)  # the current version, but without k-NN fields
    backend.put_documents([NOTEBOOK])
    with caplog.at_level(logging.WARNING, logger="knowledge_core.adapters.opensearch"):
        assert _ids(backend, "laptop battery brightness") == ["notebook"]  # BM25 candidates, re-scored
        assert _ids(backend, DENSE_ONLY) == []  # no dense stage, no error
    warnings = [r for r in caplog.records if "k-NN unavailable" in r.getMessage()]
    assert len(warnings) == 1
    assert "Laptop" not in warnings[0].getMessage()  # no document text in logs
