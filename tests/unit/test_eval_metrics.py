"""Retrieval quality metrics of the evaluation harness (Retrieval II): nDCG@10, Recall@k and
MRR@3 against hand-computed values, the independent BM25 baseline and its script-aware tokenizer, and the
SciFact and XQuAD readers."""

from __future__ import annotations

import math

import pytest

from kb_cli.evaluation import (
    SCIFACT_ZIP,
    XQUAD_DIR,
    Bm25Baseline,
    Collection,
    EvalDocument,
    EvalResult,
    Metrics,
    _abstract_text,
    baseline_for,
    bigram_tokens,
    format_table,
    load_collection,
    load_demo,
    load_scifact,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
    script_tokens,
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


def test_mrr_at_3_is_the_first_relevant_rank_within_3():
    assert mrr_at_k(["a", "b", "c"], {"a": 1}) == 1.0
    assert mrr_at_k(["x", "b", "a"], {"a": 1, "b": 1}) == pytest.approx(0.5)  # the first relevant counts
    assert mrr_at_k(["x", "y", "a"], {"a": 1}) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "z", "a"], {"a": 1}) == 0.0  # rank 4 is past the cut
    assert mrr_at_k(["a"], {"a": 0}) == 0.0
    assert mrr_at_k([], {"a": 1}) == 0.0


def test_metrics_average_over_queries():
    m = Metrics.over([["a", "b"], ["x", "y", "z", "c"]], [{"b": 1}, {"c": 1}])
    assert m.queries == 2
    assert m.ndcg_at_10 == pytest.approx((1 / LOG2_3 + 1 / LOG2_5) / 2)
    assert m.recall_at_3 == pytest.approx(0.5)
    assert m.mrr_at_3 == pytest.approx(0.25)  # 1/2 and 0
    assert m.recall_at_100 == pytest.approx(1.0)
    assert Metrics.over([], []) == Metrics(0.0, 0.0, 0.0, 0.0, 0)


def test_format_table_shows_every_metric_for_service_and_baseline():
    result = EvalResult(
        collection="xquad-en-zh-train",
        backend="sqlite",
        documents=120,
        queries=612,
        metrics=Metrics(0.9, 0.8, 0.7, 0.95, 612),
        baseline_name="BM25",
        baseline=Metrics(0.3, 0.2, 0.1, 0.5, 612),
        published_baseline=None,
        ingest_seconds=1.0,
        query_seconds=1.0,
        query_ms_p50=1.0,
        query_ms_p95=2.0,
        wall_seconds=3.0,
        public=Metrics(0.85, 0.8, 0.7, 0.85, 612),
    )
    head, _, row, *_ = format_table([result]).splitlines()
    assert row.split()[12] == "0.8500"  # K-PIPE: what the public search answers, beside the deep ranking
    for label in ("R@3", "MRR@3", "nDCG@10", "R@100", "b R@3", "b MRR@3", "b nDCG@10", "b R@100", "API R@3"):
        assert label in head
    assert row.split()[4:12] == [
        "0.9000",
        "0.8000",
        "0.7000",
        "0.9500",
        "0.3000",
        "0.2000",
        "0.1000",
        "0.5000",
    ]
    assert result.to_json()["metrics"]["mrr_at_3"] == 0.8


def test_bigram_and_word_tokens_are_plain():
    assert bigram_tokens("网关离线 GW!") == ["网关", "关离", "离线", "gw"]
    assert bigram_tokens("安") == ["安"]
    assert word_tokens("The Studies, of mice") == ["the", "studies", "of", "mice"]


def test_script_tokens_split_each_run_by_its_script():
    # English words stay words, Chinese runs become bigrams, also inside one run of word characters.
    assert script_tokens("网关离线 Gateway!") == ["网关", "关离", "离线", "gateway"]
    assert script_tokens("2015年的Super Bowl，是安") == ["2015", "年的", "super", "bowl", "是安"]
    assert script_tokens("安 NFL") == ["安", "nfl"]
    assert script_tokens("The Studies, of mice") == word_tokens("The Studies, of mice")


