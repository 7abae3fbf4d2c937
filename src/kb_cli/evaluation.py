"""Retrieval quality evaluation (`kb eval`, bench/quality.py): test collections, ranking metrics, an
independent in-memory BM25 baseline, and a harness that ingests a collection through the normal admin
path and ranks every query through KnowledgeService (the same planning, backend search and merge the
search API uses)."""

from __future__ import annotations

import argparse
import ast
import csv
import io
import itertools
import json
import math
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
import tokenize
import uuid
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledge_core.domain.hybrid import HybridRanking

from .eval_corpus import (
    EvalDocument,
    hybrid_of,
    put_eval_documents,
    ranking_of,
    xquad_articles,
    xquad_split,
)

if TYPE_CHECKING:
    from .local_env import LocalRanking

DEMO_QUERIES = Path(__file__).parent / "demo_corpus" / "queries.jsonl"
ORGKB_DIR = Path(__file__).parent / "eval_sets" / "orgkb"


def _shared_eval(env: str, relative: str) -> Path:
    """$`env`, else shared/eval/`relative` beside the checkout (as CI lays it out), else under /work."""
    if os.environ.get(env):
        return Path(os.environ[env])
    beside = Path(__file__).resolve().parents[2].parent / "shared" / "eval" / relative
    return beside if beside.exists() else Path("/work/shared/eval") / relative


SCIFACT_ZIP = _shared_eval("KB_SCIFACT_ZIP", "scifact/scifact.zip")
XQUAD_DIR = _shared_eval("KB_XQUAD_DIR", "xquad")
SCIFACT_TEST = "claims_validation.csv"  # the BEIR test split; claims_train.csv is for tuning only
SCIFACT_TRAIN = "claims_train.csv"
PUBLISHED_BASELINES = {
    "scifact": {"name": "BM25 flat (Anserini, BEIR v1.0.0)", "ndcg@10": 0.6789, "recall@100": 0.9253}
}
RANK_DEPTH = 100


# --- metrics ----------------------------------------------------------------------------------------


def dcg_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    """Discounted cumulative gain with linear gains (trec_eval / BEIR): sum rel_i / log2(i + 1), i from 1."""
    return sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))


def ndcg_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int = 10) -> float:
    """DCG@k over the ideal DCG@k of the judged relevant documents; 0 when nothing is relevant."""
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg_at_k(list(dict.fromkeys(ranked)), relevant, k) / idcg if idcg else 0.0


def recall_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    """Share of the relevant documents found in the top k (BEIR's definition: over all relevant)."""
    wanted = {d for d, g in relevant.items() if g > 0}
    if not wanted:
        return 0.0
    return len(wanted & set(ranked[:k])) / len(wanted)


def mrr_at_k(ranked: Sequence[str], relevant: dict[str, int], k: int = 3) -> float:
    """Reciprocal rank of the first relevant document within the top k; 0 when none is there."""
    return next((1.0 / (i + 1) for i, doc in enumerate(ranked[:k]) if relevant.get(doc, 0) > 0), 0.0)


def answerable(relevant: dict[str, int]) -> bool:
    """A query some document answers (one with no relevant document should get no hits)."""
    return any(g > 0 for g in relevant.values())


def abstention_recall(answers: Sequence[Sequence[str]], qrels: Sequence[dict[str, int]]) -> float | None:
    """Share of the unanswerable queries whose answer is empty (no hits); None when there are none."""
    empty = [not a for a, q in zip(answers, qrels, strict=True) if not answerable(q)]
    return sum(empty) / len(empty) if empty else None


def false_abstention(answers: Sequence[Sequence[str]], qrels: Sequence[dict[str, int]]) -> float | None:
    """Share of the answerable queries whose answer is empty; None when there are none."""
    empty = [not a for a, q in zip(answers, qrels, strict=True) if answerable(q)]
    return sum(empty) / len(empty) if empty else None


@dataclass
class Abstention:
    """How the doors' answers (after the relevance step) abstain: on unanswerable queries (recall, overall
    and per kind of unanswerable query when known) and wrongly on answerable ones."""

    unanswerable: int
    recall: float
    by_kind: dict[str, float]
    by_kind_queries: dict[str, int]
    answerable: int
    false_abstention: float | None

    @classmethod
    def over(
        cls, answers: Sequence[Sequence[str]], qrels: Sequence[dict[str, int]], kinds: Sequence[str | None]
    ) -> Abstention | None:
        """None when every query is answerable (nothing to abstain on)."""
        recall = abstention_recall(answers, qrels)
        if recall is None:
            return None
        rows = list(zip(answers, qrels, kinds, strict=True))
        by_kind: dict[str, float] = {}
        by_kind_queries: dict[str, int] = {}
        for kind in dict.fromkeys(k for _, q, k in rows if k and not answerable(q)):
            mine = [(a, q) for a, q, k in rows if k == kind and not answerable(q)]
            by_kind[kind] = abstention_recall([a for a, _ in mine], [q for _, q in mine]) or 0.0
            by_kind_queries[kind] = len(mine)
        return cls(
            unanswerable=sum(1 for q in qrels if not answerable(q)),
            recall=recall,
            by_kind=by_kind,
            by_kind_queries=by_kind_queries,
            answerable=sum(1 for q in qrels if answerable(q)),
            false_abstention=false_abstention(answers, qrels),
        )


@dataclass
class Metrics:
    recall_at_3: float
    mrr_at_3: float
    ndcg_at_10: float
    recall_at_100: float
    queries: int

    @classmethod
    def over(cls, rankings: list[list[str]], qrels: list[dict[str, int]]) -> Metrics:
        n = len(qrels)
        pairs = list(zip(rankings, qrels, strict=True))

        def mean(metric: Callable[[list[str], dict[str, int]], float]) -> float:
            return sum(metric(r, q) for r, q in pairs) / n if n else 0.0

        return cls(
            recall_at_3=mean(lambda r, q: recall_at_k(r, q, 3)),
            mrr_at_3=mean(lambda r, q: mrr_at_k(r, q, 3)),
            ndcg_at_10=mean(lambda r, q: ndcg_at_k(r, q, 10)),
            recall_at_100=mean(lambda r, q: recall_at_k(r, q, 100)),
            queries=n,
        )


