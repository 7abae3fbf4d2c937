"""Which passage of a ranked document a hit shows (issue 24: its summary and the agent tool's reference).

A backend's hit carries its document's best passage by BM25. With a query vector, the shown passage is the
document's passage that best blends the two signals instead, among its CITE_PASSAGES best passages by BM25:

    score = CITE_BM25_WEIGHT · bm25 / best bm25 of the document + (1 − CITE_BM25_WEIGHT) · cosine

(the cosine of the passage with the query vector of its model, as fusion uses it). The document's rank and
score do not change — only which of its passages is cited. A document whose passages have no vector of the
query's models, or whose best BM25 passage is not the one its hit shows (a document found by the dense
stage alone shows its nearest passage), keeps its passage. Both knobs were chosen on the tuning split of the
long-document task only (bench/QUALITY.md: the first reference holds the answer 0.920 → 0.933; CITE_PASSAGES
3 and above are equal there)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .fusion import Hit

CITE_PASSAGES = 3
CITE_BM25_WEIGHT = 0.3


def cited_passage(candidates: Sequence[tuple[float, float | None]]) -> int:
    """The index of the passage to cite among a document's (BM25 score, cosine) passages, best BM25 first;
    0 (the best BM25 passage) when any cosine is missing or no BM25 score is positive."""
    if not candidates or candidates[0][0] <= 0 or any(c is None for _, c in candidates):
        return 0
    best = candidates[0][0]
    scores = [CITE_BM25_WEIGHT * b / best + (1.0 - CITE_BM25_WEIGHT) * (c or 0.0) for b, c in candidates]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def cite(hit: Hit, candidates: Sequence[tuple[Hit, float | None]]) -> Hit:
    """`hit` showing the passage `cited_passage` picks among its document's `candidates` (as a backend's
    `passage_candidates` returns them: best BM25 first, each a copy of the hit with that passage and its
    BM25 score, with its cosine); `hit` itself when its passage is not the first candidate's."""
    if not candidates or candidates[0][0].passage != hit.passage:
        return hit
    chosen = candidates[cited_passage([(h.score, c) for h, c in candidates])][0]
    if chosen.passage == hit.passage:
        return hit
    return replace(hit, passage=chosen.passage, structured_source=chosen.structured_source)