def test_the_baseline_matches_english_names_in_chinese_documents():
    # A plain-bigram baseline would cut "NFL" into "nf", "fl"; by script, an English query finds it.
    docs = [
        EvalDocument("zh", "", "黑豹队领先国家橄榄球联盟 (NFL)"),
        EvalDocument("other", "", "华沙是波兰的首都"),
    ]
    for lang in ("zh", "en", "mixed"):  # whatever language the collection is labelled with
        _, bm25 = baseline_for(Collection("c", lang, docs, []))
        assert bm25.rank("Which NFL team?") == ["zh"]
        assert bm25.rank("华沙在哪里") == ["other"]


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


XQUAD_TASK_SIZES = {  # task: (documents across both halves, questions across both halves)
    "xquad-zh-zh": (240, 1190),
    "xquad-en-en": (240, 1190),
    "xquad-en-zh": (240, 1190),
    "xquad-zh-en": (240, 1190),
    "xquad-mixed": (480, 2380),
}
needs_xquad = pytest.mark.skipif(
    not (XQUAD_DIR / "xquad.zh.json").exists(), reason="shared/eval/xquad is not there"
)


def article_of(doc_id: str) -> str:
    return doc_id.split("-")[1]  # <lang>-<article>-<paragraph>


@needs_xquad
@pytest.mark.parametrize("task", sorted(XQUAD_TASK_SIZES))
def test_xquad_task_sizes_and_a_disjoint_fixed_split_by_article(task):
    train, test = load_collection(f"{task}-train"), load_collection(task)
    docs, questions = XQUAD_TASK_SIZES[task]
    assert (train.name, test.name) == (f"{task}-train", task)
    assert len(train.documents) + len(test.documents) == docs
    assert len(train.queries) + len(test.queries) == questions
    train_articles = {article_of(d.doc_id) for d in train.documents}
    test_articles = {article_of(d.doc_id) for d in test.documents}
    assert len(train_articles) == len(test_articles) == 24
    assert not train_articles & test_articles
    # Fixed: articles at even positions in file order tune, odd ones are reported.
    assert all(int(a) % 2 == 0 for a in train_articles) and all(int(a) % 2 == 1 for a in test_articles)
    for half in (train, test):
        ids = {d.doc_id for d in half.documents}
        assert len(ids) == len(half.documents)
        assert len({q.qid for q in half.queries}) == len(half.queries)
        assert all(set(q.relevant) <= ids for q in half.queries)


@needs_xquad
def test_xquad_languages_of_documents_and_questions():
    en_zh = load_collection("xquad-en-zh")
    assert {d.doc_id[:2] for d in en_zh.documents} == {"zh"}
    assert {q.qid[:2] for q in en_zh.queries} == {"en"}
    assert all(any("\u4e00" <= ch <= "\u9fff" for ch in d.body) for d in en_zh.documents)
    assert not any("\u4e00" <= ch <= "\u9fff" for q in en_zh.queries for ch in q.text)
    zh_en = load_collection("xquad-zh-en")
    assert {d.doc_id[:2] for d in zh_en.documents} == {"en"} and {q.qid[:2] for q in zh_en.queries} == {"zh"}
    first = en_zh.documents[0]
    assert first.title == "Warsaw" and first.doc_id == "zh-01-0"  # article 1 is the first reported one


@needs_xquad
def test_xquad_mixed_relevance_is_both_language_versions_of_the_paragraph():
    mixed = load_collection("xquad-mixed")
    assert all(len(q.relevant) == 2 for q in mixed.queries)
    first_zh, first_en = mixed.queries[0], next(q for q in mixed.queries if q.qid.startswith("en-"))
    assert first_zh.relevant == first_en.relevant == {"zh-01-0": 1, "en-01-0": 1}
    assert first_zh.qid.removeprefix("zh-") == first_en.qid.removeprefix("en-")  # parallel ids


@needs_xquad
def test_xquad_limit_takes_the_first_questions():
    limited = load_collection("xquad-zh-zh-train", limit=5)
    assert limited.name == "xquad-zh-zh-train-5"
    assert len(limited.queries) == 5 and len(limited.documents) == 120
