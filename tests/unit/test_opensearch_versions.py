"""A-REF on OpenSearch without a node: a passage row keeps its document's record version beside the
metadata it holds, and a hit made from the row carries the document's stored version — metadata included
(SPEC §1: a metadata change is an update) — equal to what a read by ref computes from the document, while a
row written before metadata was bound (the same record version) still yields it."""

from __future__ import annotations

from typing import Any

import pytest
from knowledge_core.adapters.opensearch import OpenSearchBackend, _hit
from knowledge_core.domain.models import Document, DocumentAcl
from knowledge_core.domain.passages import document_passages

KEY = "manuals@1.0.0"


def _doc(metadata: dict[str, Any] | None) -> Document:
    return Document(
        source_key=KEY,
        doc_id="pump",
        title="Pump manual",
        body="Grease the pump gearbox every 400 hours.",
        acl=DocumentAcl(tenant="acme"),
        metadata=metadata,
    )


def _rows(doc: Document) -> list[dict[str, Any]]:
    backend = OpenSearchBackend("http://127.0.0.1:1", client=object())
    passages = document_passages(doc.body, doc.title, doc.structured_source)
    lines = backend._passage_lines("parent", doc, passages, [{} for _ in passages], "passages")  # type: ignore[attr-defined]
    return [line for line in lines if "index" not in line]


@pytest.mark.parametrize("metadata", [None, {"classification": "public", "year": 2024}])
def test_a_ref_opensearch_hit_version_is_the_documents_stored_version(metadata: dict | None) -> None:
    doc = _doc(metadata)
    for row in _rows(doc):
        assert row["version"] == doc.record_version
        assert _hit(KEY, {"_source": row, "_score": 1.0}).version == doc.version


def test_a_ref_opensearch_hit_version_changes_with_metadata() -> None:
    public, restricted = _doc({"classification": "public"}), _doc({"classification": "restricted"})
    [row] = _rows(public)
    moved = {**row, "metadata": restricted.metadata}
    assert _hit(KEY, {"_source": moved, "_score": 1.0}).version == restricted.version != public.version
