"""Hybrid ranking: one source's BM25 candidates and its dense (vector) candidates fused into one list.

Candidates are the union of BM25's top `pool` documents and the vector stage's top `dense` documents (the
best passage of each, by cosine with a query vector of the same model: the query's own, or its
translation's — adapters.embedding.query_vectors). Each candidate has a BM25 score (0 when BM25 did not
return it) and a cosine (the better of its BM25 passage's and its dense passage's; when they are of two
scripts, so from two models, the one that scales better within its own script under blend-norm — raw
cosines of two models are never compared: a multilingual cosine of 0.80 is not nearer than a bge 0.78,
docs/archive/quality-log.md "Two models' cosines of one document"). A cosine's script is that of the passages
its model embeds (the backend names the model, `SourceResult.cosine_models` / `dense_models`), not the cited
text's: a passage is embedded with its title and heading path, so an English section under a Chinese title
is a CJK passage to the models. A BM25 candidate with
no vector of a query vector's model has no semantic evidence either way: it keeps its BM25 score (blend)
or its BM25 rank alone (rrf). Three fusions; the default is blend-norm with w = 0.4, chosen on the tuning
splits only (docs/archive/quality-log.md: SciFact train and the five XQuAD tuning halves, with cross-lingual
query expansion; mean nDCG@10 0.8816 against 0.8714 for the best plain blend, w = 0.2):

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

No word match, no padding (SPEC 无匹配不强塞文档): min-max scaling makes the best cosine 1.0 however
far it is, so when BM25 matched nothing in a source its nearest vectors would always score (1 − w) · 1 and
fill the answer. Then a dense-only hit is answered only if its raw cosine reaches its model's floor
(`no_match_floor`: passages of Latin script, the English model; `no_match_floor_cjk`: CJK passages, the
Chinese model): the 5th percentile of the cosines of relevant first hits on the tuning halves of XQuAD
mixed, en→zh and zh→en (0.524 and 0.405; bench/no_match_floor.py, docs/archive/quality-log.md), so 95 % of
relevant hits would pass it while most off-topic nearest neighbours do not. A floor of 0 turns the rule off.
Beside BM25's hits the floor holds too for a dense-only hit of the question's own script (its model's cosine
with the question itself, `_near`): alone in its script, min-max scaling would make a far passage 1.0 and put
it first (a Chinese coffee-machine manual, cosine 0.31, for a Chinese question on bees that BM25 matched in an
English note through the translation); the other script's dense-only hits are left to fusion. Measured on the
tuning halves: the long Chinese questions' noise 0.092 → 0.087, nothing else moved
(docs/archive/quality-log.md).
It only drops hits, never reorders the rest: like the relevance cut (domain/relevance.py) it decides what
the doors answer, and the evaluation door's deep ranking (nDCG@10, R@100) asks without it.

The mixed design (docs/archive/quality-log.md "A gate that tells a copy from noise"): with a multilingual
model (multilingual-e5-small) beside the two bge models, a passage in the question's own script keeps its
bge cosine and a passage of the other script is scored by the multilingual model (the translation's words
still feed BM25; its vector only checks a no-match source, below). Two rules, chosen on the tuning halves:
- **The least-spread rule, gated.** Min-max scaling stretches a flat group of other-script cosines to a
  perfect score; so the other script's cosines are scaled over at least `across_spread` (δ 0.2) — unless
  the gate is open: the multilingual model's best other-script passage is within `across_bias` (0.05) of
  its best own-script passage (the model's own-language advantage), or it says what the question's own best
  passages say (its cosine with the nearest of their three best, `across_copy` τ 0.80: the other
  language's copy of the answer, relevant, not noise). `across` decides, per source.
- **No match, no padding, across scripts.** When BM25 matched nothing, a dense-only hit of the other
  script must reach its script's floor with its bge cosine against the translated question (as without the
  multilingual model; its raw cosines do not separate relevant from off-topic hits: bench/no_match_floor.py),
  or, with no translation, `no_match_floor_across` (0.80) with the multilingual cosine.
On equal fused scores (each script's best scales to 1.0) the question's own script comes first.
Without a multilingual model (`Across` None) the ranking is exactly as before.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ..ports import ScriptEvidence, Vector
from .analyzer import has_cjk
from .fusion import Hit


@dataclass(frozen=True)
class Across:
    """The mixed design's facts about one source's ranking: the question's script, whether the gate is
    open (`HybridRanking.across`), and per dense hit its passage's cosine with the translated question
    (`SourceResult.dense_checks`: the no-match check; empty when BM25 matched something)."""

    question_cjk: bool
    open: bool
    checks: tuple[float | None, ...] = ()


def _normalized(
    cos: list[float | None], group: list[bool], least: dict[bool, float] | None = None
) -> list[float | None]:
    """Cosines min-max scaled to [0, 1] within each group (1.0 where a group's cosines are all equal); a
    group in `least` is scaled over at least that spread (its best still 1.0 only if it spans it)."""
    out: list[float | None] = list(cos)
    for g in (False, True):
        values = [c for c, k in zip(cos, group, strict=True) if k == g and c is not None]
        if not values:
            continue
        lo, hi = min(values), max(values)
        spread = max(hi - lo, (least or {}).get(g, 0.0))
        for i, (c, k) in enumerate(zip(cos, group, strict=True)):
            if k == g and c is not None:
                out[i] = (c - lo) / spread if spread > 0 else 1.0
    return out


def _script(given: Sequence[bool | None], i: int, passage: bool) -> bool:
    """The script a cosine is scaled with: the one given for its model, else its passage's."""
    known = given[i] if i < len(given) else None
    return passage if known is None else known


def unit_cosine(a: Vector, b: Vector) -> float:
    """The cosine of two stored int8 vectors of one model (whatever their script ids), from their own
    norms (rounding to int8 leaves them a little off unit length)."""
    x, y = array("b", a.data), array("b", b.data)
    if len(x) != len(y):
        return 0.0
    norm = math.sqrt(sum(v * v for v in x)) * math.sqrt(sum(v * v for v in y))
    return sum(p * q for p, q in zip(x, y, strict=True)) / norm if norm else 0.0


@dataclass(frozen=True)
class HybridRanking:
    weight: float = 0.4  # the BM25 share of the blend
    pool: int = 50  # BM25 candidates per source (at least the source's topK)
    dense: int = 50  # vector candidates per source (0: re-score BM25's candidates only)
    fusion: Literal["blend", "blend-norm", "rrf"] = "blend-norm"
    rrf_k: int = 60
    no_match_floor: float = 0.52  # raw cosine a dense-only candidate needs when BM25 matched nothing (Latin)
    no_match_floor_cjk: float = 0.40  # the same for CJK passages (the Chinese model's scale)
    across_spread: float = 0.2  # δ: the other script's least spread while the gate is shut
    across_bias: float = 0.05  # the gate opens when the best other-script cosine is within this of the own
    across_copy: float = 0.80  # τ: ... or when it is a copy of the own best passages (their cosine)
    no_match_floor_across: float = 0.80  # a multilingual cosine's floor when there is no translated check

    def depth(self, top_k: int) -> int:
        return max(top_k, self.pool)

    def dense_depth(self, top_k: int) -> int:
        return max(top_k, self.dense) if self.dense > 0 else 0

    def floor_for(self, cjk: bool) -> float:
        """The raw cosine a dense-only hit needs, when BM25 matched nothing, by its passage's script."""
        return self.no_match_floor_cjk if cjk else self.no_match_floor

    def across(self, evidence: ScriptEvidence | None) -> bool:
        """The gate (mixed design): True when the other script's cosines may be stretched like the
        question's own — its best passage within `across_bias` of the best own-script one, or a copy of one
        of the three best (`across_copy`); False with no other-script passage at all."""
        if evidence is None or evidence.other is None:
            return False
        best_other, other = evidence.other
        if not evidence.own or best_other + self.across_bias >= evidence.own[0][0]:
            return True
        return max(unit_cosine(v, other) for _, v in evidence.own) >= self.across_copy

    def _answers(self, raw: float, cjk: bool, check: float | None, across: Across | None) -> bool:
        """Whether a dense-only hit may answer from a source BM25 matched nothing in (its raw cosine, its
        passage's script, its translated check)."""
        if across is None or cjk == across.question_cjk:
            return raw >= self.floor_for(cjk)
        if check is not None:
            return check >= self.floor_for(cjk)
        return raw >= self.no_match_floor_across and not across.checks

    def _near(self, raw: float | None, cjk: bool, across: Across | None) -> bool:
        """Whether a dense-only hit may answer beside BM25's hits: its raw cosine reaches its script's floor
        when it is of the question's own script (its model's cosine with the question itself); a hit of the
        other script, found by the translation's or the multilingual vector, is left to fusion's rules."""
        if raw is None or (across is not None and cjk != across.question_cjk):
            return True
        return raw >= self.floor_for(cjk)

    def _cosines(
        self, seen: list[dict[bool, float]], firsts: list[bool], across: Across | None
    ) -> tuple[list[float | None], list[bool], list[float | None]]:
        """Per document, the cosine fusion uses, its passage's script and that passage's raw cosine. Two
        scripts' cosines come from two models on different scales and are never compared raw: under
        blend-norm each is first scaled within its script (over every document's best passage of that
        script) and a document keeps its better scaled one; under blend and rrf, its better raw one.
        `firsts`: each document's first passage's script, kept by a document without a cosine."""
        if self.fusion == "blend-norm":
            least: dict[bool, float] = {}
            own = across.question_cjk if across is not None and not across.open else None
            if own is not None and any(own in s for s in seen):  # the gate shut, a cosine of the own script
                least[not own] = self.across_spread
            flat = [(k, c) for s in seen for k, c in s.items()]
            scaled = _normalized([c for _, c in flat], [k for k, _ in flat], least)
            values = iter(zip(flat, scaled, strict=True))  # not None: every input is a cosine
            by: list[dict[bool, float]] = [
                {k: v or 0.0 for (k, _), v in (next(values) for _ in s)} for s in seen
            ]
        else:
            by = seen
        cjk = [max(b, key=b.__getitem__, default=k) for b, k in zip(by, firsts, strict=True)]
        cos = [b.get(k) for b, k in zip(by, cjk, strict=True)]
        raw = [s.get(k) for s, k in zip(seen, cjk, strict=True)]
        return cos, cjk, raw

    def fuse(
        self,
        lexical: list[Hit],
        lexical_cosines: list[float | None],
        dense: list[tuple[Hit, float]],
        top_k: int,
        min_score: float,
        floored: bool = True,
        across: Across | None = None,
        scripts: tuple[Sequence[bool | None], Sequence[bool | None]] | None = None,
    ) -> list[Hit]:
        """BM25 hits (best first, with their passage's cosine) and dense hits (best first, with cosine),
        one per document each: the fused hits at or above `min_score`, best first (ties keep BM25 order,
        then dense order), at most `top_k`. A document in both keeps its BM25 passage. With no BM25 hit,
        only dense hits at or above their script's no-match floor count, and beside BM25's hits a dense-only
        hit of the question's own script needs that floor too (`_near`), unless `floored` is off (the
        ranking itself, as `kb eval` measures it without the doors' relevance decisions). `across`: the
        mixed design's rules (module docstring). `scripts`: per lexical cosine and per dense hit, the script
        of the passages its model embeds (None, or no `scripts`: its cited passage's own) — a passage is
        embedded with its title and heading path, so its vector's script may not be its cited text's."""
        order: dict[str, int] = {}
        hits: list[Hit] = []
        bm25: list[float] = []
        seen: list[dict[bool, float]] = []  # per document, its best passage's cosine per script
        firsts: list[bool] = []  # per document, its first passage's script
        checks = across.checks if across is not None else ()
        check: list[dict[bool, float | None]] = []  # per document and script, that passage's check
        lexical_scripts, dense_scripts = scripts if scripts is not None else ((), ())
        for n, (hit, c) in enumerate(zip(lexical, lexical_cosines, strict=True)):
            order[hit.doc_id] = len(hits)
            hits.append(hit)
            bm25.append(hit.score)
            firsts.append(has_cjk(hit.passage))
            seen.append({} if c is None else {_script(lexical_scripts, n, firsts[-1]): c})
            check.append({})
        dense_rank: dict[str, int] = {}
        for rank, (hit, c) in enumerate(dense):
            dense_rank.setdefault(hit.doc_id, rank)
            i = order.get(hit.doc_id)
            if i is None:
                order[hit.doc_id] = i = len(hits)
                hits.append(hit)
                bm25.append(0.0)
                seen.append({})
                check.append({})
                firsts.append(has_cjk(hit.passage))
            script = _script(dense_scripts, rank, has_cjk(hit.passage))
            if script not in seen[i] or c > seen[i][script]:
                seen[i][script] = c
                check[i][script] = checks[rank] if rank < len(checks) else None
        if not hits:
            return []
        cos, cjk, raw = self._cosines(seen, firsts, across)
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
            scores = [
                b if c is None else self.weight * b + (1.0 - self.weight) * scale * c
                for b, c in zip(bm25, cos, strict=True)
            ]
        if across is None:
            ranked = sorted(range(len(hits)), key=lambda i: -scores[i])
        else:  # equal scores (each script's best is 1.0): the question's own language first
            ranked = sorted(range(len(hits)), key=lambda i: (-scores[i], cjk[i] != across.question_cjk))
        if floored and not lexical:  # every hit is dense-only, its raw cosine not None
            ranked = [i for i in ranked if self._answers(raw[i], cjk[i], check[i].get(cjk[i]), across)]  # type: ignore[arg-type]
        elif floored:  # BM25 matched elsewhere: a dense-only hit of the question's own script needs its floor
            ranked = [i for i in ranked if bm25[i] > 0 or self._near(raw[i], cjk[i], across)]
        kept = [i for i in ranked if scores[i] >= min_score][:top_k]  # only these are copied with a score
        return [replace(hits[i], score=scores[i]) for i in kept]
