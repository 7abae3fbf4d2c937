"""The relevance cut ("无匹配不强塞文档": no match, no padding): a source's ranked hits stop where
they fall far below its best one, instead of always filling `topK`.

Rule: of one source's ranked, live-checked hits (fused hybrid scores, or BM25 scores without a model — both
on the BM25 scale), keep those scoring at least RELEVANCE_FLOOR × the best hit's score. It is relative, so
it needs no calibration per corpus or language, and the best hit always stays: `minScore` alone decides
whether anything is answered (it keeps its meaning, an absolute floor applied before). The cut runs in the
shared retrieval step for every door (K-PIPE: the same documents in the same order through search, turns,
the tool, MCP and the evaluation door); only `kb eval`'s deep ranking asks without it, to measure the
ranking itself (nDCG@10, R@100) beside the precision of what the doors answer. RELEVANCE_FLOOR was chosen
on the tuning splits only (docs/archive/quality-log.md)."""

from __future__ import annotations

from collections.abc import Sequence

from .fusion import Hit

RELEVANCE_FLOOR = 0.7


def relevance_cut(hits: Sequence[Hit], floor: float | None = None) -> list[Hit]:
    """`hits` (best first) down to those scoring at least `floor` (default RELEVANCE_FLOOR) × the best."""
    if not hits:
        return []
    ratio = RELEVANCE_FLOOR if floor is None else floor
    best = max(h.score for h in hits)
    if best <= 0:
        return list(hits)
    return [h for h in hits if h.score >= ratio * best]
