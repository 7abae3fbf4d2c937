"""Passage rows carry their document's stored version (passages index v4; K-PIPE, A-REF):
an existing v3 index (rows without `version`) is upgraded by `prepare` without downtime — a new index, its
rows re-split from the documents index (v3 predates the v5 splitter) with their document's version,
one alias move — and until then a hit without a version
is still checked against its document (`_mget`), so a disabled document is never shown in between."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from knowledge_core.adapters.opensearch import OpenSearchBackend, doc_key
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.domain.passages import split_structured
from knowledge_core.services.retrieval import Retrieval

from tests.contract.conftest import ranked, real_endpoints_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.opensearch]
VIEWER = Viewer(tenant="acme", subject="alice")
KEY = "kit@1.0.0"
DOCS = [
    Document(
        source_key=KEY,
        doc_id=f"gear-{n}",
        title=f"Gearbox {n}",
        body=f"Grease the wombat gearbox every {n}00 hours.",
        acl=DocumentAcl(tenant="acme"),
        structured_source={"uri": f"manuals/gear-{n}.md"},
    )
    for n in range(3)
]


@pytest.fixture
def backend() -> Iterator[OpenSearchBackend]:
    url = real_endpoints_or_skip()["OPENSEARCH_URL"]
    made = OpenSearchBackend(url, index_prefix=f"kbv-{uuid.uuid4().hex[:10]}")
    yield made
    made.drop_indices()
    made.client.indices.delete(index=f"{made.index_prefix}-passages-v3", ignore_unavailable=True)
    made.client.indices.delete_index_template(name=f"{made.index_prefix}-passages-v3", ignore=[404])


def _v3_indices(backend: OpenSearchBackend) -> str:
    """The indices as the previous release made them: passages v3, whose rows have no `version`."""
    old = f"{backend.index_prefix}-passages-v3"
    for name, body in backend.index_templates(knn=False).items():
        template = copy.deepcopy(body["template"])
        if name == backend.passages_index:
            del template["mappings"]["properties"]["version"]
            backend.client.indices.create(
                index=old, body={**template, "aliases": {backend.passages_alias: {}}}
            )
        else:
            backend.client.indices.create(
                index=name, body={**template, "aliases": {backend.documents_alias: {}}}
            )
    return old


def _write_v3(backend: OpenSearchBackend, docs: list[Document]) -> None:
    """Rows as the previous release wrote them (the same actions, without `version`)."""
    groups: list[list[dict[str, Any]]] = []
    for d in docs:
        passages = split_structured(d.body, d.title)
        lines = backend._document_actions(doc_key(KEY, d.doc_id), d, 0, passages, [{} for _ in passages])  # type: ignore[attr-defined]
        groups.append([{k: v for k, v in line.items() if k != "version"} for line in lines])
    backend._bulk(groups)  # type: ignore[attr-defined]


def _reads(backend: OpenSearchBackend) -> tuple[list[str], Any]:
    calls: list[str] = []
    transport = backend.client.transport
    perform = transport.perform_request

    def counted(method: str, url: str, *args: object, **kwargs: object) -> object:
        calls.append(url.split("?")[0].rsplit("/", 1)[-1])
        return perform(method, url, *args, **kwargs)

    transport.perform_request = counted
    return calls, perform


def test_a_ref_k_pipe_v3_rows_are_checked_then_upgraded_with_their_version(
    backend: OpenSearchBackend,
) -> None:
    _v3_indices(backend)
    backend._ready = True  # type: ignore[attr-defined]  # the alias still on v3, as before the upgrade
    _write_v3(backend, DOCS)
    retrieval = Retrieval(backend)
    # disabled in the documents index only (a row left behind): a hit without a version is checked
    backend.client.update(
        index=backend.documents_alias,
        id=doc_key(KEY, "gear-0"),
        body={"doc": {"status": "disabled"}},
        refresh=True,
    )
    calls, perform = _reads(backend)
    try:
        hits = ranked(retrieval, KEY, 5, "wombat gearbox", VIEWER)
    finally:
        backend.client.transport.perform_request = perform
    assert sorted(h.doc_id for h in hits) == ["gear-1", "gear-2"]
    assert calls == ["_msearch", "_mget"], calls
    backend.client.update(
        index=backend.documents_alias,
        id=doc_key(KEY, "gear-0"),
        body={"doc": {"status": "ready"}},
        refresh=True,
    )

    upgraded = OpenSearchBackend(backend._url, index_prefix=backend.index_prefix)  # type: ignore[attr-defined]
    upgraded.prepare()
    assert list(upgraded.client.indices.get_alias(name=upgraded.passages_alias)) == [upgraded.passages_index]
    calls, perform = _reads(upgraded)
    try:
        hits = ranked(Retrieval(upgraded), KEY, 5, "wombat gearbox", VIEWER)
    finally:
        upgraded.client.transport.perform_request = perform
    assert calls == ["_msearch"], calls  # every copied row carries its version: no read back
    assert {h.doc_id: h.version for h in hits} == {d.doc_id: d.version for d in DOCS}
