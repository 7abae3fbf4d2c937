"""Retrieval quality metrics of the evaluation harness (issue 6): nDCG@10 and Recall@k against
hand-computed values, the independent BM25 baseline, and the SciFact reader."""

from __future__ import annotations

import math

import pytest

from kb_cli.evaluation import (
    SCIFACT_ZIP,
    Bm25Baseline,
    EvalDocument,
    Metrics,
    _abstract_text,
    bigram_tokens,
    load_demo,
    load_scifact,
    ndcg_at_k,
    recall_at_k,
    word_tokens,
)

LOG2_3 = math.log2(3)  # discount of rank 2
LOG2_5 = math.log2(5)  # discount of rank 4


def test_ndcg_single_relevant_at_rank_2():
    # DCG = 1/log2(3) = 0.6309; IDCG = 1.
    assert ndcg_at_k(["a", "b", "c"], {"b": 1}) == pytest.approx(0.630930, abs=1e-6)


def test_ndcg_two_relevant_at_ranks_2_and_4():
    # DCG = 1/log2(3) + 1/log2(5) = 1.061606; IDCG = 1 + 1/log2(3) = 1.630930.
    expected = (1 / LOG2_3 + 1 / LOG2_5) / (1 + 1 / LOG2_3)
    assert expected == pytest.approx(0.650921, abs=1e-6)
    assert ndcg_at_k(["x", "a", "y", "b"], {"a": 1, "b": 1}) == pytest.approx(expected)


def test_ndcg_graded_relevance_uses_linear_gain():
    # DCG = 1 + 2/log2(3) = 2.261860; IDCG = 2 + 1/log2(3) = 2.630930.
    assert ndcg_at_k(["b", "a"], {"a": 2, "b": 1}) == pytest.approx(0.859719, abs=1e-6)


def test_ndcg_perfect_and_empty():
    assert ndcg_at_k(["a", "b"], {"a": 1, "b": 1}) == pytest.approx(1.0)
    assert ndcg_at_k([], {"a": 1}) == 0.0
    assert ndcg_at_k(["a"], {}) == 0.0


def test_ndcg_cuts_at_k_and_ideal_is_cut_at_k_too():
    ranked = [f"x{i}" for i in range(10)] + ["a"]
    assert ndcg_at_k(ranked, {"a": 1}, 10) == 0.0
    # 12 relevant documents, the first 10 ranked all relevant: the ideal has only 10 places.
    relevant = {f"r{i}": 1 for i in range(12)}
    assert ndcg_at_k([f"r{i}" for i in range(10)], relevant, 10) == pytest.approx(1.0)


def test_ndcg_counts_a_repeated_document_once():
    assert ndcg_at_k(["a", "a", "b"], {"a": 1, "b": 1}) == pytest.approx(1.0)


def test_recall_at_k():
    ranked = ["a", "x", "b", "c"]
    relevant = {"a": 1, "b": 1, "c": 1, "d": 1}
    assert recall_at_k(ranked, relevant, 3) == pytest.approx(0.5)
    assert recall_at_k(ranked, relevant, 100) == pytest.approx(0.75)
    assert recall_at_k(ranked, {}, 3) == 0.0
    assert recall_at_k(ranked, {"a": 0, "b": 1}, 1) == 0.0


def test_metrics_average_over_queries():
    m = Metrics.over([["a", "b"], ["x", "y", "z", "c"]], [{"b": 1}, {"c": 1}])
    assert m.queries == 2
    assert m.ndcg_at_10 == pytest.approx((1 / LOG2_3 + 1 / LOG2_5) / 2)
    assert m.recall_at_3 == pytest.approx(0.5)
    assert m.recall_at_100 == pytest.approx(1.0)


def test_bigram_and_word_tokens_are_plain():
    assert bigram_tokens("网关离线 GW!") == ["网关", "关离", "离线", "gw"]
    assert bigram_tokens("安") == ["安"]
    assert word_tokens("The Studies, of mice") == ["the", "studies", "of", "mice"]


def test_bm25_baseline_hand_computed():
    docs = [
        EvalDocument("d1", "", "apple apple banana"),
        EvalDocument("d2", "", "banana cherry"),
        EvalDocument("d3", "", "cherry"),
    ]
    bm25 = Bm25Baseline(docs, word_tokens, k1=0.9, b=0.4)
    # "apple": n=1 of N=3 -> idf = ln(1 + 2.5/1.5); d1 length 3, avg 2 -> norm = 0.9 * (0.6 + 0.4 * 1.5).
    idf = math.log(1 + 2.5 / 1.5)
    norm = 0.9 * (0.6 + 0.4 * 1.5)
    expected_d1 = idf * 2 * 1.9 / (2 + norm)
    assert bm25.scores("apple") == [("d1", pytest.approx(expected_d1))]
    assert bm25.rank("apple") == ["d1"]
    assert bm25.rank("cherry") == ["d3", "d2"]  # the shorter document wins on equal tf
    assert bm25.rank("nothing here") == []


def test_scifact_abstract_literals_are_joined():
    assert _abstract_text("['First sentence.'\n 'Second \"one\".']") == 'First sentence. Second "one".'


def test_demo_queries_load_with_known_documents():
    collection = load_demo("zh")
    ids = {d.doc_id for d in collection.documents}
    assert len(collection.queries) >= 100
    assert all(set(q.relevant) <= ids for q in collection.queries)


@pytest.mark.skipif(not SCIFACT_ZIP.exists(), reason="shared/eval/scifact/scifact.zip is not there")
def test_scifact_test_split_matches_beir():
    collection = load_scifact(SCIFACT_ZIP, "test")
    assert len(collection.documents) == 5183
    assert len(collection.queries) == 300
    assert sum(len(q.relevant) for q in collection.queries) == 339
