"""The mixed design of hybrid ranking on a real OpenSearch node: a multilingual model stored
under one id per script (`m-e5.en`, `m-e5.zh`) next to each script's own model. A fake embedder of
fixed 4-dimension vectors (per passage title) makes every cosine exact."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from knowledge_core.adapters.opensearch import BACKFILL_PENDING, OpenSearchBackend, knn_field
from knowledge_core.domain.filters import parse_filter
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.ports import Embedder, QueryAnalysis, SourceQuery, SourceResult, Vector

VIEWER = Viewer(tenant="acme", subject="alice")
KEY, OTHER_KEY = "pumps@1.0.0", "elsewhere@1.0.0"
BGE = {"en": "bge-en", "zh": "bge-zh"}
ACROSS = {"en": "m-e5.en", "zh": "m-e5.zh"}
ZERO = bytes(4)


def _v(*xs: int) -> bytes:
    return bytes(x & 0xFF for x in xs)


# Per passage title, its vectors by model (a model not named gets ZERO when it covers the passage).
VECTORS: dict[str, dict[str, bytes]] = {
    "Pump A": {"bge-en": _v(0, 0, 0, 127), "m-e5.en": _v(127, 0, 0, 0)},
    "Pump B": {"bge-en": _v(0, 0, 0, 60), "m-e5.en": _v(40, 0, 120, 0)},
    "Pump C": {"bge-en": _v(0, 0, 0, 30), "m-e5.en": _v(90, 90, 0, 0)},
    "Pump D": {"bge-en": _v(0, 0, 0, 10), "m-e5.en": _v(0, 0, 127, 0)},
    "Pump hidden": {"bge-en": _v(0, 0, 0, 127), "m-e5.en": _v(127, 0, 0, 0)},
    "Pump elsewhere": {"bge-en": _v(0, 0, 0, 127), "m-e5.en": _v(127, 0, 0, 0)},
    "泵站": {"bge-zh": _v(0, 0, 127, 0), "m-e5.zh": _v(100, 0, 0, 0)},
    "水泵": {"bge-zh": _v(0, 64, 0, 0), "m-e5.zh": _v(50, 0, 0, 0)},
}


def _script(text: str) -> str:
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"


class ScriptEmbedder(Embedder):
    """Two scripts, each with its own model, and a multilingual model exposed as one id per script."""

    def __init__(self, across: bool = True) -> None:
        self.models = ("bge-en", "bge-zh", *(("m-e5.en", "m-e5.zh") if across else ()))
        self.embedded: list[tuple[str, ...]] = []  # per embed_passages call, the models asked for
        self.fail = False

    def dimensions(self, model: str) -> int:
        return 4

    def models_for(self, text: str) -> tuple[str, ...]:
        script = _script(text)
        return tuple(m for m in (BGE[script], ACROSS[script]) if m in self.models)

    def embed_query(self, text: str) -> Vector | None:
        return None

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        if self.fail:
            raise RuntimeError("embedding failed")
        self.embedded.append(tuple(models or self.models))
        out = []
        for text in texts:
            title = text.split("\n\n")[0]
            wanted = [m for m in self.models_for(text) if models is None or m in models]
            out.append([Vector(m, VECTORS.get(title, {}).get(m, ZERO)) for m in wanted])
        return out


def _doc(title: str, key: str = KEY, acl: DocumentAcl | None = None) -> Document:
    body = (
        "泵站的冷却水泵需要每月检查。"
        if _script(title) == "zh"
        else f"The {title.lower()} cools the reactor."
    )
    return Document(
        source_key=key,
        doc_id=title.lower().replace(" ", "-")
        if _script(title) == "en"
        else f"zh-{len(title)}-{ord(title[0])}",
        title=title,
        body=body,
        acl=acl or DocumentAcl(tenant="acme"),
        metadata={"region": "eu" if title == "Pump A" else "us"},
    )


DOCS = [
    *(_doc(t) for t in ("Pump A", "Pump B", "Pump C", "Pump D", "泵站", "水泵")),
    _doc("Pump hidden", acl=DocumentAcl(tenant="acme", subjects=["bob"])),
    _doc("Pump elsewhere", key=OTHER_KEY),
]


@pytest.fixture
def prefix(opensearch_url: str) -> Iterator[str]:
    made = f"kbx-{uuid.uuid4().hex[:10]}"
    yield made
    OpenSearchBackend(opensearch_url, index_prefix=made).drop_indices()


def _backend(url: str, prefix: str, embedder: Embedder) -> OpenSearchBackend:
    return OpenSearchBackend(url, index_prefix=prefix, embedder=embedder)


def _search(backend: OpenSearchBackend, text: str, **query: Any) -> SourceResult:
    q = SourceQuery(KEY, top_k=10, min_score=float("-inf"), dense_k=10)
    (result,) = backend.search([q], QueryAnalysis(text=text, **query), VIEWER)
    assert result.error is None
    return result


QUERY_VECTORS = (Vector("bge-en", _v(0, 0, 0, 127)), Vector("m-e5.zh", _v(127, 0, 0, 0)))
EVIDENCE = Vector("m-e5.en", _v(127, 0, 0, 0))
TRANSLATED = Vector("bge-zh", _v(0, 0, 127, 0))


def _cos(a: bytes, b: bytes) -> float:
    signed = [x - 256 if x > 127 else x for x in a], [x - 256 if x > 127 else x for x in b]
    return sum(x * y for x, y in zip(*signed, strict=True)) / 127**2


def test_a_search_across_evidence_own_and_other(opensearch_url: str, prefix: str) -> None:
    """A-SEARCH / K-PIPE / F-FILTER: the evidence vector's nearest own-script documents (best passage
    each, at most EVIDENCE_DEPTH, best first, with the stored multilingual vector) and the best other-script
    dense hit; only the source's ready documents the viewer may see (not another source's, not one for bob
    only) that the source's metadata filter admits (§8)."""
    backend = _backend(opensearch_url, prefix, ScriptEmbedder())
    backend.put_documents(DOCS)

    result = _search(backend, "pump reactor", vectors=QUERY_VECTORS, evidence=EVIDENCE)

    assert result.evidence is not None
    own = result.evidence.own
    assert [round(c, 4) for c, _ in own] == [
        round(_cos(EVIDENCE.data, VECTORS[t]["m-e5.en"]), 4) for t in ("Pump A", "Pump C", "Pump B")
    ]
    assert [v for _, v in own] == [
        Vector("m-e5.en", VECTORS[t]["m-e5.en"]) for t in ("Pump A", "Pump C", "Pump B")
    ]
    assert result.evidence.other == (
        pytest.approx(_cos(_v(127, 0, 0, 0), VECTORS["泵站"]["m-e5.zh"])),
        Vector("m-e5.zh", VECTORS["泵站"]["m-e5.zh"]),
    )

    us = parse_filter({"equals": {"key": "region", "value": "us"}})
    filtered = SourceQuery(KEY, top_k=10, min_score=float("-inf"), dense_k=10, filter=us)
    (narrowed,) = backend.search(
        [filtered], QueryAnalysis("pump reactor", vectors=QUERY_VECTORS, evidence=EVIDENCE), VIEWER
    )
    assert narrowed.evidence is not None
    assert [v for _, v in narrowed.evidence.own] == [
        Vector("m-e5.en", VECTORS[t]["m-e5.en"]) for t in ("Pump C", "Pump B", "Pump D")
    ]
    assert narrowed.evidence.other == result.evidence.other

    backend.set_document_status(KEY, "pump-a", "disabled")
    after = _search(backend, "pump reactor", vectors=QUERY_VECTORS, evidence=EVIDENCE)
    assert after.evidence is not None
    assert [v for _, v in after.evidence.own] == [
        Vector("m-e5.en", VECTORS[t]["m-e5.en"]) for t in ("Pump C", "Pump B", "Pump D")
    ]


