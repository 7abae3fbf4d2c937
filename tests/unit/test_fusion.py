"""R-FUSE: filters before fusion, RRF (k = 60) by hand, normalisation, dedup rules, rerank, topK."""

from __future__ import annotations

import math

import pytest
from knowledge_core.domain.fusion import RRF_K, Candidate, RankedList, content_fingerprint, fuse


def c(
    source: str, doc: str, score: float, content: str = "", structured: dict | None = None, title: str = ""
) -> Candidate:
    return Candidate(source, doc, title or doc, "sha256:x", score, content or f"{source} {doc}", structured)


def test_r_fuse_rrf_values_by_hand() -> None:
    """Two lists; a doc ranked 1st in A and 2nd in B (merged: same structured source + content)."""
    shared = {"uri": "s3://kb/manual.pdf"}
    a = RankedList("a@1", [c("a@1", "d1", 9.0, "same text", shared), c("a@1", "d2", 5.0)], top_k=5)
    b = RankedList("b@1", [c("b@1", "x9", 0.9), c("b@1", "d1-copy", 0.8, "same  text", shared)], top_k=5)
    fused = fuse([a, b], query="q", top_k=10)
    by_doc = {f.candidate.doc_id: f for f in fused}
    assert RRF_K == 60
    assert by_doc["d1"].rrf == pytest.approx(1 / 61 + 1 / 62)
    assert by_doc["d2"].rrf == pytest.approx(1 / 62)
    assert by_doc["x9"].rrf == pytest.approx(1 / 61)
    best = 2 / 61
    assert by_doc["d1"].fusion_score == pytest.approx((1 / 61 + 1 / 62) / best)
    assert by_doc["x9"].fusion_score == pytest.approx(0.5)
    assert [f.candidate.doc_id for f in fused] == ["d1", "x9", "d2"]
    assert by_doc["d1"].candidate.score == 9.0  # the vendor score is kept beside the fusion score
    assert [m.doc_id for m in by_doc["d1"].merged] == ["d1-copy"]


def test_r_fuse_score_finite_zero_to_one() -> None:
    lists = [
        RankedList(f"s{i}@1", [c(f"s{i}@1", f"d{j}", 100.0 - j) for j in range(10)], top_k=10)
        for i in range(5)
    ]
    fused = fuse(lists, query="q", top_k=50)
    assert len(fused) == 50
    assert all(math.isfinite(f.fusion_score) and 0 < f.fusion_score <= 1 for f in fused)
    single = fuse(
        [RankedList("a@1", [c("a@1", "d1", 3.0), c("a@1", "d2", 2.0)], top_k=5)], query="q", top_k=5
    )
    assert [f.fusion_score for f in single] == [1.0, pytest.approx(61 / 62)]


def test_r_fuse_filters_before_fusing() -> None:
    """Invisible (ACL/tenant), non-positive, non-finite and below-minScore hits take no rank slot."""
    hidden = c("a@1", "secret", 50.0)
    ranked = RankedList(
        "a@1",
        [
            hidden,
            c("a@1", "nan", float("nan")),
            c("a@1", "zero", 0.0),
            c("a@1", "low", 0.5),
            c("a@1", "ok", 2.0),
        ],
        top_k=5,
        min_score=1.0,
    )
    fused = fuse([ranked], query="q", top_k=5, visible=lambda cand: cand.doc_id != "secret")
    assert [f.candidate.doc_id for f in fused] == ["ok"]
    assert fused[0].rrf == pytest.approx(1 / 61)  # rank 1 after filtering


def test_r_fuse_per_source_top_k_and_routing_top_k() -> None:
    a = RankedList("a@1", [c("a@1", f"a{i}", 10.0 - i) for i in range(8)], top_k=2)
    b = RankedList("b@1", [c("b@1", f"b{i}", 10.0 - i) for i in range(8)], top_k=3)
    fused = fuse([a, b], query="q", top_k=4)
    docs = [f.candidate.doc_id for f in fused]
    assert docs == ["a0", "b0", "a1", "b1"]  # ties on RRF break on exact source key
    assert len(fuse([a, b], query="q", top_k=50)) == 5


def test_r_fuse_no_merge_on_shared_doc_number_alone() -> None:
    """Same doc id and even same content in two sources without structured source: two hits."""
    a = RankedList("a@1", [c("a@1", "42", 1.0, "identical body")], top_k=5)
    b = RankedList("b@1", [c("b@1", "42", 1.0, "identical body")], top_k=5)
    assert len(fuse([a, b], query="q", top_k=5)) == 2


def test_r_fuse_no_merge_when_content_differs() -> None:
    shared = {"uri": "https://docs/x"}
    a = RankedList("a@1", [c("a@1", "1", 1.0, "version one", shared)], top_k=5)
    b = RankedList("b@1", [c("b@1", "1", 1.0, "version two", shared)], top_k=5)
    assert len(fuse([a, b], query="q", top_k=5)) == 2
    other = {"uri": "https://docs/y"}
    b2 = RankedList("b@1", [c("b@1", "1", 1.0, "version one", other)], top_k=5)
    assert len(fuse([a, b2], query="q", top_k=5)) == 2


def test_r_fuse_lexical_rerank_deterministic() -> None:
    ranked = RankedList(
        "a@1",
        [
            c("a@1", "d1", 9.0, "nothing relevant"),
            c("a@1", "d2", 8.0, "gateway offline 网关离线"),
            c("a@1", "d3", 7.0, "gateway only"),
        ],
        top_k=5,
    )
    none = fuse([ranked], query="gateway 网关离线", top_k=5, rerank="NONE")
    assert [f.candidate.doc_id for f in none] == ["d1", "d2", "d3"]
    lexical = fuse([ranked], query="gateway 网关离线", top_k=5, rerank="LEXICAL")
    assert [f.candidate.doc_id for f in lexical] == ["d2", "d3", "d1"]
    assert [f.lexical for f in lexical] == [4, 1, 0]  # gateway, 网关, 关离, 离线
    assert [
        f.candidate.doc_id for f in fuse([ranked], query="gateway 网关离线", top_k=5, rerank="LEXICAL")
    ] == ["d2", "d3", "d1"]


def test_r_fuse_lexical_rerank_counts_what_the_query_asks_about_not_its_function_words() -> None:
    """LEXICAL counts the query's terms as the router does (§3.3: function words out): an FAQ passage
    full of "Do I … who … a" does not pass the passage that names the page and the SEV2 it asks about
    (the demo agent once cited a failover runbook's FAQ first for "who do I page for a SEV2")."""
    ranked = RankedList(
        "a@1",
        [
            c("a@1", "handbook", 9.0, "SEV2: page the primary; escalate after 15 minutes."),
            c("a@1", "runbook", 8.0, "Q: Do I still need to do anything? Who can approve a switchover?"),
        ],
        top_k=5,
    )
    lexical = fuse([ranked], query="who do I page for a SEV2", top_k=5, rerank="LEXICAL")
    assert [(f.candidate.doc_id, f.lexical) for f in lexical] == [("handbook", 2), ("runbook", 0)]


def test_r_fuse_empty() -> None:
    assert fuse([], query="q", top_k=5) == []
    assert fuse([RankedList("a@1", [], top_k=5)], query="q", top_k=5) == []


def test_content_fingerprint_ignores_whitespace_layout() -> None:
    assert content_fingerprint("a  b\nc") == content_fingerprint("a b c")
    assert content_fingerprint("a b c") != content_fingerprint("a b d")
