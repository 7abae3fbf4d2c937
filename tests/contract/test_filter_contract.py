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


def retrieve(world: World, key: str, top_k: int, query: str, node: Filter | None) -> list[Hit]:
    from knowledge_core.services.retrieval import SourceAsk

    analysed = world.c.retrieval.analyse(query)
    [outcome] = world.c.retrieval.run([SourceAsk(key, top_k, 0.0, node)], analysed, VIEWER, 15.0).outcomes
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
        Document(
            source_key=key,
            doc_id="mine",
            title="mine",
            body="valve",
            acl=DocumentAcl(tenant="acme"),
            metadata=shared,
        ),
        Document(
            source_key=key,
            doc_id="theirs",
            title="theirs",
            body="valve valve",
            acl=DocumentAcl(tenant="other"),
            metadata=shared,
        ),
        Document(
            source_key=key,
            doc_id="us",
            title="us",
            body="valve valve valve",
            acl=DocumentAcl(tenant="acme"),
            metadata={"region": "us"},
        ),
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
    world.ingest(
        Document(
            source_key=key, doc_id="d", title="d", body="valve", acl=DocumentAcl(tenant="acme"), metadata=meta
        )
    )
    stored = world.c.backend.get_documents([(key, "d")])[(key, "d")]
    assert stored.metadata == meta
    eu = parse_filter({"equals": {"key": "region", "value": "eu"}})
    assert [h.doc_id for h in retrieve(world, key, 5, "valve", eu)] == ["d"]
    world.ingest(
        Document(
            source_key=key,
            doc_id="d",
            title="d",
            body="valve",
            acl=DocumentAcl(tenant="acme"),
            metadata={"region": "us"},
        )
    )
    assert retrieve(world, key, 5, "valve", eu) == []
    assert world.c.backend.get_documents([(key, "d")])[(key, "d")].metadata == {"region": "us"}
