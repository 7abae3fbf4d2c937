"""The evaluation harness end to end on the embedded backend without a model (Retrieval II): an XQuAD
task through ingestion and KnowledgeService.rank with BM25, the hybrid tuning grid, and one ingested index
re-ranked with other knobs (a toy embedder stands in for the model)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.hybrid import HybridRanking
from knowledge_core.ports import Embedder, Vector

from kb_cli.evaluation import (
    XQUAD_DIR,
    Collection,
    EvalDocument,
    EvalQuery,
    Semantic,
    build_container,
    evaluate,
    format_grid,
    grid_points,
    ingest,
    load_collection,
    measure,
    semantic_from,
    tune_main,
    with_ranking,
)


@pytest.mark.skipif(not (XQUAD_DIR / "xquad.zh.json").exists(), reason="shared/eval/xquad is not there")
def test_an_xquad_task_through_the_service_with_bm25(tmp_path: Path) -> None:
    collection = load_collection("xquad-zh-zh-train", limit=30)
    result = evaluate(collection, build_container("sqlite", tmp_path), "sqlite", progress=False)
    assert (result.documents, result.queries, result.ranking, result.hybrid) == (120, 30, "bm25", None)
    # Chinese questions over their own paragraphs: high word overlap, both rankings find most of them.
    assert result.metrics.mrr_at_3 > 0.7 and result.baseline.mrr_at_3 > 0.7
    assert result.metrics.recall_at_3 >= result.metrics.mrr_at_3
    assert {"mrr@3", "baseline_mrr@3"} <= set(result.per_query[0])


class ToyEmbedder(Embedder):
    """Vectors from the text's length; counts the passages it embeds."""

    models = ("toy",)

    def __init__(self) -> None:
        self.passages = 0

    def dimensions(self, model: str) -> int:
        return 3

    def embed_query(self, text: str) -> Vector | None:
        return Vector("toy", bytes([len(text) % 100, 20, 3]))

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        self.passages += len(texts)
        return [[Vector("toy", bytes([len(t) % 100, 10, 7]))] for t in texts]


def test_one_ingestion_is_ranked_again_with_other_knobs(tmp_path: Path) -> None:
    docs = [EvalDocument(f"d{i}", f"title {i}", f"apple banana {'cherry ' * i}") for i in range(6)]
    collection = Collection("toy", "en", docs, [EvalQuery("q1", "cherry apple", {"d2": 1})])
    built = build_container("sqlite", tmp_path, semantic=Semantic("no-model-needed"))
    embedder = ToyEmbedder()
    container = Container(built.settings, clock=built.clock, embedder=embedder)
    ingested = ingest(collection, container, progress=False)
    embedded = embedder.passages
    assert embedded >= len(docs)
    first = measure(collection, container, "sqlite", ingested, progress=False)
    retuned = with_ranking(container, Semantic("no-model-needed", weight=0.9, pool=7))
    second = measure(collection, retuned, "sqlite", ingested, progress=False)
    assert embedder.passages == embedded  # nothing ingested or embedded again
    assert first.hybrid is not None and second.hybrid is not None
    defaults = HybridRanking()
    assert (first.hybrid["weight"], second.hybrid["weight"], second.hybrid["pool"]) == (
        defaults.weight,
        0.9,
        7,
    )
    assert second.hybrid["fusion"] == defaults.fusion and second.hybrid["dense"] == defaults.dense
    assert second.ranking.startswith("hybrid toy ") and "weight=0.9" in second.ranking
    assert len(second.per_query[0]["top"]) == len(docs)  # the same six documents, found through the index


def test_grid_points_are_the_product_without_repeats() -> None:
    model = Semantic("m", cache="c")
    points = grid_points(
        model, fusions=["blend", "rrf"], weights=[0.1, 0.3], pools=[50], dense=[0, 50], rrf_ks=[30, 60]
    )
    # The weight only matters for blend and rrf_k only for rrf: 2 weights x 2 dense + 2 dense x 2 rrf_k.
    assert [(p.fusion, p.weight, p.dense, p.rrf_k) for p in points] == [
        ("blend", 0.1, 0, 60),
        ("blend", 0.1, 50, 60),
        ("blend", 0.3, 0, 60),
        ("blend", 0.3, 50, 60),
        ("rrf", HybridRanking.weight, 0, 30),  # rrf keeps the default weight
        ("rrf", HybridRanking.weight, 0, 60),
        ("rrf", HybridRanking.weight, 50, 30),
        ("rrf", HybridRanking.weight, 50, 60),
    ]
    assert all(p.model_dir == "m" and p.cache == "c" and p.pool == 50 for p in points)