def test_a_search_across_evidence_never_ranks(opensearch_url: str, prefix: str) -> None:
    """A-SEARCH: the evidence and translated vectors change neither the lexical hits, their cosines nor
    the dense candidates; without them the result has no evidence and no checks (today's behaviour)."""
    backend = _backend(opensearch_url, prefix, ScriptEmbedder())
    backend.put_documents(DOCS)

    plain = _search(backend, "pump reactor", vectors=QUERY_VECTORS)
    mixed = _search(backend, "pump reactor", vectors=QUERY_VECTORS, evidence=EVIDENCE, translated=TRANSLATED)

    assert plain.hits and plain.dense
    assert (mixed.hits, mixed.cosines, mixed.dense) == (plain.hits, plain.cosines, plain.dense)
    assert plain.evidence is None and plain.dense_checks == []
    assert mixed.dense_checks == []  # lexical hits: no check
    # The cosines are the own-script model's (bge-en), never the evidence model's.
    by_doc = {h.doc_id: c for h, c in zip(plain.hits, plain.cosines, strict=True)}
    assert by_doc["pump-b"] == pytest.approx(_cos(QUERY_VECTORS[0].data, VECTORS["Pump B"]["bge-en"]))
    # No dense candidate carries an evidence cosine: Pump C's m-e5.en one (0.71) is no candidate's score.
    assert {round(c, 4) for _, c in mixed.dense} == {round(c, 4) for _, c in plain.dense}
    # Each cosine says its model (fusion scales it with that model's passages: Embedder.cjk_model).
    assert len(plain.cosine_models) == len(plain.hits) and len(plain.dense_models) == len(plain.dense)
    for hit, model in zip(plain.hits, plain.cosine_models, strict=True):
        assert model == ("m-e5.zh" if hit.doc_id.startswith("zh-") else "bge-en")
    for (hit, c), model in zip(plain.dense, plain.dense_models, strict=True):
        assert model == ("m-e5.zh" if hit.doc_id.startswith("zh-") else "bge-en")
        stored = VECTORS[{d.doc_id: d.title for d in DOCS}[hit.doc_id]][model]
        assert c == pytest.approx(_cos(dict((v.model, v.data) for v in QUERY_VECTORS)[model], stored))


