"""F-FILTER contract on both backends (SPEC §8): pre-filtered search returns exactly the best-ranked
documents among those the oracle (`domain.filters.matches`) admits — never a post-filtered remainder — in
the BM25 stage and in the dense stage; the search door and MCP's request take `filter`; stored metadata
reads back; a filter never widens the tenant."""

from __future__ import annotations

import random
from typing import Any

import pytest
from knowledge_core.domain.filters import Filter, matches, parse_filter
from knowledge_core.domain.models import Document, DocumentAcl
from knowledge_core.domain.wire import SearchRequest
from knowledge_core.ports import Hit

from tests.contract.conftest import PRINCIPAL, World
from tests.filter_cases import random_filter, random_metadata

VIEWER = PRINCIPAL.viewer
WORDS = ["valve", "pump", "seal", "gasket", "flange", "bolt", "torque", "pressure", "leak", "inspection"]
FILLER = ["the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "by", "at", "from", "this", "that"]
CORPUS = 48
TOP_K = 5


def corpus(world: World, key: str, seed: int) -> dict[str, dict[str, Any] | None]:
    """CORPUS documents whose bodies all mention the query terms, at different strengths (distinct BM25
    scores), with random metadata; returns doc_id -> metadata."""
    rng = random.Random(seed)
    metadata: dict[str, dict[str, Any] | None] = {}
    docs = []
    for i in range(CORPUS):
        doc_id = f"d{i:03d}"
        words = ["valve"] * (1 + i % 6) + ["pressure"] * (i % 4) + rng.choices(WORDS[1:], k=5 + i)
        words += rng.choices(FILLER, k=rng.randint(0, 30))
        rng.shuffle(words)
        metadata[doc_id] = random_metadata(rng)
        docs.append(
            Document(
                source_key=key,
                doc_id=doc_id,
                title=doc_id,
                body=" ".join(words),
                acl=DocumentAcl(tenant=PRINCIPAL.tenant),
                metadata=metadata[doc_id],
            )
        )
    world.ingest(*docs)
    return metadata


def tagged(key: str, doc_id: str, body: str, metadata: dict[str, Any], tenant: str = "acme") -> Document:
    """A document titled by its id, of `tenant`, with `metadata`."""
    return Document(
        source_key=key,
        doc_id=doc_id,
        title=doc_id,
        body=body,
        acl=DocumentAcl(tenant=tenant),
        metadata=metadata,
    )


def retrieve(
    world: World, key: str, top_k: int, query: str, node: Filter | None, cut: bool = False
) -> list[Hit]:
    """The retrieval step's ranked hits among the documents `node` admits — the ranking itself (without the
    doors' relevance cut, K-REL, unless `cut`), which is what §8 constrains."""
    from knowledge_core.services.retrieval import SourceAsk

    analysed = world.c.retrieval.analyse(query)
    ask = SourceAsk(key, top_k, 0.0, node, cut=cut)
    [outcome] = world.c.retrieval.run([ask], analysed, VIEWER, 15.0).outcomes
    assert outcome.error is None, outcome.error
    return outcome.hits


def assert_best_of_matching(got: list[Hit], deep: list[Hit], admitted: set[str], top_k: int) -> None:
    """`got` is the best `top_k` of `deep` (the unfiltered ranking of every document) restricted to the
    admitted documents; within a run of equal scores at the cut, any of them may come first."""
    want = [h for h in deep if h.doc_id in admitted][:top_k]
    assert [round(h.score, 5) for h in got] == [round(h.score, 5) for h in want]
    assert all(h.doc_id in admitted for h in got)
    for g, w in zip(got, want, strict=True):
        if g.doc_id != w.doc_id:  # only a tie may swap them
            assert round(g.score, 5) == round(w.score, 5)


def test_f_filter_contract_bm25_best_of_matching_documents(world: World) -> None:
    [key] = world.publish({"filters": {"topK": 5}})
    metadata = corpus(world, key, seed=1)
    deep = retrieve(world, key, CORPUS, "valve pressure", None)
    assert len(deep) == CORPUS
    rng = random.Random(25)
    discriminating = 0
    for _ in range(30):
        node = parse_filter(random_filter(rng))
        admitted = {d for d, m in metadata.items() if matches(m, node)}
        got = retrieve(world, key, TOP_K, "valve pressure", node)
        assert_best_of_matching(got, deep, admitted, TOP_K)
        # What the doors return: the relevance cut only shortens that ranking, never reorders or widens it.
        shown = retrieve(world, key, TOP_K, "valve pressure", node, cut=True)
        assert [h.doc_id for h in shown] == [h.doc_id for h in got][: len(shown)]
        # A post-filter of the unfiltered top-5 would keep fewer: these cases tell the two apart.
        discriminating += len(got) > len({h.doc_id for h in deep[:TOP_K]} & admitted)
    assert discriminating >= 5


@pytest.mark.parametrize(
    "raw",
    [
        {"equals": {"key": "region", "value": "eu"}},
        {"notEquals": {"key": "region", "value": "eu"}},
        {"greaterThan": {"key": "year", "value": 2022}},
        {"greaterThanOrEquals": {"key": "year", "value": 2024}},
        {"lessThan": {"key": "score", "value": 1}},
        {"lessThanOrEquals": {"key": "year", "value": 2021.0}},
        {"in": {"key": "region", "value": ["us", "apac", 2024]}},
        {"notIn": {"key": "kind", "value": ["eu", True]}},
        {"startsWith": {"key": "region", "value": "eu"}},
        {"listContains": {"key": "tags", "value": "policy"}},
        {"stringContains": {"key": "team.name", "value": "-"}},
        {"equals": {"key": "public", "value": True}},
        {"notEquals": {"key": "absent", "value": 1}},
        {
            "andAll": [
                {"startsWith": {"key": "region", "value": "u"}},
                {"notIn": {"key": "year", "value": [2020]}},
            ]
        },
        {
            "orAll": [
                {"listContains": {"key": "tags", "value": "hr"}},
                {"lessThan": {"key": "year", "value": 2021}},
            ]
        },
    ],
)
def test_f_filter_contract_every_operator(world: World, raw: dict[str, Any]) -> None:
    [key] = world.publish({"filters": {"topK": 5}})
    metadata = corpus(world, key, seed=2)
    node = parse_filter(raw)
    admitted = {d for d, m in metadata.items() if matches(m, node)}
    got = retrieve(world, key, CORPUS, "valve pressure", node)
    assert {h.doc_id for h in got} == admitted  # deep enough for all of them: exactly the matching ones


def test_f_filter_contract_dense_stage_respects_the_filter(english_world: World) -> None:
    """The dense candidates come from matching documents only: a query no BM25 term matches ranks by the
    vector stage alone, and its top results are the nearest matching documents."""
    world = english_world
    [key] = world.publish({"filters": {"topK": 5}})
    metadata = corpus(world, key, seed=3)
    query = "mechanical fittings that hold liquids under load"  # no word of the corpus
    deep = retrieve(world, key, CORPUS, query, None)
    assert len(deep) == CORPUS  # every document from the dense stage
    rng = random.Random(7)
    for _ in range(12):
        node = parse_filter(random_filter(rng))
        admitted = {d for d, m in metadata.items() if matches(m, node)}
        got = retrieve(world, key, TOP_K, query, node)
        assert [h.doc_id for h in got] == [h.doc_id for h in deep if h.doc_id in admitted][:TOP_K]


def test_f_filter_contract_search_door_takes_filter_and_never_widens_the_tenant(world: World) -> None:
    [key] = world.publish({"filters": {"topK": 5}})
    shared = {"region": "eu"}
    world.ingest(
        tagged(key, "mine", "valve", shared),
        tagged(key, "theirs", "valve valve", shared, tenant="other"),
        tagged(key, "us", "valve valve valve", {"region": "us"}),
    )
    eu = {"equals": {"key": "region", "value": "eu"}}
    request = SearchRequest.model_validate({"query": "valve", "filter": eu})
    body = world.c.knowledge.search(PRINCIPAL, world.route, request).wire()
    assert body["status"] == "ok" and [h["title"] for h in body["hints"]] == ["mine"]
    everyone = {"notEquals": {"key": "region", "value": "none"}}
    request = SearchRequest.model_validate({"query": "valve", "filter": everyone})
    titles = [h["title"] for h in world.c.knowledge.search(PRINCIPAL, world.route, request).wire()["hints"]]
    assert titles == ["us", "mine"]  # never another tenant's document
    # A read by ref re-checks the document, not the filter.
    [hint] = world.c.knowledge.search(
        PRINCIPAL, world.route, SearchRequest.model_validate({"query": "valve", "filter": eu})
    ).wire()["hints"]
    assert world.read(hint["ref"])["content"] == "valve"


def test_f_filter_contract_metadata_reads_back_and_rewrites(world: World) -> None:
    [key] = world.publish({"filters": {}})
    meta = {"region": "eu", "year": 2024, "public": False, "tags": ["a", "b"], "team.name": "x"}
    world.ingest(tagged(key, "d", "valve", meta))
    stored = world.c.backend.get_documents([(key, "d")])[(key, "d")]
    assert stored.metadata == meta
    eu = parse_filter({"equals": {"key": "region", "value": "eu"}})
    assert [h.doc_id for h in retrieve(world, key, 5, "valve", eu)] == ["d"]
    world.ingest(tagged(key, "d", "valve", {"region": "us"}))
    assert retrieve(world, key, 5, "valve", eu) == []
    assert world.c.backend.get_documents([(key, "d")])[(key, "d")].metadata == {"region": "us"}


def test_f_filter_sqlite_file_from_before_metadata_migrates_on_open(tmp_path) -> None:
    """A search file written before metadata (no column, no side table) opens, keeps its documents (no
    metadata: notEquals admits them) and filters new ones."""
    from knowledge_core.adapters.sqlite.driver import sqlite3
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend

    path = tmp_path / "kb.sqlite3"
    SqliteFtsBackend(path).put_documents([tagged("s@1", "old", "valve", {})])
    with sqlite3.connect(path) as conn:  # the layout before metadata
        conn.execute("DROP TABLE document_metadata")
        conn.execute("ALTER TABLE documents DROP COLUMN metadata")
    backend = SqliteFtsBackend(path)
    backend.put_documents([tagged("s@1", "new", "valve", {"region": "eu"})])
    viewer = PRINCIPAL.viewer
    from knowledge_core.ports import QueryAnalysis, SourceQuery

    def found(raw: dict[str, Any]) -> list[str]:
        [result] = backend.search(
            [SourceQuery("s@1", 5, 0.0, filter=parse_filter(raw))], QueryAnalysis("valve"), viewer
        )
        return sorted(h.doc_id for h in result.hits)

    assert found({"equals": {"key": "region", "value": "eu"}}) == ["new"]
    assert found({"notEquals": {"key": "region", "value": "eu"}}) == ["old"]
    assert backend.get_documents([("s@1", "old")])[("s@1", "old")].metadata is None


@pytest.mark.integration
@pytest.mark.opensearch
def test_f_filter_opensearch_indices_from_before_metadata_get_its_fields(real_endpoints) -> None:
    """Indices made before metadata (strict mappings without its fields) get the typed fields by a mapping
    update in ensure_indices; their documents stay searchable and new ones filter."""
    import uuid

    from knowledge_core.adapters.opensearch import DOCUMENT_MAPPINGS, PASSAGE_MAPPINGS, OpenSearchBackend
    from knowledge_core.adapters.opensearch_filters import METADATA_PROPERTIES
    from knowledge_core.ports import QueryAnalysis, SourceQuery

    def before(mappings: dict[str, Any]) -> dict[str, Any]:
        properties = {k: v for k, v in mappings["properties"].items() if k not in METADATA_PROPERTIES}
        return {"dynamic": "strict", "properties": properties}

    backend = OpenSearchBackend(real_endpoints["OPENSEARCH_URL"], index_prefix=f"kbt-{uuid.uuid4().hex[:10]}")
    try:
        client = backend.client
        settings = {"number_of_shards": 1, "number_of_replicas": 0}
        analysis = backend.index_templates(knn=False)[backend.passages_index]["template"]["settings"][
            "analysis"
        ]
        client.indices.create(
            index=backend.passages_index,
            body={
                "settings": {**settings, "analysis": analysis},
                "mappings": before(PASSAGE_MAPPINGS),
                "aliases": {backend.passages_alias: {}},
            },
        )
        client.indices.create(
            index=backend.documents_index,
            body={
                "settings": settings,
                "mappings": before(DOCUMENT_MAPPINGS),
                "aliases": {backend.documents_alias: {}},
            },
        )
        backend.put_documents([tagged("s@1", "old", "valve", {})])  # ensure_indices runs first
        backend.put_documents([tagged("s@1", "new", "valve", {"region": "eu", "year": 2024})])
        mapping = client.indices.get_mapping(index=backend.passages_index)[backend.passages_index]["mappings"]
        assert mapping["properties"]["meta_n"]["properties"]["year"]["type"] == "double"

        def found(raw: dict[str, Any]) -> list[str]:
            q = SourceQuery("s@1", 5, 0.0, filter=parse_filter(raw))
            [result] = backend.search([q], QueryAnalysis("valve"), PRINCIPAL.viewer)
            return sorted(h.doc_id for h in result.hits)

        assert found({"greaterThan": {"key": "year", "value": 2000}}) == ["new"]
        assert found({"notEquals": {"key": "region", "value": "eu"}}) == ["old"]
    finally:
        backend.drop_indices()
