"""Bulk writes on OpenSearch are searchable when they return, by a forced refresh of what they wrote, not by
waiting for the scheduled one (I23; K-PIPE live hits): `refresh=wait_for` held bulk loads
at about a third of the node's rate. The indices here never refresh on their own (`refresh_interval: -1`),
so only the write's own refresh can make its rows visible."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from knowledge_core.adapters import opensearch
from knowledge_core.adapters.opensearch import OpenSearchBackend, doc_key
from knowledge_core.domain.models import Document, DocumentAcl
from knowledge_core.domain.passages import document_passages

from tests.contract.conftest import real_endpoints_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.opensearch]
KEY = "bulk@1.0.0"


def _doc(n: int, paragraphs: int = 1) -> Document:
    body = "\n\n".join(
        f"Paragraph {p} of manual {n}: grease the wombat gearbox. " + "Check the seals and bearings. " * 40
        for p in range(paragraphs)
    )
    return Document(
        source_key=KEY, doc_id=f"manual-{n}", title=f"Manual {n}", body=body, acl=DocumentAcl(tenant="acme")
    )


@pytest.fixture
def backend() -> Iterator[OpenSearchBackend]:
    url = real_endpoints_or_skip()["OPENSEARCH_URL"]
    made = OpenSearchBackend(url, index_prefix=f"kbr-{uuid.uuid4().hex[:10]}")
    made.ensure_indices()
    for alias in (made.passages_alias, made.documents_alias):
        made.client.indices.put_settings(index=alias, body={"index": {"refresh_interval": "-1"}})
    yield made
    made.drop_indices()


def _requests(backend: OpenSearchBackend) -> list[tuple[str, dict[str, Any]]]:
    """Every request the backend's client sends from now on: (path, query parameters)."""
    sent: list[tuple[str, dict[str, Any]]] = []
    transport = backend.client.transport
    perform = transport.perform_request

    def recorded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        params = kwargs.get("params") or {}
        sent.append((url, {k: v.decode() if isinstance(v, bytes) else v for k, v in params.items()}))
        return perform(method, url, *args, **kwargs)

    transport.perform_request = recorded
    return sent


def _searchable_passages(backend: OpenSearchBackend, doc_id: str) -> int:
    query = {"query": {"term": {"doc_key": doc_key(KEY, doc_id)}}}
    return int(backend.client.count(index=backend.passages_alias, body=query)["count"])


def _passages(doc: Document) -> int:
    return len(document_passages(doc.body, doc.title, doc.structured_source))


def _searchable_documents(backend: OpenSearchBackend) -> int:
    return int(backend.client.count(index=backend.documents_alias)["count"])


def test_a_put_of_one_bulk_request_is_searchable_when_it_returns(backend: OpenSearchBackend) -> None:
    sent = _requests(backend)
    docs = [_doc(n, paragraphs=3) for n in range(3)]
    backend.put_documents(docs)
    bulks = [params for path, params in sent if path.endswith("/_bulk")]
    assert [b.get("refresh") for b in bulks] == ["true"]
    assert not [path for path, _ in sent if path.endswith("/_refresh")]
    assert [_searchable_passages(backend, d.doc_id) for d in docs] == [_passages(d) for d in docs]
    assert _searchable_documents(backend) == 3


def test_a_put_of_several_bulk_requests_refreshes_every_index_it_wrote(
    backend: OpenSearchBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opensearch, "BULK_MAX_BYTES", 1024)  # every document in a request of its own
    first = [_doc(n, paragraphs=3) for n in range(4)]
    backend.put_documents(first)
    sent = _requests(backend)
    # new versions with fewer passages: their extra rows are deleted, and that is searchable at once too
    second = [_doc(0, paragraphs=1), _doc(1, paragraphs=2), _doc(2, paragraphs=3)]
    backend.put_documents(second)
    bulks = [params for path, params in sent if path.endswith("/_bulk")]
    assert len(bulks) == 3 and all(b.get("refresh") == "false" for b in bulks)
    refreshed = sorted(path.strip("/").split("/")[0] for path, _ in sent if path.endswith("/_refresh"))
    assert refreshed == sorted([backend.passages_alias, backend.documents_alias])
    assert _passages(second[0]) < _passages(first[0])
    expected = [_passages(d) for d in [*second, first[3]]]
    assert [_searchable_passages(backend, f"manual-{n}") for n in range(4)] == expected
    assert _searchable_documents(backend) == 4
    assert backend.delete_document(KEY, "manual-3")
    assert _searchable_passages(backend, "manual-3") == 0 and _searchable_documents(backend) == 3
    assert not [params for path, params in sent if params.get("refresh") == "wait_for"]
