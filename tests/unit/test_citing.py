"""Which passage a hit shows (domain.citing): the rule, and the retrieval step that applies it to
every door's hits with one batched read (I24, K-PIPE)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from knowledge_core.domain.citing import CITE_BM25_WEIGHT, CITE_PASSAGES, cite, cited_passage
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.fusion import Hit
from knowledge_core.domain.models import Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery, SourceResult, Vector
from knowledge_core.services.retrieval import Retrieval, SourceAsk

from tests.unit.test_tools import FakeBackend

VIEWER = Viewer(tenant="t1", subject="u")
QUERY = QueryAnalysis("battery life", vectors=(Vector("m", b"\x7f"),))


def test_cited_passage_blends_bm25_share_and_cosine() -> None:
    # 0.3 · 1 + 0.7 · 0.50 = 0.65 against 0.3 · 0.8 + 0.7 · 0.70 = 0.73: the second passage wins.
    assert cited_passage([(10.0, 0.50), (8.0, 0.70)]) == 1
    # A far lower BM25 score is not made up for by a slightly better cosine.
    assert cited_passage([(10.0, 0.60), (2.0, 0.65)]) == 0
    # chosen on the tuning split (docs/archive/quality-log.md)
    assert CITE_BM25_WEIGHT == 0.3 and CITE_PASSAGES == 3


def test_cited_passage_keeps_bm25_best_without_evidence() -> None:
    assert cited_passage([]) == 0
    assert cited_passage([(10.0, 0.2), (9.0, None)]) == 0  # a passage without a vector of the query's model
    assert cited_passage([(0.0, 0.2), (0.0, 0.9)]) == 0  # no BM25 score to scale by
    assert cited_passage([(10.0, 0.5), (10.0, 0.5)]) == 0  # ties keep BM25 order


def _hit(passage: str, score: float = 5.0) -> Hit:
    return Hit("kb@1", "d", "Doc", "r1", score, passage, {"pages": [1]})


def test_cite_replaces_passage_and_page_only() -> None:
    hit = _hit("artillery battery battery", score=0.91)  # a fused score
    better = replace(_hit("laptop battery", score=7.0), structured_source={"pages": [2]})
    shown = cite(hit, [(replace(hit, score=9.0), 0.4), (better, 0.8)])
    assert (shown.passage, shown.structured_source) == ("laptop battery", {"pages": [2]})
    assert (shown.doc_id, shown.score, shown.revision) == (hit.doc_id, 0.91, hit.revision)


def test_cite_keeps_a_passage_that_is_not_bm25s_best() -> None:
    """A document found by the dense stage alone shows its nearest passage: not re-chosen."""
    hit = _hit("the nearest passage")
    assert cite(hit, [(_hit("bm25 passage", 9.0), 0.1), (_hit("other", 8.0), 0.9)]) is hit
    assert cite(hit, []) is hit


class CitingBackend(FakeBackend):
    """FakeBackend with cosines for its hits and passage candidates per document; every read recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.candidates: dict[tuple[str, str], list[tuple[Hit, float | None]]] = {}
        self.reads: list[tuple[list[str], int, float]] = []
        self.failure: SourceFailure | None = None

    def search(self, queries: list[SourceQuery], query: QueryAnalysis, viewer: Viewer) -> list[SourceResult]:
        results = super().search(queries, query, viewer)
        for r in results:
            r.cosines = [0.5] * len(r.hits)
        return results

    def passage_candidates(
        self, hits: Sequence[Hit], query: QueryAnalysis, per_doc: int, timeout_s: float
    ) -> dict[tuple[str, str], list[tuple[Hit, float | None]]]:
        self.reads.append(([h.doc_id for h in hits], per_doc, timeout_s))
        if self.failure is not None:
            raise self.failure
        return {k: v for k, v in self.candidates.items() if any((h.source_key, h.doc_id) == k for h in hits)}


@pytest.fixture
def backend() -> CitingBackend:
    b = CitingBackend()
    b.add("kb@1", "a", "artillery battery battery", 10.0)
    b.add("kb@1", "b", "battery charger", 9.0)
    [hit_a, _] = b.hits["kb@1"]
    laptop = replace(hit_a, passage="laptop battery", score=8.0)
    b.candidates[("kb@1", "a")] = [(replace(hit_a, score=10.0), 0.3), (laptop, 0.9)]
    return b


def test_retrieval_shows_cited_passages_in_one_read(backend: CitingBackend) -> None:
    [outcome] = Retrieval(backend).run([SourceAsk("kb@1", 5, 0.0, cut=False)], QUERY, VIEWER, 3.0).outcomes
    shown = [(h.doc_id, h.passage) for h in outcome.hits]
    assert shown == [("a", "laptop battery"), ("b", "battery charger")]
    assert backend.reads == [(["a", "b"], CITE_PASSAGES, 3.0)]  # every hit at once, within the timeout


def test_retrieval_cites_nothing_without_a_vector_or_when_asked_not_to(backend: CitingBackend) -> None:
    retrieval = Retrieval(backend)
    [plain] = retrieval.run([SourceAsk("kb@1", 5, 0.0)], QueryAnalysis("battery"), VIEWER, 3.0).outcomes
    [ranked] = retrieval.run([SourceAsk("kb@1", 5, 0.0, cite=False)], QUERY, VIEWER, 3.0).outcomes
    assert plain.hits[0].passage == ranked.hits[0].passage == "artillery battery battery"
    assert backend.reads == []


def test_retrieval_keeps_bm25_passages_when_the_read_fails(
    backend: CitingBackend, caplog: pytest.LogCaptureFixture
) -> None:
    backend.failure = SourceFailure("unavailable", "node down")
    [outcome] = Retrieval(backend).run([SourceAsk("kb@1", 5, 0.0, cut=False)], QUERY, VIEWER, 3.0).outcomes
    assert outcome.error is None
    assert [h.passage for h in outcome.hits] == ["artillery battery battery", "battery charger"]
    assert "unavailable" in caplog.text and "artillery" not in caplog.text  # no document text in the log
