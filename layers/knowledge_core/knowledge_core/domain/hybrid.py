"""Hybrid ranking: one source's BM25 candidates and its dense (vector) candidates fused into one list.

Candidates are the union of BM25's top `pool` documents and the vector stage's top `dense` documents (the
best passage of each, by cosine with a query vector of the same model: the query's own, or its
translation's — adapters.embedding.query_vectors). Each candidate has a BM25 score (0 when BM25 did not
return it) and a cosine (the better of its BM25 passage's and its dense passage's). A BM25 candidate with
no vector of a query vector's model has no semantic evidence either way: it keeps its BM25 score (blend)
or its BM25 rank alone (rrf). Three fusions; the default is blend-norm with w = 0.4, chosen on the tuning
splits only (bench/QUALITY.md: SciFact train and the five XQuAD tuning halves, with cross-lingual query
expansion; mean nDCG@10 0.8816 against 0.8714 for the best plain blend, w = 0.2):

    blend:       score = w · bm25 + (1 − w) · scale · cosine
    blend-norm:  the same with each cosine min-max scaled to [0, 1] among the candidates whose passage is
                 of the same script (the passages of one script have their cosines from one model — the
                 query's, or its translation's — and two models' cosines run on different scales; scaling
                 per script takes that offset out, so an English and a Chinese document compete fairly)
    rrf:         score = scale · (1/(k + rank_bm25) + 1/(k + rank_dense)) / (2/(k + 1))

`scale` is the best BM25 score among the candidates (1.0 when BM25 found nothing), so the fused score
stays on the BM25 scale: `minScore` keeps its meaning, "the backend similarity" (a document first in both
lists scores `scale` under rrf; under blend a perfect cosine adds (1 − w) · scale). When BM25 matches
nothing the scores are the semantic half alone (cosine · (1 − w) for blend). A query no model covers (no
query vector) keeps its plain BM25 scores. Both backends fuse with this one function.

No word match, no padding (issue 24, SPEC 无匹配不强塞文档): min-max scaling makes the best cosine 1.0 however
far it is, so when BM25 matched nothing in a source its nearest vectors would always score (1 − w) · 1 and
fill the answer. Then a dense-only hit is answered only if its raw cosine reaches its model's floor
(`no_match_floor`: passages of Latin script, the English model; `no_match_floor_cjk`: CJK passages, the
Chinese model): the 5th percentile of the cosines of relevant first hits on the tuning halves of XQuAD
mixed, en→zh and zh→en (0.524 and 0.405; bench/no_match_floor.py, bench/QUALITY.md), so 95 % of relevant
hits would pass it while most off-topic nearest neighbours do not. A floor of 0 turns the rule off. With any
BM25 match in the source nothing changes. It only drops hits, never reorders the rest: like the relevance cut
(domain/relevance.py) it decides what the doors answer, and the evaluation door's deep ranking (nDCG@10,
R@100) asks without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .analyzer import has_cjk
from .fusion import Hit


def _normalized(cos: list[float | None], group: list[bool]) -> list[float | None]:
    """Cosines min-max scaled to [0, 1] within each group (1.0 where a group's cosines are all equal)."""
    out: list[float | None] = list(cos)
    for g in (False, True):
        values = [c for c, k in zip(cos, group, strict=True) if k == g and c is not None]
        if not values:
            continue
        lo, hi = min(values), max(values)
        for i, (c, k) in enumerate(zip(cos, group, strict=True)):
            if k == g and c is not None:
                out[i] = (c - lo) / (hi - lo) if hi > lo else 1.0
    return out


@dataclass(frozen=True)
class HybridRanking:
    weight: float = 0.4  # the BM25 share of the blend
    pool: int = 50  # BM25 candidates per source (at least the source's topK)
    dense: int = 50  # vector candidates per source (0: re-score BM25's candidates only)
    fusion: Literal["blend", "blend-norm", "rrf"] = "blend-norm"
    rrf_k: int = 60
    no_match_floor: float = 0.52  # raw cosine a dense-only candidate needs when BM25 matched nothing (Latin)
    no_match_floor_cjk: float = 0.40  # the same for CJK passages (the Chinese model's scale)

    def depth(self, top_k: int) -> int:
        return max(top_k, self.pool)

    def dense_depth(self, top_k: int) -> int:
        return max(top_k, self.dense) if self.dense > 0 else 0

    def floor_for(self, cjk: bool) -> float:
        """The raw cosine a dense-only hit needs, when BM25 matched nothing, by its passage's script."""
        return self.no_match_floor_cjk if cjk else self.no_match_floor

    def fuse(
        self,
        lexical: list[Hit],
        lexical_cosines: list[float | None],
        dense: list[tuple[Hit, float]],
        top_k: int,
        min_score: float,
        floored: bool = True,
    ) -> list[Hit]:
        """BM25 hits (best first, with their passage's cosine) and dense hits (best first, with cosine),
        one per document each: the fused hits at or above `min_score`, best first (ties keep BM25 order,
        then dense order), at most `top_k`. A document in both keeps its BM25 passage. With no BM25 hit,
        only dense hits at or above their script's no-match floor count, unless `floored` is off (the
        ranking itself, as `kb eval` measures it without the doors' relevance decisions)."""
        order: dict[str, int] = {}
        hits: list[Hit] = []
        bm25: list[float] = []
        cos: list[float | None] = []
        cjk: list[bool] = []  # the script of the passage each cosine comes from
        for hit, c in zip(lexical, lexical_cosines, strict=True):
            order[hit.doc_id] = len(hits)
            hits.append(hit)
            bm25.append(hit.score)
            cos.append(c)
            cjk.append(has_cjk(hit.passage))
        dense_rank: dict[str, int] = {}
        for rank, (hit, c) in enumerate(dense):
            dense_rank.setdefault(hit.doc_id, rank)
            i = order.get(hit.doc_id)
            if i is None:
                order[hit.doc_id] = len(hits)
                hits.append(hit)
                bm25.append(0.0)
                cos.append(c)
                cjk.append(has_cjk(hit.passage))
            elif cos[i] is None or c > cos[i]:  # type: ignore[operator]
                cos[i] = c
                cjk[i] = has_cjk(hit.passage)
        if not hits:
            return []
        raw = list(cos)
        scale = max(bm25) if lexical and max(bm25) > 0 else 1.0
        if self.fusion == "rrf":
            k = self.rrf_k
            best = 2.0 / (k + 1)
            scores = [
                scale
                * (
                    (1.0 / (k + 1 + i) if i < len(lexical) else 0.0)
                    + (1.0 / (k + 1 + dense_rank[h.doc_id]) if h.doc_id in dense_rank else 0.0)
                )
                / best
                for i, h in enumerate(hits)
            ]
        else:
            if self.fusion == "blend-norm":
                cos = _normalized(cos, cjk)
            scores = [
                b if c is None else self.weight * b + (1.0 - self.weight) * scale * c
                for b, c in zip(bm25, cos, strict=True)
            ]
        ranked = sorted(range(len(hits)), key=lambda i: -scores[i])
        if floored and not lexical:  # every hit is dense-only, its raw cosine not None
            ranked = [i for i in ranked if raw[i] >= self.floor_for(cjk[i])]  # type: ignore[operator]
        kept = [i for i in ranked if scores[i] >= min_score][:top_k]  # only these are copied with a score
        return [replace(hits[i], score=scores[i]) for i in kept]