def test_a_search_across_dense_checks_without_lexical_match(opensearch_url: str, prefix: str) -> None:
    """A-SEARCH / K-PIPE: BM25 matches nothing and a translated vector is given: each dense candidate gets
    its passage's cosine with the translation (None: its passage has no vector of that model)."""
    backend = _backend(opensearch_url, prefix, ScriptEmbedder())
    backend.put_documents(DOCS)

    result = _search(backend, "zzzqqq", vectors=QUERY_VECTORS, evidence=EVIDENCE, translated=TRANSLATED)

    assert result.hits == []
    assert len(result.dense_checks) == len(result.dense) > 0
    titles = {d.doc_id: d.title for d in DOCS}
    for (hit, _), check in zip(result.dense, result.dense_checks, strict=True):
        stored = VECTORS[titles[hit.doc_id]].get("bge-zh")
        if stored is None:
            assert check is None
        else:
            assert check == pytest.approx(_cos(TRANSLATED.data, stored))
    assert any(c is not None for c in result.dense_checks)
    assert _search(backend, "zzzqqq", vectors=QUERY_VECTORS).dense_checks == []  # no translation: none


def _rows_with(backend: OpenSearchBackend, field: str) -> list[str]:
    backend.client.indices.refresh(index=backend.passages_alias)
    found = backend.client.search(
        index=backend.passages_alias,
        body={"size": 100, "query": {"exists": {"field": field}}, "_source": ["doc_id"]},
    )
    return sorted(h["_source"]["doc_id"] for h in found["hits"]["hits"])


def _pending(backend: OpenSearchBackend) -> list[str]:
    mapping = backend.client.indices.get_mapping(index=backend.passages_alias)
    (body,) = mapping.values()
    return list((body["mappings"].get("_meta") or {}).get(BACKFILL_PENDING) or [])


def test_k_pipe_backfill_of_a_model_added_later(opensearch_url: str, prefix: str) -> None:
    """I-INGEST / A-SEARCH: documents indexed before the multilingual model get its vectors at the next
    `ensure_indices` (each passage under its script's id only, its other vectors kept); an interrupted
    backfill resumes; a second run embeds nothing; the backfilled vectors serve the evidence search."""
    before = ScriptEmbedder(across=False)
    _backend(opensearch_url, prefix, before).put_documents(DOCS)
    en = sorted(d.doc_id for d in DOCS if _script(d.title) == "en")
    zh = sorted(d.doc_id for d in DOCS if _script(d.title) == "zh")

    broken = ScriptEmbedder()
    broken.fail = True
    with pytest.raises(RuntimeError):
        _backend(opensearch_url, prefix, broken).ensure_indices()
    assert _pending(_backend(opensearch_url, prefix, broken)) == [knn_field("m-e5.en"), knn_field("m-e5.zh")]

    after = ScriptEmbedder()
    upgraded = _backend(opensearch_url, prefix, after)
    upgraded.ensure_indices()
    assert after.embedded == [("m-e5.en",), ("m-e5.zh",)]  # one batch each, only the new models
    assert _rows_with(upgraded, knn_field("m-e5.en")) == en
    assert _rows_with(upgraded, knn_field("m-e5.zh")) == zh
    assert _rows_with(upgraded, knn_field("bge-en")) == en  # untouched
    assert _pending(upgraded) == []
    row = upgraded.client.search(
        index=upgraded.passages_alias, body={"query": {"term": {"doc_id": "pump-c"}}}
    )["hits"]["hits"][0]["_source"]
    assert sorted(row["vectors"]) == ["bge-en", "m-e5.en"]  # the stored vectors keep the older model's

    again = ScriptEmbedder()
    _backend(opensearch_url, prefix, again).ensure_indices()
    assert again.embedded == []

    result = _search(upgraded, "pump reactor", vectors=QUERY_VECTORS, evidence=EVIDENCE)
    assert result.evidence is not None
    assert [v for _, v in result.evidence.own] == [
        Vector("m-e5.en", VECTORS[t]["m-e5.en"]) for t in ("Pump A", "Pump C", "Pump B")
    ]
    assert result.evidence.other is not None
