"""One retrieval behind every door (SPEC §3.9, K-PIPE).

Search hints (§2.3), a turn's startup delivery (§2.2), the agent tool's `knowledge_search` and `startup`
(§3.6), MCP, the console and `kb eval` all run this step for a query over the sources someone planned:

    query analysis once (translation expansion, one vector per model)
    -> per-source candidates from the backend (lexical and dense, one round trip)
    -> one ranker per source (hybrid fusion, then `minScore`; BM25 alone when no model covers the query)
    -> one batched live check of every hit (one read per backend, never one per hit)
    -> the relevance cut, then (with a query vector) the passage each hit shows (domain.citing: one more
       read of the hits' documents' best passages)
    -> typed per-source outcomes.

The doors differ only in what they do with the outcomes: how they merge several sources (search by raw
score, the tool by RRF and its `rerank`), what they charge and what they return."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypeVar

from ..domain.analyzer import has_cjk
from ..domain.citing import CITE_PASSAGES, NEIGHBOUR_RADIUS, cite
from ..domain.errors import SourceFailure
from ..domain.filters import Filter
from ..domain.fusion import Hit
from ..domain.hybrid import Across, HybridRanking
from ..domain.models import Document, DocumentState, Viewer, citable
from ..domain.passages import StoredPassage
from ..domain.relevance import relevance_cut
from ..domain.router import PlannedSource
from ..domain.wire import RankingExtension
from ..ports import (
    Embedder,
    QueryAnalysis,
    QueryTranslator,
    SearchBackend,
    SourceQuery,
    SourceResult,
    Vector,
)

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

DocKey = tuple[str, str]


@dataclass(frozen=True)
class SourceAsk:
    """One source to retrieve from: at most `top_k` ranked documents scoring at least `min_score`, among
    the documents `filter` admits (§8: the request's filter and the agent's sourceFilters for this source,
    combined by the caller; None: every document), cut where they fall far below the best
    (`domain.relevance`) unless `cut` is off, each showing its cited passage (`domain.citing`) unless
    `cite` is off (a door that shows no passage: the evaluation door's ranking)."""

    key: str
    top_k: int
    min_score: float
    filter: Filter | None = None
    cut: bool = True
    cite: bool = True

    @classmethod
    def of(
        cls,
        planned: PlannedSource,
        depth: int | None = None,
        filter_: Filter | None = None,
        cut: bool = True,
        cite: bool = True,
    ) -> SourceAsk:
        """A planned source's own `topK` and `minScore` (or `depth` documents: the evaluation door)."""
        definition = planned.source.definition
        return cls(planned.key, depth or definition.top_k, definition.min_score, filter_, cut, cite)


@dataclass
class SourceOutcome:
    """One planned source's answer: its ranked, live-checked hits (best first, at or above its
    `minScore`, at most the depth asked), or the typed failure that kept it from answering."""

    key: str
    hits: list[Hit] = field(default_factory=list)
    error: SourceFailure | None = None
    ms: float = 0.0


@dataclass
class Retrieved:
    """Every planned source's outcome, in plan order."""

    outcomes: list[SourceOutcome]

    def hits(self) -> list[Hit]:
        return [h for o in self.outcomes for h in o.hits]


class Retrieval:
    def __init__(
        self,
        backend: SearchBackend,
        *,
        translator: QueryTranslator | None = None,
        embedder: Embedder | None = None,
        ranking: HybridRanking | None = None,
        relevance_floor: float | None = None,
    ) -> None:
        self._backend = backend
        self._translator = translator
        self._embedder = embedder
        self.ranking = ranking or HybridRanking()
        # The relevance cut's floor (None: domain.relevance.RELEVANCE_FLOOR; 0.0 keeps every hit).
        self.relevance_floor = relevance_floor

    @property
    def ranking_name(self) -> str:
        """How queries rank here, in a few words (banners, `kb mcp --embedded`, capabilities of eval)."""
        name = f"hybrid ({self._embedder.model_id})" if self._embedder is not None else "BM25"
        return name + (" + zh<->en query translation" if self._translator is not None else "")

    def ranking_state(self) -> RankingExtension:
        """The ranking in force now, the same for every door (read from the store): hybrid with vectors
        ready; BM25 while stored passages wait for their vectors (`filling`), or without a model."""
        if self._embedder is None:
            return RankingExtension(mode="bm25", vectors="none")
        if self._vectors_pending():
            return RankingExtension(mode="bm25", vectors="filling")
        return RankingExtension(mode="hybrid", vectors="ready")

    def _vectors_pending(self) -> bool:
        # (a Retrieval built for query analysis alone, as the evaluation's, may have no backend)
        return self._backend is not None and self._backend.vectors_pending()

    # --- query analysis ----------------------------------------------------------------------------
    def analyse(self, text: str, expansion: str | None = None) -> QueryAnalysis:
        """The query once for every source: its translation (unless `expansion` is given) and its vectors
        (none while vectors are filling: BM25 ranks until every passage has its own)."""
        if expansion is None:
            expansion = self._translator.expand(text) if self._translator is not None else ""
        if self._embedder is not None and self._vectors_pending():
            return QueryAnalysis(text, expansion, ())
        across = query_across(self._embedder, text)
        if across is None:
            return QueryAnalysis(text, expansion, tuple(query_vectors(self._embedder, text, expansion)))
        # The mixed design: the own script's model and the multilingual one (other script); the translation's
        # vector only checks a source BM25 matched nothing in (domain.hybrid).
        other, evidence = across
        own = query_vector(self._embedder, text)
        translated = query_vector(self._embedder, expansion) if expansion else None
        if translated is not None and own is not None and translated.model == own.model:
            translated = None
        vectors = (own, other) if own is not None else (other,)
        return QueryAnalysis(text, expansion, vectors, evidence=evidence, translated=translated)

    # --- the step ------------------------------------------------------------------------------------
    def run(
        self, sources: Sequence[SourceAsk], query: QueryAnalysis, viewer: Viewer, timeout_s: float
    ) -> Retrieved:
        """Each source's ranked, live-checked documents, one backend round trip for all of them."""
        if not sources:
            return Retrieved([])
        queries = [
            self.source_query(a.key, a.top_k, a.min_score, timeout_s, query, a.filter) for a in sources
        ]
        results = self._backend.search(queries, query, viewer)
        ranked = [self.rank(r, a.min_score, query, a.cut) for a, r in zip(sources, results, strict=True)]
        checked = self.live_check(ranked, [a.top_k for a in sources], viewer)
        for ask, outcome in zip(sources, checked.outcomes, strict=True):
            if ask.cut:  # after the live check: the best hit the cut measures from is a citable one
                outcome.hits = relevance_cut(outcome.hits, self.relevance_floor)
        if query.vectors:  # without a query vector a hit's BM25 passage is the one to cite
            shown = [o for a, o in zip(sources, checked.outcomes, strict=True) if a.cite and o.hits]
            self._cite(shown, query, timeout_s)
        return checked

    def _cite(self, outcomes: list[SourceOutcome], query: QueryAnalysis, timeout_s: float) -> None:
        """Each hit of `outcomes` showing the passage domain.citing picks among its document's best BM25
        passages (read for every hit at once). When that read fails the hits keep the passages their search
        found — still the right documents' best BM25 passages — and the retrieval does not fail."""
        hits = [h for o in outcomes for h in o.hits]
        if not hits:
            return
        try:
            found = self._backend.passage_candidates(hits, query, CITE_PASSAGES, timeout_s)
        except SourceFailure as exc:
            logger.warning("cited passages not chosen (%s): hits show their BM25 passages", exc.kind)
            return
        for o in outcomes:
            o.hits = [cite(h, found.get((h.source_key, h.doc_id), [])) for h in o.hits]

    def source_query(
        self,
        key: str,
        top_k: int,
        min_score: float,
        timeout_s: float,
        query: QueryAnalysis,
        filter_: Filter | None = None,
    ) -> SourceQuery:
        """The candidates one source must return for `top_k` ranked documents: BM25's top `top_k` above
        `minScore`, or — with query vectors — a deeper pool without a floor (the floor applies to the
        fused score) and the dense stage's nearest documents; both among the documents `filter_` admits."""
        if not query.vectors:
            return SourceQuery(key, top_k, min_score, timeout_s, filter=filter_)
        return SourceQuery(
            key,
            self.ranking.depth(top_k),
            float("-inf"),
            timeout_s,
            dense_k=self.ranking.dense_depth(top_k),
            filter=filter_,
        )

    def rank(
        self, result: SourceResult, min_score: float, query: QueryAnalysis, cut: bool = True
    ) -> SourceOutcome:
        """One source's candidates -> all its ranked hits at or above `min_score`: hybrid fusion when the
        query has vectors (the floor applies to the fused score; with `cut`, the doors' answer, a source
        BM25 matched nothing in answers only with vectors above the no-match floor), BM25 order otherwise."""
        outcome = SourceOutcome(result.key, error=result.error, ms=result.ms)
        if result.error is not None:
            return outcome
        if query.vectors:
            everything = len(result.hits) + len(result.dense)
            across = None
            if query.evidence is not None:
                gate = self.ranking.across(result.evidence)
                across = Across(has_cjk(query.text), gate, tuple(result.dense_checks))
            outcome.hits = self.ranking.fuse(
                result.hits,
                result.cosines,
                result.dense,
                everything,
                min_score,
                floored=cut,
                across=across,
                scripts=self._scripts(result),
            )
        else:
            outcome.hits = [h for h in result.hits if h.score >= min_score]
        return outcome

    def _scripts(self, result: SourceResult) -> tuple[list[bool | None], list[bool | None]] | None:
        """Per lexical cosine and per dense hit, the script of the passages its model's vectors are of
        (`Embedder.cjk_model`; None: its passage's own); None when the backend did not say the models."""
        said = len(result.cosine_models) == len(result.hits) and len(result.dense_models) == len(result.dense)
        if not said:
            return None
        script = self._model_scripts
        return [script.get(m) if m else None for m in result.cosine_models], [
            script.get(m) for m in result.dense_models
        ]

    @cached_property
    def _model_scripts(self) -> dict[str, bool | None]:
        """Each model's script (`Embedder.cjk_model`), once: it follows from the embedder's models alone."""
        embedder = self._embedder
        return {m: embedder.cjk_model(m) for m in embedder.models} if embedder is not None else {}

    def live_check(self, ranked: list[SourceOutcome], top_ks: Sequence[int], viewer: Viewer) -> Retrieved:
        """Each source's best `top_k` hits whose document, now, is still in that source, ready, visible to
        the viewer and of the hit's revision — read in one batch for all sources. A hit that fails the
        check takes no rank: the next candidate moves up (another batch only then). A backend whose search
        already read its documents consistently (`live_hits`, every hit stamped with its document's
        version) is not read again. When the read fails, every source it was for fails (typed), never "no
        results"."""
        if self._backend.live_hits and all(h.version for o in ranked for h in o.hits):
            for o, k in zip(ranked, top_ks, strict=True):
                o.hits = o.hits[:k]
            return Retrieved(ranked)
        documents: dict[DocKey, DocumentState] = {}
        kept: list[list[Hit]] = [[] for _ in ranked]
        position = [0] * len(ranked)
        while True:
            batch: list[list[Hit]] = []
            for i, (o, k) in enumerate(zip(ranked, top_ks, strict=True)):
                batch.append(o.hits[position[i] : position[i] + k - len(kept[i])])
                position[i] += len(batch[-1])
            keys = list(dict.fromkeys((h.source_key, h.doc_id) for b in batch for h in b))
            if not keys:
                break
            try:
                documents.update(self._backend.document_states(keys))
            except SourceFailure as exc:
                for i, o in enumerate(ranked):
                    if batch[i] or kept[i]:
                        o.error, kept[i] = exc, []
                break
            for i, b in enumerate(batch):
                for h in b:
                    state = documents.get((h.source_key, h.doc_id))
                    if state is not None and citable(state, h.source_key, h.revision, viewer):
                        kept[i].append(replace(h, version=state.version))
        for o, hits in zip(ranked, kept, strict=True):
            o.hits = hits
        return Retrieved(ranked)

    def neighbour_passages(self, hits: Sequence[Hit]) -> dict[DocKey, list[StoredPassage]]:
        """The passages around each hit's own (`NEIGHBOUR_RADIUS` on each side), in one read: what a
        reference quoting its passage in context reads. Raises SourceFailure when the backend cannot
        answer."""
        return self._backend.neighbour_passages(hits, NEIGHBOUR_RADIUS)

    def documents(self, hits: Sequence[Hit]) -> dict[DocKey, Document]:
        """The documents of `hits` with their bodies (delivery), in one read. Raises SourceFailure when the
        backend cannot answer."""
        return self._backend.get_documents(list(dict.fromkeys((h.source_key, h.doc_id) for h in hits)))


def _guarded(embed: Callable[[], _T], failing: str) -> _T | None:
    """`embed()`, or None when the model fails to load or run (logged as `failing`, without the text: the
    query then ranks without that model rather than failing)."""
    try:
        return embed()
    except Exception as exc:
        from ..adapters.embedding import ModelError

        logger.warning("%s: %s", failing, exc if isinstance(exc, ModelError) else type(exc).__name__)
        return None


def query_vector(embedder: Embedder | None, text: str) -> Vector | None:
    """The query's vector, or None: no embedder, no model for its script, or a model that fails to load or
    run (logged, without the text: the query then ranks by BM25 alone rather than failing)."""
    if embedder is None:
        return None
    return _guarded(lambda: embedder.embed_query(text), "embedding model failed, ranking by BM25 alone")


def query_across(embedder: Embedder | None, text: str) -> tuple[Vector, Vector] | None:
    """The query by the mixed design's multilingual model (other script's id, own script's id), or None:
    none, or one that fails (logged without the text: the query then ranks as without it)."""
    if embedder is None:
        return None
    return _guarded(
        lambda: embedder.embed_across(text), "multilingual embedding model failed, ranking without it"
    )


def query_vectors(embedder: Embedder | None, text: str, expansion: str = "") -> list[Vector]:
    """The query in every model that can embed it: its text in the model of its script (first), and its
    translation (`expansion`: the other language's words) in the model of that language when it is another
    model. Empty: BM25 alone."""
    own = query_vector(embedder, text)
    vectors = [own] if own is not None else []
    other = query_vector(embedder, expansion) if expansion else None
    if other is not None and all(v.model != other.model for v in vectors):
        vectors.append(other)
    return vectors