def test_every_knob_reaches_the_containers_hybrid_ranking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb_cli import models

    monkeypatch.setattr(models, "resolve", lambda choice: (choice, "hybrid"))  # no model files needed here
    semantic = Semantic("no-model-needed", weight=0.3, pool=40, fusion="rrf", dense=7, rrf_k=30)
    hybrid = build_container("sqlite", tmp_path, semantic=semantic).hybrid
    assert (hybrid.weight, hybrid.pool, hybrid.fusion, hybrid.dense, hybrid.rrf_k) == (0.3, 40, "rrf", 7, 30)
    assert semantic_from(
        argparse.Namespace(
            embedding_model=str(tmp_path),
            embedding_cache="",
            cross_script=False,
            semantic_weight=0.3,
            semantic_pool=40,
            fusion="rrf",
            dense_k=7,
            rrf_k=30,
        )
    ) == replace(semantic, model_dir=str(tmp_path))


def test_tuning_refuses_the_reported_collections() -> None:
    with pytest.raises(SystemExit):
        tune_main(["--collection", "xquad-en-zh", "--embedding-model", "none"])
    with pytest.raises(SystemExit, match="embedding model"):
        tune_main(["--collection", "xquad-en-zh-train", "--embedding-model", "none"])


def test_format_grid_rows_baselines_and_means(tmp_path: Path) -> None:
    docs = [EvalDocument(f"d{i}", "", f"apple {'cherry ' * i}") for i in range(4)]
    collection = Collection("toy-train", "en", docs, [EvalQuery("q1", "cherry", {"d1": 1})])
    built = build_container("sqlite", tmp_path, semantic=Semantic("no-model-needed"))
    container = Container(built.settings, clock=built.clock, embedder=ToyEmbedder())
    ingested = ingest(collection, container, progress=False)
    results = [
        measure(
            collection, with_ranking(container, Semantic("x", weight=w)), "sqlite", ingested, progress=False
        )
        for w in (0.1, 0.5)
    ]
    table = format_grid(results)
    assert "weight" in table.splitlines()[0] and "MRR@3" in table.splitlines()[0]
    assert sum(line.startswith("toy-train") for line in table.splitlines()) == 3  # two points, one baseline
    assert sum(line.startswith("mean") for line in table.splitlines()) == 2
    assert "mean *" in table


@pytest.mark.skipif(not (XQUAD_DIR / "xquad.zh.json").exists(), reason="shared/eval/xquad is not there")
def test_the_small_source_task_asks_each_question_of_its_articles_group(tmp_path: Path) -> None:
    """`xquad-small` puts the long documents in sources of four (two Chinese, two English) and
    asks each question through its own group's route, so every hint and reference comes from that group."""
    from kb_cli.eval_answers import SMALL_GROUP, evaluate_answers, load_xquad_long

    collection = load_xquad_long("train", XQUAD_DIR, limit=6, task="xquad-small")
    assert collection.name == "xquad-small-train-6" and collection.group == SMALL_GROUP == 4
    groups = collection.sources()
    assert sum(len(g) for g in groups) == len(collection.documents) and all(len(g) <= 4 for g in groups)
    assert [d.doc_id[:2] for d in groups[0]] == ["zh", "en", "zh", "en"]
    group_of = {d.doc_id: n for n, g in enumerate(groups) for d in g}
    result = evaluate_answers(collection, build_container("sqlite", tmp_path), "sqlite", progress=False)
    assert result.documents == len(collection.documents) and result.overall.queries == 12
    for seen, query in zip(result.per_query, collection.queries, strict=True):
        own = group_of[query.doc_id]
        assert {group_of[d] for d in seen["hint_docs"] + seen["reference_docs"]} <= {own}
    assert result.overall.top_hint_right_document > 0.5  # BM25 alone, four documents to choose from
