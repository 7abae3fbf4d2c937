"""OpenSearch's field limit on a real node (I-INGEST, F-FILTER): every distinct metadata key and value type
is a field of the passages and documents indices, so a deployment's keys can reach the index's
`index.mapping.total_fields.limit`. The write is then refused with that cause named (`too_many_fields`,
with the limit, nothing of the node's message beyond it), not as a bare status; documents without new keys
are still written."""

from __future__ import annotations

import pytest
from knowledge_core.adapters.opensearch import OpenSearchBackend
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.models import Document, DocumentAcl

from tests.integration.opensearch_kit import KEY


def _doc(doc_id: str, keys: range) -> Document:
    return Document(
        source_key=KEY,
        doc_id=doc_id,
        title=doc_id,
        body="pump valve torque",
        acl=DocumentAcl(tenant="acme"),
        metadata={f"key{k}": f"value{k}" for k in keys},
    )


def test_f_filter_past_the_field_limit_the_write_names_the_cause(
    opensearch_url: str, index_prefix: str
) -> None:
    backend = OpenSearchBackend(opensearch_url, index_prefix=index_prefix)
    backend.prepare()
    backend.put_documents([_doc("first", range(3))])
    for index in (backend.passages_alias, backend.documents_alias):  # a small limit: a few keys from it
        backend.client.indices.put_settings(
            index=index, body={"index.mapping.total_fields.limit": _fields(backend, index) + 4}
        )
    with pytest.raises(SourceFailure) as refused:
        backend.put_documents([_doc("wide", range(100, 120))])
    assert refused.value.kind == "rejected" and refused.value.cause == "too_many_fields"
    assert "field limit" in str(refused.value) and "value1" not in str(refused.value)
    backend.put_documents([_doc("known", range(3))])  # no new keys: written
    assert backend.get_document(KEY, "known") is not None
    assert backend.get_document(KEY, "wide") is None


def _fields(backend: OpenSearchBackend, index: str) -> int:
    """The fields an index's mapping counts towards its limit (objects and leaves, multi-fields too)."""

    def count(properties: dict) -> int:
        total = 0
        for spec in properties.values():
            total += 1 + count(spec.get("properties", {})) + len(spec.get("fields", {}))
        return total

    [mapping] = backend.client.indices.get_mapping(index=index).values()
    return count(mapping["mappings"].get("properties", {}))
