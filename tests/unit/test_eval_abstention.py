"""`kb eval`'s abstention figures (K-REL: a door answers nothing when nothing is relevant) on small hand-made
answers, and the bilingual organisation set (orgkb) they are measured on: its documents, questions, splits
and answer spans."""

from __future__ import annotations

import pytest

from kb_cli.evaluation import (
    Abstention,
    EvalResult,
    Metrics,
    abstention_recall,
    false_abstention,
    format_table,
)

ANSWERABLE = {"a": 1}
UNANSWERABLE: dict[str, int] = {}


def test_abstention_recall_is_the_share_of_unanswerable_queries_with_no_hits_k_rel() -> None:
    answers = [[], ["a"], [], ["b", "c"], ["a"]]
    qrels = [UNANSWERABLE, UNANSWERABLE, UNANSWERABLE, UNANSWERABLE, ANSWERABLE]
    assert abstention_recall(answers, qrels) == pytest.approx(0.5)  # 2 of the 4 unanswerable are empty


def test_false_abstention_is_the_share_of_answerable_queries_with_no_hits_k_rel() -> None:
    answers = [[], ["b"], ["a"], [], []]
    qrels = [ANSWERABLE, ANSWERABLE, ANSWERABLE, {"z": 1}, UNANSWERABLE]
    # A wrong hit is not an abstention: only the two empty answers to answerable queries count.
    assert false_abstention(answers, qrels) == pytest.approx(0.5)


def test_abstention_figures_are_undefined_without_queries_of_their_kind_k_rel() -> None:
    assert abstention_recall([["a"]], [ANSWERABLE]) is None
    assert false_abstention([[]], [UNANSWERABLE]) is None
    assert Abstention.over([["a"], []], [ANSWERABLE, {"b": 1}], [None, None]) is None


def test_abstention_over_splits_recall_by_kind_of_unanswerable_query_k_rel() -> None:
    answers = [[], ["x"], [], [], ["y"], [], ["a"]]
    qrels = [UNANSWERABLE] * 5 + [ANSWERABLE, ANSWERABLE]
    kinds = ["near", "near", "far", "far", "far", "same", "cross"]
    a = Abstention.over(answers, qrels, kinds)
    assert a is not None
    assert (a.unanswerable, a.answerable) == (5, 2)
    assert a.recall == pytest.approx(3 / 5)
    assert a.by_kind == pytest.approx({"near": 0.5, "far": 2 / 3})
    assert a.by_kind_queries == {"near": 2, "far": 3}
    assert a.false_abstention == pytest.approx(0.5)


def _result(abstention: Abstention | None) -> EvalResult:
    m = Metrics(0.9, 0.8, 0.7, 0.95, 4)
    return EvalResult(
        collection="orgkb-train",
        backend="sqlite",
        documents=40,
        queries=6,
        metrics=m,
        baseline_name="BM25",
        baseline=m,
        published_baseline=None,
        ingest_seconds=1.0,
        query_seconds=1.0,
        query_ms_p50=1.0,
        query_ms_p95=2.0,
        wall_seconds=3.0,
        public=Metrics(0.85, 0.8, 0.7, 0.85, 4),
        public_precision=0.5,
        abstention=abstention,
    )


def test_the_table_adds_an_abstention_line_and_keeps_its_columns_k_rel() -> None:
    qrels = [UNANSWERABLE] * 3 + [ANSWERABLE]
    a = Abstention.over([[], ["x"], [], ["a"]], qrels, ["near", "far", "far", "same"])
    table = format_table([_result(a)])
    _, _, row, *notes = table.splitlines()
    assert row.split()[12] == "0.8500"  # the API R@3 column stays where it was
    line = next(n for n in notes if "abstention" in n)
    assert "unanswerable 0.6667 of 3" in line
    assert "near 1.0000 of 1" in line and "far 0.5000 of 2" in line
    assert "false abstention (no hits) on answerable 0.0000 of 1" in line
    assert _result(a).to_json()["abstention"]["by_kind"] == {"near": 1.0, "far": 0.5}
    assert not any("abstention" in n for n in format_table([_result(None)]).splitlines())


def test_ranking_metrics_count_answerable_queries_only_and_abstention_uses_the_api_hints_k_pipe(
    tmp_path,
) -> None:
    """Through the real harness (BM25, SQLite): unanswerable queries do not drag R@3 to zero; they are
    measured by whether the public search answered nothing."""
    from kb_cli.evaluation import Collection, EvalDocument, EvalQuery, build_container, evaluate

    docs = [
        EvalDocument("leave", "Annual leave", "Employees get fifteen days of annual leave each year."),
        EvalDocument("vpn", "VPN", "Connect the VPN client before opening the intranet."),
    ]
    queries = [
        EvalQuery("q1", "annual leave days", {"leave": 1}, "same"),
        EvalQuery("q2", "VPN client intranet", {"vpn": 1}, "same"),
        EvalQuery("q3", "zebra quokka platypus", {}, "far"),
    ]
    container = build_container("sqlite", tmp_path)
    try:
        result = evaluate(Collection("tiny", "en", docs, queries), container, "sqlite", progress=False)
    finally:
        container.close()
    assert result.metrics.queries == 2 and result.metrics.recall_at_3 == pytest.approx(1.0)
    assert result.public is not None and result.public.queries == 2
    assert result.abstention is not None
    assert result.abstention.by_kind == {"far": 1.0}  # no word of it is in the corpus: nothing to answer
    assert result.abstention.false_abstention == pytest.approx(0.0)
    assert [q.get("kind") for q in result.per_query] == ["same", "same", "far"]