# --- collections ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalQuery:
    qid: str
    text: str
    relevant: dict[str, int]  # empty: no document answers it (the doors should abstain)
    kind: str | None = None  # orgkb: same, cross, near (unanswerable, in-domain) or far (unanswerable)


@dataclass
class Collection:
    name: str
    lang: str
    documents: list[EvalDocument]
    queries: list[EvalQuery]


def _abstract_text(literal_list: str) -> str:
    """SciFact abstracts are numpy-style lists of string literals with no commas between them."""
    parts: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(literal_list).readline):
        if tok.type == tokenize.STRING:
            parts.append(ast.literal_eval(tok.string))
    return " ".join(parts)


def load_scifact(path: Path = SCIFACT_ZIP, split: str = "test", limit: int | None = None) -> Collection:
    """The SciFact corpus and claims read in place from the zip; `split` test (300 claims) or train
    (809, for tuning only); `limit` takes the first claims in file order."""
    csv.field_size_limit(sys.maxsize)
    with zipfile.ZipFile(path) as zf:
        corpus_rows = list(csv.DictReader(io.TextIOWrapper(zf.open("corpus_train.csv"), encoding="utf-8")))
        claims_file = {"test": SCIFACT_TEST, "train": SCIFACT_TRAIN}[split]
        claim_rows = list(csv.DictReader(io.TextIOWrapper(zf.open(claims_file), encoding="utf-8")))
    documents = [
        EvalDocument(r["doc_id"], r["title"].strip(), _abstract_text(r["abstract"])) for r in corpus_rows
    ]
    # A claim repeats once per evidence row; its relevant documents are the union of cited_doc_ids.
    claims: dict[str, EvalQuery] = {}
    for row in claim_rows:
        cited = {d: 1 for d in re.findall(r"\d+", row["cited_doc_ids"])}
        known = claims.get(row["id"])
        if known is None:
            claims[row["id"]] = EvalQuery(row["id"], row["claim"], cited)
        else:
            known.relevant.update(cited)
    queries = [q for q in claims.values() if q.relevant]
    if limit:
        queries = queries[:limit]
    return Collection(f"scifact-{split}" + (f"-{limit}" if limit else ""), "en", documents, queries)


