"""The evaluation harness end to end on the embedded backend without a model (Retrieval II): an XQuAD
task through ingestion and KnowledgeService.rank with BM25, the hybrid tuning grid, and one ingested index
re-ranked with other knobs (a toy embedder stands in for the model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.ports import Embedder

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
    semantic_settings,
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

    model_id = "toy"

    def __init__(self) -> None:
        self.passages = 0

    def embed_query(self, text: str) -> bytes | None:
        return bytes([len(text) % 100, 20, 3])

    def embed_passages(self, texts: Sequence[str]) -> list[bytes]:
        self.passages += len(texts)
        return [bytes([len(t) % 100, 10, 7]) for t in texts]


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
    assert (first.hybrid["weight"], second.hybrid["weight"], second.hybrid["pool"]) == (0.1, 0.9, 7)
    assert second.ranking.startswith("hybrid toy ") and "weight=0.9" in second.ranking
    assert len(second.per_query[0]["top"]) == len(docs)  # the same six documents, found through the index


def test_grid_points_are_the_product_without_repeats() -> None:
    model = Semantic("m", cache="c")
    points = grid_points(
        model, fusions=["blend", "rrf"], weights=[0.1, 0.3], pools=[50], dense=[None], rrf_ks=[30, 60]
    )
    # rrf_k only matters for rrf: blend gets one point per weight, rrf one per weight and rrf_k.
    assert [(p.fusion, p.weight, p.rrf_k) for p in points] == [
        ("blend", 0.1, None),
        ("blend", 0.3, None),
        ("rrf", 0.1, 30),
        ("rrf", 0.1, 60),
        ("rrf", 0.3, 30),
        ("rrf", 0.3, 60),
    ]
    assert all(p.model_dir == "m" and p.cache == "c" for p in points)


def test_a_knob_the_service_lacks_is_refused_not_ignored() -> None:
    from knowledge_core.settings import Settings

    values = semantic_settings(Semantic("m", weight=0.2, pool=40))
    assert values["semantic_weight"] == 0.2 and values["semantic_pool"] == 40
    if "semantic_fusion" not in Settings.model_fields:
        with pytest.raises(ValueError, match="semantic_fusion"):
            semantic_settings(Semantic("m", fusion="rrf"))


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
