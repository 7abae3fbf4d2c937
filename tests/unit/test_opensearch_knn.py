"""The OpenSearch adapter without a k-NN plugin (A-SEARCH): `prepare` falls back to templates without
`index.knn` and k-NN fields (logged once), and passages are then written without k-NN fields."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from knowledge_core.adapters.opensearch import OpenSearchBackend, knn_field, knn_value
from knowledge_core.ports import Vector

from tests.fake_embedder import OneModelEmbedder


class _PlainNodeIndices:
    """The index APIs of a node without the k-NN plugin."""

    def __init__(self) -> None:
        self.templates: dict[str, dict] = {}
        self.created: dict[str, dict] = {}

    def put_index_template(self, name: str, body: dict, **_: Any) -> None:
        from opensearchpy.exceptions import RequestError

        if "knn" in body["template"]["settings"]:
            reason = "unknown setting [index.knn] please check that any required plugins are installed"
            raise RequestError(400, "illegal_argument_exception", {"error": {"reason": reason}})
        self.templates[name] = body

    def get_alias(self, name: str, **_: Any) -> dict:
        from opensearchpy.exceptions import NotFoundError

        raise NotFoundError(404, "aliases_not_found_exception", {})

    def create(self, index: str, body: dict, **_: Any) -> None:
        self.created[index] = body


class _Client:
    def __init__(self) -> None:
        self.indices = _PlainNodeIndices()


def test_a_search_prepare_without_knn_plugin_makes_plain_indices(caplog: pytest.LogCaptureFixture) -> None:
    client = _Client()
    backend = OpenSearchBackend("http://127.0.0.1:1", client=client, embedder=OneModelEmbedder())
    with caplog.at_level(logging.WARNING, logger="knowledge_core.adapters.opensearch"):
        backend.prepare()
    passages = client.indices.templates[backend.passages_index]["template"]
    assert "knn" not in passages["settings"]
    assert not any(name.startswith("knn_") for name in passages["mappings"]["properties"])
    assert client.indices.created[backend.passages_index] == {"aliases": {backend.passages_alias: {}}}
    assert [r.getMessage() for r in caplog.records if "k-NN unavailable" in r.getMessage()]
    assert backend._knn_fields == frozenset()  # type: ignore[attr-defined]  # writes carry no k-NN field


def test_a_search_knn_field_per_model_and_signed_bytes() -> None:
    assert knn_field("bge-small-en-v1.5-q") == "knn_bge_small_en_v1_5_q"
    assert knn_value(Vector("m-1.5", bytes([0, 127, 128, 255]))) == {"knn_m_1_5": [0, 127, -128, -1]}
    backend = OpenSearchBackend("http://127.0.0.1:1", client=_Client(), embedder=OneModelEmbedder())
    template = backend.index_templates(knn=True)[backend.passages_index]["template"]
    assert template["settings"]["knn"] is True
    field = template["mappings"]["properties"]["knn_m_1_5"]
    assert field["dimension"] == 4 and field["data_type"] == "byte"
    assert field["method"]["engine"] == "lucene" and field["method"]["space_type"] == "innerproduct"