def load_demo(lang: str | None = "zh") -> Collection:
    """The demo corpus with its hand-labelled queries (demo_corpus/queries.jsonl), one language or all."""
    from .demo import demo_documents

    documents = [EvalDocument(d.doc_id, d.title, d.body) for d in demo_documents()]
    queries = []
    for i, line in enumerate(DEMO_QUERIES.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        if lang is None or row["lang"] == lang:
            queries.append(EvalQuery(f"q{i + 1}", row["query"], {d: 1 for d in row["relevant"]}))
    return Collection(f"demo-{lang or 'all'}", lang or "mixed", documents, queries)


@dataclass(frozen=True)
class XquadTask:
    """Which language files give the documents and which the questions of an XQuAD retrieval task."""

    corpus: tuple[str, ...]
    questions: tuple[str, ...]


# Query language first, then document language: xquad-en-zh asks English questions of Chinese paragraphs.
XQUAD_TASKS = {
    "xquad-zh-zh": XquadTask(("zh",), ("zh",)),
    "xquad-en-en": XquadTask(("en",), ("en",)),
    "xquad-en-zh": XquadTask(("zh",), ("en",)),
    "xquad-zh-en": XquadTask(("en",), ("zh",)),
    "xquad-mixed": XquadTask(("zh", "en"), ("zh", "en")),
}
TRAIN_SUFFIX = "-train"


def load_xquad(
    task: str, split: str = "test", directory: Path = XQUAD_DIR, limit: int | None = None
) -> Collection:
    """An XQuAD retrieval task: one document per paragraph (titled with its article), each question's
    relevant documents are its own paragraph in every corpus language. The language files are parallel, so
    paragraph (article a, position p) is the same text in each; `split` keeps the articles of xquad_split."""
    spec = XQUAD_TASKS[task]
    files = {lang: xquad_articles(directory, lang) for lang in dict.fromkeys(spec.corpus + spec.questions)}
    shapes = {lang: [len(a["paragraphs"]) for a in articles] for lang, articles in files.items()}
    if len({tuple(shape) for shape in shapes.values()}) != 1:
        raise ValueError(f"XQuAD files in {directory} are not parallel: {shapes}")

    def doc_id(lang: str, a: int, p: int) -> str:
        return f"{lang}-{a:02d}-{p}"

    documents = [
        EvalDocument(doc_id(lang, a, p), article["title"].replace("_", " "), paragraph["context"])
        for lang in spec.corpus
        for a, article in enumerate(files[lang])
        if xquad_split(a) == split
        for p, paragraph in enumerate(article["paragraphs"])
    ]
    queries = [
        EvalQuery(f"{lang}-{qa['id']}", qa["question"], {doc_id(c, a, p): 1 for c in spec.corpus})
        for lang in spec.questions
        for a, article in enumerate(files[lang])
        if xquad_split(a) == split
        for p, paragraph in enumerate(article["paragraphs"])
        for qa in paragraph["qas"]
    ]
    if limit:
        queries = queries[:limit]
    langs = set(spec.corpus + spec.questions)
    name = task + (TRAIN_SUFFIX if split == "train" else "") + (f"-{limit}" if limit else "")
    return Collection(name, langs.pop() if len(langs) == 1 else "mixed", documents, queries)


ORGKB = "orgkb"
ORGKB_SPLITS = {"test": "reported", "train": "tuning"}


def orgkb_documents(directory: Path = ORGKB_DIR) -> list[EvalDocument]:
    """The imagined organisation's documents: one `<doc_id>.md` each, titled by its first `# heading`."""
    from knowledge_core.extraction import markdown_title

    documents = []
    for path in sorted(directory.joinpath("docs").glob("*.md")):
        if path.name == "LICENSE.md":
            continue
        title, body = markdown_title(path.read_text(encoding="utf-8"))
        documents.append(EvalDocument(path.stem, title or path.stem, body))
    return documents


def orgkb_questions(directory: Path = ORGKB_DIR) -> list[dict[str, Any]]:
    """Every row of questions.jsonl (qid, query, lang, kind, relevant, answer, split)."""
    lines = directory.joinpath("questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def load_orgkb(split: str = "test", directory: Path = ORGKB_DIR, limit: int | None = None) -> Collection:
    """The bilingual organisation set: all its documents, and the questions of one half (`split` test:
    the reported half, train: the tuning half), answerable (same, cross) and unanswerable (near, far)."""
    wanted = ORGKB_SPLITS[split]
    queries = [
        EvalQuery(row["qid"], row["query"], {d: 1 for d in row["relevant"]}, row["kind"])
        for row in orgkb_questions(directory)
        if row["split"] == wanted
    ]
    if limit:
        queries = queries[:limit]
    name = ORGKB + (TRAIN_SUFFIX if split == "train" else "") + (f"-{limit}" if limit else "")
    return Collection(name, "mixed", orgkb_documents(directory), queries)


COLLECTIONS = ["scifact", "scifact-train", "demo-zh", "demo-en", "demo-all", ORGKB, ORGKB + TRAIN_SUFFIX] + [
    name + suffix for name in XQUAD_TASKS for suffix in ("", TRAIN_SUFFIX)
]


def load_collection(
    name: str, *, limit: int | None = None, scifact_zip: Path = SCIFACT_ZIP, xquad_dir: Path = XQUAD_DIR
) -> Collection:
    if name == "scifact":
        return load_scifact(scifact_zip, "test", limit)
    if name == "scifact-train":
        return load_scifact(scifact_zip, "train", limit)
    if name in (ORGKB, ORGKB + TRAIN_SUFFIX):
        return load_orgkb("train" if name.endswith(TRAIN_SUFFIX) else "test", ORGKB_DIR, limit)
    task = name.removesuffix(TRAIN_SUFFIX)
    if task in XQUAD_TASKS:
        return load_xquad(task, "train" if name.endswith(TRAIN_SUFFIX) else "test", xquad_dir, limit)
    if name.startswith("demo"):
        lang = name.partition("-")[2] or "zh"
        collection = load_demo(None if lang == "all" else lang)
        if limit:
            collection.queries = collection.queries[:limit]
        return collection
    raise ValueError(f"unknown collection {name!r} ({', '.join(COLLECTIONS)})")


# --- an independent baseline ------------------------------------------------------------------------

_WORD_RE = re.compile(r"\w+", re.UNICODE)


def bigram_tokens(text: str) -> list[str]:
    """Plain character bigrams of every run of word characters (a one-character run stays a unigram)."""
    out: list[str] = []
    for run in _WORD_RE.findall(text.lower()):
        out.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
    return out


def word_tokens(text: str) -> list[str]:
    """Plain lower-cased words: no stemming, no stop words."""
    return _WORD_RE.findall(text.lower())


# Han (with extensions and compatibility ideographs), kana and Hangul: scripts written without spaces.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"
_SCRIPT_RUN_RE = re.compile(f"[{_CJK}]+|[^{_CJK}]+")
_CJK_RE = re.compile(f"[{_CJK}]")


def script_tokens(text: str) -> list[str]:
    """Each run of word characters by its own script: CJK pieces as character bigrams (bigram_tokens),
    everything else as plain words (word_tokens), so one tokenizer serves English, Chinese and mixed
    corpora; on text without CJK it is exactly word_tokens."""
    out: list[str] = []
    for run in _WORD_RE.findall(text.lower()):
        for piece in _SCRIPT_RUN_RE.findall(run):
            out.extend(bigram_tokens(piece) if _CJK_RE.match(piece) else [piece])
    return out


class Bm25Baseline:
    """A small in-memory BM25 (Lucene idf) over title + body as one field; shares nothing with the
    backends' analyzers so that it measures them."""

    def __init__(
        self,
        documents: Iterable[EvalDocument],
        tokens: Callable[[str], list[str]],
        k1: float = 0.9,
        b: float = 0.4,
    ) -> None:
        self._tokens, self._k1, self._b = tokens, k1, b
        self._postings: dict[str, list[tuple[int, int]]] = {}
        self._ids: list[str] = []
        lengths: list[int] = []
        for n, doc in enumerate(documents):
            counts = Counter(tokens(f"{doc.title}\n{doc.body}"))
            self._ids.append(doc.doc_id)
            lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self._postings.setdefault(term, []).append((n, tf))
        avg = (sum(lengths) / len(lengths)) if lengths else 1.0
        self._norm = [k1 * (1 - b + b * length / avg) for length in lengths]

    def rank(self, query: str, depth: int = RANK_DEPTH) -> list[str]:
        return [doc_id for doc_id, _ in self.scores(query)[:depth]]

    def scores(self, query: str) -> list[tuple[str, float]]:
        """Every matching document with its score, best first (ties by doc_id)."""
        scores: dict[int, float] = {}
        n_docs = len(self._ids)
        for term, qtf in Counter(self._tokens(query)).items():
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = math.log(1 + (n_docs - len(postings) + 0.5) / (len(postings) + 0.5))
            for n, tf in postings:
                scores[n] = scores.get(n, 0.0) + qtf * idf * tf * (self._k1 + 1) / (tf + self._norm[n])
        return sorted(((self._ids[n], score) for n, score in scores.items()), key=lambda kv: (-kv[1], kv[0]))


def baseline_for(collection: Collection) -> tuple[str, Bm25Baseline]:
    """Every text tokenized by its own script (script_tokens), whatever the collection's language: the
    demo corpus and the XQuAD cross-lingual and mixed tasks hold English and Chinese side by side."""
    return "BM25 words + CJK bigrams k1=0.9 b=0.4 (in-run)", Bm25Baseline(collection.documents, script_tokens)


# --- the harness --------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    collection: str
    backend: str
    documents: int
    queries: int
    metrics: Metrics
    baseline_name: str
    baseline: Metrics
    published_baseline: dict[str, Any] | None
    ingest_seconds: float
    query_seconds: float
    query_ms_p50: float
    query_ms_p95: float
    wall_seconds: float
    per_query: list[dict[str, Any]] = field(default_factory=list)
    ranking: str = "bm25"
    hybrid: dict[str, Any] | None = None  # the HybridRanking knobs, when ranking is hybrid
    # What a caller of POST …/knowledge/search sees (its <= 3 hints, the same pipeline at the source's own
    # depth): R@3 and MRR@3 are the public figure beside the deep ranking's.
    public: Metrics | None = None
    # Share of those hints that are relevant (what the relevance cut trades against the deep nDCG).
    public_precision: float | None = None
    # Collections with unanswerable queries: how often those hints are empty where they should be, and
    # where they should not (the ranking metrics above count the answerable queries only).
    abstention: Abstention | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Semantic:
    """Hybrid ranking for an evaluation: the model directory, the knobs of HybridRanking, the vector cache."""

    model_dir: str
    weight: float = HybridRanking.weight
    pool: int = HybridRanking.pool
    cache: str | None = None
    fusion: str = HybridRanking.fusion
    dense: int = HybridRanking.dense
    rrf_k: int = HybridRanking.rrf_k
    cross_script: bool = False


def semantic_settings(semantic: Semantic) -> dict[str, Any]:
    """The container settings of `semantic` (Container.hybrid builds HybridRanking from them)."""
    return {
        "embedding_model_dir": semantic.model_dir,
        "embedding_cache": semantic.cache,
        "semantic_weight": semantic.weight,
        "semantic_pool": semantic.pool,
        "semantic_fusion": semantic.fusion,
        "semantic_dense": semantic.dense,
        "semantic_rrf_k": semantic.rrf_k,
        "embedding_cross_script": semantic.cross_script,
    }


def build_container(
    backend: str,
    workdir: Path,
    opensearch_url: str | None = None,
    semantic: Semantic | None = None,
    lexicon: str | None = None,
) -> Any:
    """A fresh bootstrap Container: embedded SQLite state, the chosen search backend (hybrid when
    `semantic` is given; queries expanded across Chinese and English with the `lexicon` directory)."""
    from knowledge_core.bootstrap import Container
    from knowledge_core.ports import SystemClock
    from knowledge_core.settings import Settings

    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "AgentKnowledgeEval")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    if backend == "opensearch" and not opensearch_url:
        raise ValueError("--opensearch-url is required for the opensearch backend")
    settings = Settings(
        state_backend="sqlite",
        state_path=str(workdir / "eval-state.sqlite3"),
        search_backend=backend,
        sqlite_path=str(workdir / "eval.sqlite3"),
        opensearch_url=opensearch_url,
        # Own indices per run: a shared node never mixes runs, and they are dropped afterwards.
        opensearch_index_prefix=f"kb-eval-{uuid.uuid4().hex[:8]}",
        token_secret=secrets.token_urlsafe(32),
        table_name=f"kb-eval-{uuid.uuid4().hex[:12]}",
        registry_cache_seconds=60,
        query_translation=lexicon is not None,
        lexicon_dir=lexicon,
        **(semantic_settings(semantic) if semantic else {}),
    )
    return Container(settings, clock=SystemClock())


@contextmanager
def fresh_container(
    backend: str, opensearch_url: str | None, semantic: Semantic | None, lexicon: str | None
) -> Iterator[Any]:
    """`build_container` in a temporary directory for one collection; afterwards its OpenSearch indices are
    dropped and its search backend closed (the background FTS5 compaction stops) before the directory goes."""
    with tempfile.TemporaryDirectory(prefix="kb-eval-") as tmp:
        container = build_container(backend, Path(tmp), opensearch_url, semantic, lexicon)
        try:
            yield container
        finally:
            try:
                if backend == "opensearch":
                    container.backend.drop_indices()
            finally:
                container.close()


def with_ranking(container: Any, semantic: Semantic) -> Any:
    """The same service over the same index, state and embedder as `container` (so nothing is ingested or
    embedded again), ranking with `semantic`'s knobs: a tuning grid ingests a collection once."""
    from knowledge_core.bootstrap import Container
    from knowledge_core.settings import Settings

    settings = Settings.model_validate({**container.settings.model_dump(), **semantic_settings(semantic)})
    return Container(
        settings,
        clock=container.clock,
        state=container.state,
        embedder=container.embedder,
        translator=container.translator,
    )


def _publish(container: Any, collection: Collection) -> tuple[str, str, Any]:
    """A fresh source (unique id, so a shared OpenSearch never mixes runs), agent and workspace."""
    from knowledge_core.domain.models import AgentDefinition, Principal, SourceDefinition

    run = uuid.uuid4().hex[:8]
    source_id = re.sub(r"[^a-z0-9-]", "-", f"eval-{collection.name}-{run}".lower())[:64]
    source = SourceDefinition.model_validate(
        {
            "id": source_id,
            "version": "1",
            "topK": 10,
            "minScore": 0.0,
            "description": f"evaluation collection {collection.name}",
        }
    )
    agent = AgentDefinition.model_validate(
        {
            "id": f"eval-agent-{run}",
            "version": "1",
            "systemPrompt": "evaluation",
            "modelProfile": {"candidates": [{"model": "eval", "toolCalling": True}]},
            "allowedKnowledge": [{"id": source_id, "version": "1"}],
        }
    )
    route = f"eval-{run}"
    container.admin.publish_source(source)
    container.admin.publish_agent(agent)
    container.admin.set_workspace(route, agent.key)
    principal = Principal(
        client_id="eval", session_id=f"eval-{run}", subject="eval", tenant="eval", routes=[route]
    )
    return source.key, route, principal


@dataclass(frozen=True)
class Ingested:
    """A collection published and ingested into a container's source: what ranking it needs."""

    source_key: str
    route: str
    principal: Any
    seconds: float


def ingest(collection: Collection, container: Any, *, progress: bool = True) -> Ingested:
    """Publish a fresh source and put every document through AdminService.put_documents."""
    started = time.perf_counter()
    source_key, route, principal = _publish(container, collection)
    put_eval_documents(container, source_key, collection.documents, collection.name, progress=progress)
    return Ingested(source_key, route, principal, time.perf_counter() - started)


def baseline_rankings(collection: Collection, depth: int = RANK_DEPTH) -> tuple[str, list[list[str]]]:
    """The in-run baseline's name and its ranking of every query (independent of the service's knobs)."""
    name, baseline = baseline_for(collection)
    return name, [baseline.rank(q.text, depth) for q in collection.queries]


def measure(
    collection: Collection,
    container: Any,
    backend: str,
    ingested: Ingested,
    *,
    depth: int = RANK_DEPTH,
    progress: bool = True,
    keep_per_query: bool = True,
    baseline: tuple[str, list[list[str]]] | None = None,
) -> EvalResult:
    """Rank each query of an ingested collection through KnowledgeService.rank and measure it beside the
    in-run baseline (computed here unless given)."""
    from tqdm import tqdm

    started = time.perf_counter()
    rankings: list[list[str]] = []
    public: list[list[str]] = []
    public_scores: list[list[tuple[str, float]]] = []
    latencies: list[float] = []
    for query in tqdm(
        collection.queries, unit="q", desc=f"query {collection.name}", disable=not progress, file=sys.stderr
    ):
        t0 = time.perf_counter()
        # The ranking itself, before the doors' relevance cut (their precision is the API P column).
        ranked = container.knowledge.rank(ingested.principal, ingested.route, query.text, depth, cut=False)
        latencies.append((time.perf_counter() - t0) * 1000)
        rankings.append([doc_id for key, doc_id, _ in ranked if key == ingested.source_key])
        answered = searched_scores(container, ingested, query.text)
        public.append([doc_id for doc_id, _ in answered])
        public_scores.append(answered)
    query_seconds = sum(latencies) / 1000
    qrels = [q.relevant for q in collection.queries]
    kinds = [q.kind for q in collection.queries]
    # Ranking metrics over the answerable queries: an unanswerable one has no relevant document to find.
    scored = [i for i, q in enumerate(qrels) if answerable(q)]

    baseline_name, baseline_ranked = baseline or baseline_rankings(collection, depth)
    published = next(
        (v for k, v in PUBLISHED_BASELINES.items() if collection.name.startswith(f"{k}-test")), None
    )
    per_query = [
        {
            "qid": q.qid,
            "query": q.text,
            "relevant": sorted(q.relevant),
            **({"kind": q.kind} if q.kind else {}),
            "mrr@3": round(mrr_at_k(r, q.relevant, 3), 4),
            "ndcg@10": round(ndcg_at_k(r, q.relevant, 10), 4),
            "baseline_mrr@3": round(mrr_at_k(b, q.relevant, 3), 4),
            "baseline_ndcg@10": round(ndcg_at_k(b, q.relevant, 10), 4),
            "top": r[:10],
            "public": p,  # the hints' (doc_id, score): a relevance floor can be replayed offline (tuning)
        }
        for q, r, b, p in zip(collection.queries, rankings, baseline_ranked, public_scores, strict=True)
    ]
    return EvalResult(
        collection=collection.name,
        backend=backend,
        documents=len(collection.documents),
        queries=len(collection.queries),
        metrics=Metrics.over(_at(rankings, scored), _at(qrels, scored)),
        baseline_name=baseline_name,
        baseline=Metrics.over(_at(baseline_ranked, scored), _at(qrels, scored)),
        published_baseline=published,
        ingest_seconds=round(ingested.seconds, 3),
        query_seconds=round(query_seconds, 3),
        query_ms_p50=round(statistics.median(latencies), 3) if latencies else 0.0,
        query_ms_p95=round(_percentile(latencies, 95), 3),
        wall_seconds=round(ingested.seconds + time.perf_counter() - started, 3),
        per_query=per_query if keep_per_query else [],
        ranking=ranking_of(container),
        hybrid=hybrid_of(container),
        public=Metrics.over(_at(public, scored), _at(qrels, scored)),
        public_precision=precision(public, qrels),
        abstention=Abstention.over(public, qrels, kinds),
    )


def _at(items: list[Any], positions: list[int]) -> list[Any]:
    return [items[i] for i in positions]


def precision(rankings: list[list[str]], qrels: list[dict[str, int]]) -> float:
    """Relevant answers / answers, pooled over queries (0.0 when nothing was answered)."""
    answered = sum(len(r) for r in rankings)
    hits = sum(1 for r, q in zip(rankings, qrels, strict=True) for d in r if q.get(d, 0) > 0)
    return hits / answered if answered else 0.0


def searched(container: Any, ingested: Ingested, text: str) -> list[str]:
    """The documents of the hints POST …/knowledge/search answers (K-PIPE: the same retrieval as `rank`,
    at the source's own depth, at most 3), named through their signed refs."""
    return [doc_id for doc_id, _ in searched_scores(container, ingested, text)]


def searched_scores(container: Any, ingested: Ingested, text: str) -> list[tuple[str, float]]:
    """`searched` with each hint's score."""
    from knowledge_core.codec import identity_digest
    from knowledge_core.domain.wire import SearchRequest

    principal, route = ingested.principal, ingested.route
    body = container.knowledge.search(principal, route, SearchRequest(query=text))
    identity = identity_digest(principal, route, None)
    return [(container.codec.open_ref(h.ref, identity=identity).doc_id, h.score) for h in body.hints]


def evaluate(
    collection: Collection,
    container: Any,
    backend: str,
    *,
    depth: int = RANK_DEPTH,
    progress: bool = True,
    keep_per_query: bool = True,
) -> EvalResult:
    """Ingest `collection` through AdminService.put_documents, rank each query through
    KnowledgeService.rank, and measure it beside the in-run baseline."""
    ingested = ingest(collection, container, progress=progress)
    return measure(
        collection,
        container,
        backend,
        ingested,
        depth=depth,
        progress=progress,
        keep_per_query=keep_per_query,
    )


def _percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1)]


