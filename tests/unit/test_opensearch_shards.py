"""The passages index's shard count without a node (A-SEARCH): `KB_OPENSEARCH_PASSAGE_SHARDS`
reaches the adapter, a count other than one is given at creation and named in the index, the templates stay
one per version, and a move off an index marks it retired (tests/integration/test_opensearch_shards.py runs
the move on a real node)."""

from __future__ import annotations

from typing import Any

import pytest
from knowledge_core.adapters.opensearch import (
    OpenSearchBackend,
    _older_splitter,
    passages_index_name,
    retired_alias,
)
from knowledge_core.bootstrap import Container
from knowledge_core.settings import Settings
from pydantic import ValidationError


class _Indices:
    """A node holding `aliases` (alias -> indices) and recording what is made."""

    def __init__(self, aliases: dict[str, list[str]] | None = None) -> None:
        self.aliases = aliases or {}
        self.templates: dict[str, dict] = {}
        self.created: dict[str, dict] = {}
        self.alias_actions: list[dict] = []

    def put_index_template(self, name: str, body: dict, **_: Any) -> None:
        self.templates[name] = body

    def get_alias(self, name: str, **_: Any) -> dict:
        from opensearchpy.exceptions import NotFoundError

        if name not in self.aliases:
            raise NotFoundError(404, "aliases_not_found_exception", {})
        return {index: {"aliases": {name: {}}} for index in self.aliases[name]}

    def exists_alias(self, index: str, name: str, **_: Any) -> bool:
        return index in self.aliases.get(name, [])

    def create(self, index: str, body: dict, **_: Any) -> None:
        self.created[index] = body

    def put_mapping(self, **_: Any) -> None: ...

    def update_aliases(self, body: dict, **_: Any) -> None:
        self.alias_actions += body["actions"]


class _Client:
    """Its indices hold no rows: a move copies nothing."""

    def __init__(self, aliases: dict[str, list[str]] | None = None) -> None:
        self.indices = _Indices(aliases)
        self.transport = type("Transport", (), {"serializer": None})()

    def search(self, **_: Any) -> dict:
        return {"hits": {"hits": []}}


def test_a_search_passage_shards_from_the_environment() -> None:
    settings = Settings.from_env(
        {"KB_SEARCH_BACKEND": "opensearch", "KB_OPENSEARCH_URL": "http://127.0.0.1:1"}
    )
    assert settings.opensearch_passage_shards == 1
    settings = Settings.from_env(
        {
            "KB_SEARCH_BACKEND": "opensearch",
            "KB_OPENSEARCH_URL": "http://127.0.0.1:1",
            "KB_OPENSEARCH_PASSAGE_SHARDS": "3",
        }
    )
    backend = Container(settings).backend
    assert isinstance(backend, OpenSearchBackend) and backend.passage_shards == 3
    assert backend.passages_index == "kb-passages-v5-s3"
    for bad in ("0", "65", "two"):
        with pytest.raises(ValidationError, match="opensearch_passage_shards"):
            Settings.from_env({"KB_OPENSEARCH_PASSAGE_SHARDS": bad})
    with pytest.raises(ValueError, match="passage_shards"):
        OpenSearchBackend("http://127.0.0.1:1", passage_shards=0)


@pytest.mark.parametrize("shards", [1, 4])
def test_a_search_passage_shards_given_at_creation(shards: int) -> None:
    client = _Client()
    backend = OpenSearchBackend("http://127.0.0.1:1", client=client, passage_shards=shards)
    backend.prepare()
    assert sorted(client.indices.templates) == ["kb-documents-v2", "kb-passages-v5"]  # one per version
    template = client.indices.templates["kb-passages-v5"]
    assert template["index_patterns"] == ["kb-passages-v5*"]  # matches the named shard counts too
    assert template["template"]["settings"]["number_of_shards"] == 1
    index = passages_index_name("kb", shards)
    assert backend.passages_index == index == ("kb-passages-v5" if shards == 1 else "kb-passages-v5-s4")
    expected = {"aliases": {"kb-passages": {}}}
    if shards != 1:
        expected["settings"] = {"number_of_shards": shards}
    assert client.indices.created[index] == expected
    assert client.indices.created["kb-documents-v2"] == {"aliases": {"kb-documents": {}}}


def test_a_search_a_move_marks_the_old_index_retired() -> None:
    client = _Client({"kb-passages": ["kb-passages-v5"], "kb-documents": ["kb-documents-v2"]})
    backend = OpenSearchBackend("http://127.0.0.1:1", client=client, passage_shards=2)
    backend.prepare()
    assert client.indices.created["kb-passages-v5-s2"] == {"settings": {"number_of_shards": 2}}
    assert client.indices.alias_actions == [
        {"remove": {"index": "kb-passages-v5", "alias": "kb-passages"}},
        {"add": {"index": "kb-passages-v5-s2", "alias": "kb-passages"}},
        {"add": {"index": "kb-passages-v5", "alias": retired_alias("kb-passages")}},
    ]
    assert retired_alias("kb-passages") == "kb-passages-retired"


def test_a_search_a_named_shard_count_keeps_its_splitter_version() -> None:
    assert _older_splitter("kb-passages-v3-s2", "kb") and _older_splitter("kb-passages-v3", "kb")
    assert not _older_splitter("kb-passages-v5-s2", "kb") and not _older_splitter("kb-passages-v5", "kb")
    assert not _older_splitter("kb-passages-v3-sx", "kb")
