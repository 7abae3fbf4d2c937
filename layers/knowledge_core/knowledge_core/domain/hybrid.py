"""Hybrid ranking: one source's BM25 candidates re-scored with the embedding cosine of their passage.

    score = w · bm25 + (1 − w) · bm25_max · cosine

`bm25_max` is the best BM25 score among the candidates, so the semantic half is on the BM25 scale: the
blend stays "the backend similarity" a source's `minScore` is written against, and a query the embedding
model does not cover (no query vector) keeps its plain BM25 scores. A candidate without a vector of the
current model counts cosine 0. Both backends re-score the same way; the weight and the candidate pool
depth are settings (bench/QUALITY.md has the measurements behind the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HybridRanking:
    weight: float = 0.1  # the BM25 share
    pool: int = 50  # BM25 candidates per source re-scored (at least the source's topK)

    def depth(self, top_k: int) -> int:
        return max(top_k, self.pool)

    def blend(self, lexical: list[float], cosines: list[float | None]) -> list[float]:
        if not lexical:
            return []
        top = max(lexical)
        return [
            self.weight * b + (1.0 - self.weight) * top * (c or 0.0)
            for b, c in zip(lexical, cosines, strict=True)
        ]