METRIC_COLUMNS = (
    ("R@3", "recall_at_3"),
    ("MRR@3", "mrr_at_3"),
    ("nDCG@10", "ndcg_at_10"),
    ("R@100", "recall_at_100"),
)


def format_table(results: list[EvalResult]) -> str:
    """One row per result: the service's R@3, MRR@3, nDCG@10 and R@100 (deep ranking), the same-run
    baseline's, then the R@3 of what the public search answers (API R@3)."""
    width = max([18, *(len(r.collection) for r in results)])
    service = " ".join(f"{label:>7}" for label, _ in METRIC_COLUMNS)
    base = " ".join(f"{'b ' + label:>9}" for label, _ in METRIC_COLUMNS)
    head = (
        f"{'collection':<{width}} {'backend':<10} {'docs':>5} {'queries':>7} {service}  {base} "
        f"{'API R@3':>8} {'API P':>6} {'p50 ms':>7} {'wall s':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        ours = " ".join(f"{getattr(r.metrics, key):>7.4f}" for _, key in METRIC_COLUMNS)
        api = f"{r.public.recall_at_3:>8.4f}" if r.public else f"{'-':>8}"
        api += f" {r.public_precision:>6.4f}" if r.public_precision is not None else f" {'-':>6}"
        theirs = " ".join(f"{getattr(r.baseline, key):>9.4f}" for _, key in METRIC_COLUMNS)
        lines.append(
            f"{r.collection:<{width}} {r.backend:<10} {r.documents:>5} {r.queries:>7} {ours}  {theirs} "
            f"{api} {r.query_ms_p50:>7.2f} {r.wall_seconds:>7.1f}"
        )
    for r in results:
        lines.append(f"  {r.collection}: ranking = {r.ranking}; baseline = {r.baseline_name}")
        if r.abstention:
            lines.append(f"  {r.collection}: {format_abstention(r.abstention)}")
        if r.published_baseline:
            p = r.published_baseline
            lines.append(
                f"  {r.collection}: published {p['name']}: nDCG@10 {p['ndcg@10']:.4f}, "
                f"R@100 {p['recall@100']:.4f}"
            )
    return "\n".join(lines)


def format_abstention(a: Abstention) -> str:
    """One line: the API's abstention recall (overall and per kind) and its false abstention."""
    kinds = ", ".join(f"{k} {v:.4f} of {a.by_kind_queries[k]}" for k, v in a.by_kind.items())
    false = f"{a.false_abstention:.4f}" if a.false_abstention is not None else "-"
    return (
        f"API abstention (no hits) on unanswerable {a.recall:.4f} of {a.unanswerable}"
        + (f" ({kinds})" if kinds else "")
        + f"; false abstention (no hits) on answerable {false} of {a.answerable}"
    )


def default_opensearch_url() -> str:
    """The loopback OpenSearch that `kb services start` runs (started if needed)."""
    from . import supervisor  # type: ignore[attr-defined]

    return str(supervisor.ensure_running(Path(".kb-state"))["OPENSEARCH_URL"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`kb eval`: collections, where and how to run, and one setting of each hybrid knob."""
    parser.add_argument(
        "--collection",
        action="append",
        dest="collections",
        help="scifact (test, 300 claims), scifact-train (tuning only), demo-zh, demo-en, demo-all, "
        "orgkb (a bilingual organisation's documents with unanswerable questions: the reported half; "
        "orgkb-train: the tuning half), "
        f"{', '.join(XQUAD_TASKS)} (the reported half of the articles; <task>-train: the tuning half); "
        "xquad-long[-train] (whole articles as documents: does the summary / reference carry the answer); "
        "xquad-small[-train] (the same in sources of four articles, as a newcomer's first files); "
        "repeatable (default: scifact and demo-zh)",
    )
    add_run_arguments(parser)
    parser.add_argument(
        "--semantic-weight", type=float, default=HybridRanking.weight, help="BM25 share of the hybrid blend"
    )
    parser.add_argument(
        "--semantic-pool", type=int, default=HybridRanking.pool, help="BM25 candidates per source"
    )
    parser.add_argument(
        "--fusion",
        choices=FUSIONS,
        default=HybridRanking.fusion,
        help="how BM25 and vector candidates combine: blend (weighted, on the BM25 scale) or rrf",
    )
    parser.add_argument(
        "--dense-k",
        type=int,
        default=HybridRanking.dense,
        help="vector candidates per source (0: re-score BM25's candidates only)",
    )
    parser.add_argument(
        "--rrf-k", type=int, default=HybridRanking.rrf_k, help="rank constant of --fusion rrf"
    )
    parser.add_argument(
        "--tool-rerank",
        choices=["NONE", "LEXICAL"],
        default="NONE",
        help="xquad-long, xquad-small: the knowledgeRouting.rerank of the agent whose tool calls are "
        "measured (default NONE, the routing default)",
    )


FUSIONS = ["blend", "blend-norm", "rrf"]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how a run ingests and ranks: shared by `kb eval` and bench/tune_hybrid.py."""
    parser.add_argument("--backend", choices=["sqlite", "opensearch"], default="sqlite")
    parser.add_argument("--opensearch-url", help="default: the loopback node of `kb services`")
    parser.add_argument("--limit", type=int, help="first N queries only")
    parser.add_argument("--scifact-zip", default=str(SCIFACT_ZIP))
    parser.add_argument("--xquad-dir", default=str(XQUAD_DIR), help="holds xquad.zh.json and xquad.en.json")
    parser.add_argument("--depth", type=int, default=RANK_DEPTH, help="ranking depth per query (>= 100)")
    parser.add_argument(
        "--embedding-model",
        default="auto",
        help="hybrid ranking model directory; 'auto' (default): $KB_EMBEDDING_MODEL_DIR, else the one "
        "`kb models fetch` put in the per-user cache if present; 'none': BM25 only",
    )
    parser.add_argument(
        "--embedding-cache",
        default=str(Path(".kb-state") / "embedding-cache.sqlite3"),
        help="passage vectors remembered across runs ('' for none)",
    )
    parser.add_argument(
        "--cross-script",
        action="store_true",
        help="embed each passage with every model that covers it (KB_EMBEDDING_CROSS_SCRIPT)",
    )
    parser.add_argument(
        "--query-translation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="expand queries across Chinese and English with the lexicon `kb models fetch` compiles "
        "($KB_LEXICON_DIR, else the per-user cache; default: on when it is there)",
    )
    parser.add_argument("--out", help="results JSON (default bench/results/<kind>-<backend>-<time>.json)")
    parser.add_argument("--no-progress", action="store_true")


def _ranking(args: argparse.Namespace, query_translation: bool | None = False) -> LocalRanking:
    """The models (and lexicon) as every local door resolves them (kb_cli.local_env.LocalRanking); an
    unusable directory named explicitly stops here, a broken per-user cache falls back."""
    from .local_env import LocalRanking
    from .models import ModelError

    try:
        return LocalRanking.resolve(args.embedding_model, query_translation)
    except ModelError as exc:
        raise SystemExit(f"kb eval: {exc}") from None


def embedding_from(args: argparse.Namespace) -> Semantic | None:
    """The embedding model and vector cache of `--embedding-model` / `--embedding-cache` (knobs at their
    defaults); None for BM25 alone."""
    ranking = _ranking(args)
    if ranking.model_dir is None:
        print(f"ranking: {ranking.ranking}", file=sys.stderr)
        return None
    cache = args.embedding_cache or None
    if cache:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
    return Semantic(ranking.model_dir, cache=cache, cross_script=args.cross_script)


def semantic_from(args: argparse.Namespace) -> Semantic | None:
    model = embedding_from(args)
    if model is None:
        return None
    return replace(
        model,
        weight=args.semantic_weight,
        pool=args.semantic_pool,
        fusion=args.fusion,
        dense=args.dense_k,
        rrf_k=args.rrf_k,
    )


def lexicon_from(args: argparse.Namespace) -> str | None:
    """The lexicon directory of `--query-translation` (None: queries stay monolingual)."""
    if not args.query_translation:
        print("query translation: off", file=sys.stderr)
        return None
    ranking = _ranking(argparse.Namespace(**{**vars(args), "embedding_model": "none"}), True)
    print(f"query translation: {ranking.translation}", file=sys.stderr)
    return ranking.lexicon_dir


def _opensearch_url(args: argparse.Namespace) -> str | None:
    if args.backend == "opensearch" and not args.opensearch_url:
        return default_opensearch_url()
    return str(args.opensearch_url) if args.opensearch_url else None


def _load(name: str, args: argparse.Namespace) -> Collection:
    return load_collection(
        name, limit=args.limit, scifact_zip=Path(args.scifact_zip), xquad_dir=Path(args.xquad_dir)
    )


def _write_results(results: list[Any], args: argparse.Namespace, kind: str) -> None:
    out = (
        Path(args.out)
        if args.out
        else Path("bench/results") / f"{kind}-{args.backend}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([r.to_json() for r in results], ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"results: {out}")


def run(args: argparse.Namespace) -> int:
    names = args.collections or ["scifact", "demo-zh"]
    semantic = semantic_from(args)
    print(f"ranking: {'hybrid, ' + semantic.model_dir if semantic else 'BM25'}", file=sys.stderr)
    lexicon = lexicon_from(args)
    opensearch_url = _opensearch_url(args)
    results: list[EvalResult] = []
    answers = _run_answers([n for n in names if is_long_task(n)], args, semantic, lexicon, opensearch_url)
    for name in [n for n in names if not is_long_task(n)]:
        collection = _load(name, args)
        with fresh_container(args.backend, opensearch_url, semantic, lexicon) as container:
            results.append(
                evaluate(collection, container, args.backend, depth=args.depth, progress=not args.no_progress)
            )
    if results:
        print(format_table(results))
    if answers:
        from .eval_answers import format_answers

        print(format_answers(answers))
    _write_results([*results, *answers], args, "quality")
    return 0


def is_long_task(name: str) -> bool:
    from .eval_answers import LONG_TASK, SMALL_TASK

    return name.removesuffix(TRAIN_SUFFIX) in (LONG_TASK, SMALL_TASK)


def _run_answers(
    names: list[str],
    args: argparse.Namespace,
    semantic: Semantic | None,
    lexicon: str | None,
    url: str | None,
) -> list[Any]:
    """The long-document task (kb_cli.eval_answers) of each of `names`, in a fresh container each."""
    from .eval_answers import evaluate_answers, load_xquad_long

    out: list[Any] = []
    for name in names:
        split = "train" if name.endswith(TRAIN_SUFFIX) else "test"
        collection = load_xquad_long(split, Path(args.xquad_dir), args.limit, name.removesuffix(TRAIN_SUFFIX))
        with fresh_container(args.backend, url, semantic, lexicon) as container:
            out.append(
                evaluate_answers(
                    collection,
                    container,
                    args.backend,
                    rerank=args.tool_rerank,
                    progress=not args.no_progress,
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kb eval", description=__doc__, allow_abbrev=False)
    add_arguments(parser)
    return run(parser.parse_args(argv))


# --- tuning -------------------------------------------------------------------------------------------

TUNING_COLLECTIONS = ["scifact-train", *(task + TRAIN_SUFFIX for task in XQUAD_TASKS)]


def grid_points(
    model: Semantic,
    *,
    fusions: Sequence[str],
    weights: Sequence[float],
    pools: Sequence[int],
    dense: Sequence[int],
    rrf_ks: Sequence[int],
) -> list[Semantic]:
    """Every combination of the knob values, in order, without repeats: the weight only matters for blend,
    rrf_k only for rrf (the other keeps its default)."""
    points: list[Semantic] = []
    for f, w, p, d, k in itertools.product(fusions, weights, pools, dense, rrf_ks):
        point = replace(
            model,
            fusion=f,
            weight=w if f != "rrf" else HybridRanking.weight,
            pool=p,
            dense=d,
            rrf_k=k if f == "rrf" else HybridRanking.rrf_k,
        )
        if point not in points:
            points.append(point)
    return points


def tune_collection(
    collection: Collection,
    points: Sequence[Semantic],
    backend: str,
    workdir: Path,
    opensearch_url: str | None = None,
    *,
    depth: int = RANK_DEPTH,
    progress: bool = True,
    lexicon: str | None = None,
) -> list[EvalResult]:
    """One ingestion of `collection`, then its queries ranked at every grid point over that same index."""
    baseline = baseline_rankings(collection, depth)
    container = build_container(backend, workdir, opensearch_url, points[0], lexicon)
    try:
        ingested = ingest(collection, container, progress=progress)
        return [
            measure(
                collection,
                container if i == 0 else with_ranking(container, point),
                backend,
                ingested,
                depth=depth,
                progress=progress,
                keep_per_query=False,
                baseline=baseline,
            )
            for i, point in enumerate(points)
        ]
    finally:
        if backend == "opensearch":
            container.backend.drop_indices()


def format_grid(results: list[EvalResult]) -> str:
    """Per collection: one row per grid point and the in-run baseline; then each point's mean over the
    collections (unweighted), best nDCG@10 marked."""
    knobs = list(dict.fromkeys(k for r in results for k in (r.hybrid or {})))
    width = max([18, *(len(r.collection) for r in results)])
    metric_head = " ".join(f"{label:>7}" for label, _ in METRIC_COLUMNS)
    head = f"{'collection':<{width}} " + " ".join(f"{k:>7}" for k in knobs) + f"  {metric_head}"
    lines = [head, "-" * len(head)]

    def row(label: str, values: list[str], metrics: Metrics) -> str:
        cells = " ".join(f"{v:>7}" for v in values)
        return f"{label:<{width}} {cells}  " + " ".join(
            f"{getattr(metrics, k):>7.4f}" for _, k in METRIC_COLUMNS
        )

    def knob_values(r: EvalResult) -> list[str]:
        return [str((r.hybrid or {}).get(k, "-")) for k in knobs]

    by_point: dict[tuple[str, ...], list[Metrics]] = {}
    for name in dict.fromkeys(r.collection for r in results):
        mine = [r for r in results if r.collection == name]
        for r in mine:
            lines.append(row(name, knob_values(r), r.metrics))
            by_point.setdefault(tuple(knob_values(r)), []).append(r.metrics)
        lines.append(row(name, ["baseline", *([""] * (len(knobs) - 1))], mine[0].baseline))
    lines.append("")
    means = {
        point: Metrics(
            **{k: statistics.fmean(getattr(m, k) for m in ms) for _, k in METRIC_COLUMNS},
            queries=sum(m.queries for m in ms),
        )
        for point, ms in by_point.items()
    }
    best = max(means, key=lambda point: means[point].ndcg_at_10)
    for point, mean in means.items():
        lines.append(row("mean" + (" *" if point == best else ""), list(point), mean))
    return "\n".join(lines)


def tune(args: argparse.Namespace) -> int:
    names = args.collections or TUNING_COLLECTIONS
    reported = [n for n in names if n not in TUNING_COLLECTIONS]
    if reported:
        raise SystemExit(f"tuning runs only on {', '.join(TUNING_COLLECTIONS)}, not on {', '.join(reported)}")
    model = embedding_from(args)
    if model is None:
        raise SystemExit("tuning needs an embedding model (--embedding-model, or `kb models fetch`)")
    points = grid_points(
        model,
        fusions=args.fusion,
        weights=args.semantic_weight,
        pools=args.semantic_pool,
        dense=args.dense_k,
        rrf_ks=args.rrf_k,
    )
    print(f"hybrid grid: {len(points)} points x {len(names)} collections, {model.model_dir}", file=sys.stderr)
    lexicon = lexicon_from(args)
    opensearch_url = _opensearch_url(args)
    results: list[EvalResult] = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="kb-tune-") as tmp:
            results += tune_collection(
                _load(name, args),
                points,
                args.backend,
                Path(tmp),
                opensearch_url,
                depth=args.depth,
                progress=not args.no_progress,
                lexicon=lexicon,
            )
    print(format_grid(results))
    _write_results(results, args, "tune")
    return 0


def _values(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A comma-separated list of `kind`."""
    return lambda text: [kind(v) for v in text.split(",")]


def tune_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/tune_hybrid.py",
        description="Hybrid ranking knobs over a grid, on the tuning collections only (one ingestion per "
        "collection; vectors come from --embedding-cache). Lists are comma-separated.",
    )
    parser.add_argument(
        "--collection",
        action="append",
        dest="collections",
        choices=TUNING_COLLECTIONS,
        help="repeatable (default: all of them)",
    )
    add_run_arguments(parser)
    parser.add_argument("--fusion", type=_values(str), default=FUSIONS, help="default: blend,rrf")
    parser.add_argument(
        "--semantic-weight",
        type=_values(float),
        default=[0.05, 0.1, 0.2],
        help="blend only; default 0.05,0.1,0.2",
    )
    parser.add_argument("--semantic-pool", type=_values(int), default=[HybridRanking.pool])
    parser.add_argument(
        "--dense-k", type=_values(int), default=[0, HybridRanking.dense], help="default: 0,50"
    )
    parser.add_argument("--rrf-k", type=_values(int), default=[HybridRanking.rrf_k], help="rrf only")
    return tune(parser.parse_args(argv))
