"""A-SEARCH retrieval quality regression guard on the embedded backend: the demo corpus'
hand-labelled Chinese queries and a 60-claim SciFact subset go through the normal ingestion path and
KnowledgeService.rank; thresholds sit a little below the values measured when the ranking was tuned
(docs/archive/quality-log.md), so a change that makes ranking worse fails here."""

from __future__ import annotations

import pytest

from kb_cli.evaluation import (
    SCIFACT_ZIP,
    XQUAD_DIR,
    Collection,
    Semantic,
    build_container,
    evaluate,
    load_collection,
    load_demo,
    load_scifact,
)

pytestmark = pytest.mark.integration

SCIFACT_QUERIES = 60
SCIFACT_DISTRACTORS = 1500


def scifact_subset() -> Collection:
    """The first 60 test claims over their cited documents plus the first 1,500 corpus documents (a smaller,
    fixed corpus keeps the guard under a minute)."""
    full = load_scifact(SCIFACT_ZIP, "test", SCIFACT_QUERIES)
    cited = {d for q in full.queries for d in q.relevant}
    documents = [d for i, d in enumerate(full.documents) if i < SCIFACT_DISTRACTORS or d.doc_id in cited]
    return Collection("scifact-guard", "en", documents, full.queries)


def test_a_search_quality_demo_zh_beats_bigram_bm25(tmp_path):
    result = evaluate(load_demo("zh"), build_container("sqlite", tmp_path), "sqlite", progress=False)
    assert result.queries >= 100
    assert result.metrics.ndcg_at_10 >= GUARD["demo-zh"]["ndcg@10"]
    assert result.metrics.recall_at_3 >= GUARD["demo-zh"]["recall@3"]
    # The tuned analyzer must stay ahead of plain character-bigram BM25 computed in the same run.
    assert result.metrics.ndcg_at_10 > result.baseline.ndcg_at_10


@pytest.mark.skipif(not SCIFACT_ZIP.exists(), reason="shared/eval/scifact/scifact.zip is not there")
def test_a_search_quality_scifact_subset(tmp_path):
    result = evaluate(scifact_subset(), build_container("sqlite", tmp_path), "sqlite", progress=False)
    assert result.queries == SCIFACT_QUERIES
    assert result.metrics.ndcg_at_10 >= GUARD["scifact"]["ndcg@10"]
    assert result.metrics.recall_at_100 >= GUARD["scifact"]["recall@100"]


def test_a_search_quality_hybrid_demo(tmp_path, embedding_model_dir, lexicon_dir):
    """The default ranking where models and lexicon are fetched — hybrid (both models, dense first stage)
    with cross-lingual query expansion — lifts the English demo queries and the Chinese ones, a third of
    which ask about documents written only in English."""
    semantic = Semantic(embedding_model_dir, cache=str(tmp_path / "vectors.sqlite3"))
    (tmp_path / "en").mkdir()
    (tmp_path / "zh").mkdir()
    en_container = build_container("sqlite", tmp_path / "en", semantic=semantic, lexicon=lexicon_dir)
    en = evaluate(load_demo("en"), en_container, "sqlite", progress=False)
    assert en.ranking.startswith("hybrid") and "translation" in en.ranking
    assert en.metrics.ndcg_at_10 >= GUARD["hybrid demo-en"]["ndcg@10"] > en.baseline.ndcg_at_10
    zh_container = build_container("sqlite", tmp_path / "zh", semantic=semantic, lexicon=lexicon_dir)
    zh = evaluate(load_demo("zh"), zh_container, "sqlite", progress=False)
    assert zh.metrics.ndcg_at_10 >= GUARD["hybrid demo-zh"]["ndcg@10"]
    assert zh.metrics.recall_at_3 >= GUARD["hybrid demo-zh"]["recall@3"]


@pytest.mark.skipif(not (XQUAD_DIR / "xquad.zh.json").exists(), reason="shared/eval/xquad is not there")
@pytest.mark.parametrize("task", ["xquad-en-zh-train", "xquad-zh-en-train"])
def test_a_search_quality_cross_lingual(tmp_path, embedding_model_dir, lexicon_dir, task):
    """An English question over Chinese paragraphs, and the reverse (the XQuAD tuning half): R@3 at least
    0.8 by default (item 3), where BM25 alone is near 0.3 / 0.2."""
    semantic = Semantic(embedding_model_dir, cache=str(tmp_path / "vectors.sqlite3"))
    container = build_container("sqlite", tmp_path, semantic=semantic, lexicon=lexicon_dir)
    result = evaluate(load_collection(task), container, "sqlite", progress=False)
    assert result.metrics.recall_at_3 >= GUARD[task]["recall@3"] > result.baseline.recall_at_3


# Measured at tuning time: demo-zh nDCG@10 0.7737, R@3 0.7839 (bigram BM25 0.7157 / 0.7032);
# SciFact subset (1,535 docs, 60 claims) nDCG@10 0.8462, R@100 0.9667. Hybrid (bge-small-en-v1.5, weight
# 0.1, pool 50): demo-en nDCG@10 0.9815 (BM25 0.9238); demo-zh unchanged. Retrieval II (both models, dense
# stage 50, blend 0.1): demo-en 0.9608, demo-zh 0.7730 / R@3 0.7839 (with cross-script embedding 0.7707 /
# 0.7516: below the guard, which is why it is not the default). With query translation (blend-norm 0.4):
# demo-en 0.9803, demo-zh 0.8728 / R@3 0.8871; XQuAD tuning half R@3 en->zh 0.8513, zh->en 0.9003.
GUARD = {
    "hybrid demo-en": {"ndcg@10": 0.95},
    "hybrid demo-zh": {"ndcg@10": 0.85, "recall@3": 0.86},
    "demo-zh": {"ndcg@10": 0.75, "recall@3": 0.76},
    "scifact": {"ndcg@10": 0.82, "recall@100": 0.95},
    "xquad-en-zh-train": {"recall@3": 0.82},
    "xquad-zh-en-train": {"recall@3": 0.87},
}
