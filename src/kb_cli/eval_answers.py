"""The long-document task of `kb eval`: does what a hit *shows* carry the answer?

Each XQuAD article of a split is one Markdown document (`# title`, then its paragraphs), in Chinese and in
English by turns (the split's articles in file order: even positions Chinese, odd English), asked its own
questions in its own language; XQuAD gives each question's answer spans. Per query, through the public
doors of one source (the same retrieval step as every door, K-PIPE):

- search (§2.3): is the top hint the right document, and does its **summary** contain an answer;
- the agent tool's `knowledge_search` (§3.6, routing defaults but `rerank` — `kb eval --tool-rerank`,
  NONE by default — source `topK` 5): does the first reference
  (and any of the first three) contain an answer, how many references a call returns, and the **noise
  share**: the references beyond the first that hold no answer, as a share of all references returned
  (pooled over queries: five references of which only the first helps is 0.8; the issue's 0.79);
- precision: relevant hints / hints, relevant references / references (the relevance cut's figure, beside
  the deep ranking's nDCG of the other tasks).

"Contains" compares with every whitespace removed and case folded (XQuAD's Chinese puts spaces around
numbers; a summary joins lines).

`xquad-small[-train]` asks the same questions of small sources, as a newcomer's first files are: the split's
articles in groups of SMALL_GROUP in file order (two Chinese, two English), each group a source of its own
with its own agent and route, and each question asked of its article's group. With a handful of documents
per source, and one or two per script, the ranking's scaling within a source and the relevance cut meet
the shape a large corpus hides."""

from __future__ import annotations

import re
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LONG_TASK = "xquad-long"
SMALL_TASK = "xquad-small"
SMALL_GROUP = 4  # articles per source in SMALL_TASK: two Chinese, two English
LANGS = ("zh", "en")


@dataclass(frozen=True)
class LongQuery:
    qid: str
    text: str
    lang: str
    doc_id: str
    answers: tuple[str, ...]


@dataclass
class LongCollection:
    name: str
    documents: list[Any]  # eval_corpus.EvalDocument
    queries: list[LongQuery]
    group: int | None = None  # documents per source, in order (None: one source holds them all)

    def sources(self) -> list[list[Any]]:
        """The documents of each source the task ingests, in order."""
        size = self.group or len(self.documents) or 1
        return [self.documents[i : i + size] for i in range(0, len(self.documents), size)]


def load_xquad_long(
    split: str, directory: Path, limit: int | None = None, task: str = LONG_TASK
) -> LongCollection:
    """The split's articles as Markdown documents, half Chinese and half English, with their same-language
    questions and answers; `limit` keeps the first `limit` questions of each language. `task` SMALL_TASK:
    the articles in sources of SMALL_GROUP (module docstring)."""
    from .eval_corpus import EvalDocument, xquad_articles, xquad_split

    files = {lang: xquad_articles(directory, lang) for lang in LANGS}
    chosen = [a for a in range(len(files["en"])) if xquad_split(a) == split]
    documents: list[Any] = []
    queries: dict[str, list[LongQuery]] = {lang: [] for lang in LANGS}
    for n, a in enumerate(chosen):
        lang = LANGS[n % 2]
        article = files[lang][a]
        title = str(article["title"]).replace("_", " ")
        doc_id = f"{lang}-{a:02d}"
        body = f"# {title}\n\n" + "\n\n".join(p["context"].strip() for p in article["paragraphs"])
        documents.append(EvalDocument(doc_id, title, body))
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                answers = tuple(dict.fromkeys(x["text"] for x in qa["answers"] if x["text"].strip()))
                queries[lang].append(LongQuery(f"{lang}-{qa['id']}", qa["question"], lang, doc_id, answers))
    picked = [q for lang in LANGS for q in (queries[lang][:limit] if limit else queries[lang])]
    name = task + ("-train" if split == "train" else "") + (f"-{limit}" if limit else "")
    return LongCollection(name, documents, picked, SMALL_GROUP if task == SMALL_TASK else None)


def _flat(text: str) -> str:
    return re.sub(r"\s+", "", text).casefold()


def contains_answer(text: str, answers: tuple[str, ...]) -> bool:
    """Does `text` hold one of the answer spans (whitespace removed, case folded on both sides)?"""
    flat = _flat(text)
    return any(_flat(a) in flat for a in answers if _flat(a))


@dataclass
class AnswerMetrics:
    queries: int
    top_hint_right_document: float
    summary_contains_answer_at_1: float
    reference_contains_answer_at_1: float
    reference_contains_answer_at_3: float
    references_per_call: float
    noise_share: float
    hint_precision: float
    reference_precision: float


@dataclass
class QueryObservation:
    """What one query saw: the hints' documents and top summary, the references' documents and contents."""

    hint_docs: list[str]
    summary: str
    reference_docs: list[str]
    reference_contents: list[str]


def answer_metrics(queries: list[LongQuery], seen: list[QueryObservation]) -> AnswerMetrics:
    """The task's figures over `queries` and what each one saw (same order)."""
    n = len(queries) or 1
    pairs = list(zip(queries, seen, strict=True))
    beyond = [(q, c) for q, o in pairs for c in o.reference_contents[1:]]
    hints = sum(len(o.hint_docs) for _, o in pairs)
    refs = sum(len(o.reference_docs) for _, o in pairs)
    return AnswerMetrics(
        queries=len(queries),
        top_hint_right_document=sum(o.hint_docs[:1] == [q.doc_id] for q, o in pairs) / n,
        summary_contains_answer_at_1=sum(
            bool(o.hint_docs) and contains_answer(o.summary, q.answers) for q, o in pairs
        )
        / n,
        reference_contains_answer_at_1=sum(
            any(contains_answer(c, q.answers) for c in o.reference_contents[:1]) for q, o in pairs
        )
        / n,
        reference_contains_answer_at_3=sum(
            any(contains_answer(c, q.answers) for c in o.reference_contents[:3]) for q, o in pairs
        )
        / n,
        references_per_call=refs / n,
        noise_share=(sum(not contains_answer(c, q.answers) for q, c in beyond) / refs) if refs else 0.0,
        hint_precision=(sum(d == q.doc_id for q, o in pairs for d in o.hint_docs) / hints) if hints else 0.0,
        reference_precision=(
            sum(d == q.doc_id for q, o in pairs for d in o.reference_docs) / refs if refs else 0.0
        ),
    )


@dataclass
class AnswerResult:
    collection: str
    backend: str
    documents: int
    ranking: str
    rerank: str  # the tool agent's knowledgeRouting.rerank
    overall: AnswerMetrics
    by_language: dict[str, AnswerMetrics]
    ingest_seconds: float
    query_seconds: float
    per_query: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _publish_tool_agent(container: Any, name: str, rerank: str) -> tuple[str, str, Any, str]:
    """A fresh source (`topK` 5, the default), an AUTO agent that always selects it (routing defaults
    otherwise: `topK` 8; `rerank` as asked, NONE by default) and a workspace route for it."""
    from knowledge_core.domain.models import AgentDefinition, Principal, SourceDefinition

    run = uuid.uuid4().hex[:8]
    source_id = re.sub(r"[^a-z0-9-]", "-", f"eval-{name}-{run}".lower())[:64]
    container.admin.publish_source(SourceDefinition.model_validate({"id": source_id, "version": "1"}))
    agent = AgentDefinition.model_validate(
        {
            "id": f"eval-agent-{run}",
            "version": "1",
            "systemPrompt": "evaluation",
            "modelProfile": {"candidates": [{"model": "eval", "toolCalling": True}]},
            "allowedKnowledge": [{"id": source_id, "version": "1"}],
            "knowledgeRouting": {
                "mode": "AUTO",
                "rerank": rerank,
                "rules": [{"knowledge": {"id": source_id, "version": "1"}, "always": True}],
            },
        }
    )
    route = f"eval-{run}"
    container.admin.publish_agent(agent)
    container.admin.set_workspace(route, agent.key)
    principal = Principal(
        client_id="eval", session_id=f"eval-{run}", subject="eval", tenant="eval", routes=[route]
    )
    return f"{source_id}@1", route, principal, agent.key


def _tool_call(container: Any, agent: str, query: str, n: int) -> list[dict[str, Any]]:
    """The agent tool's references for `query` (a fresh invocation each time: no budget carried over)."""
    from knowledge_core.domain.tool_wire import parse_envelope

    envelope = parse_envelope(
        {
            "operation": "knowledge_search",
            "invocation": {
                "tenant": "eval",
                "app": "eval",
                "subject": "eval",
                "agent": agent,
                "invocation_id": f"inv-eval-{n}-{uuid.uuid4().hex[:8]}",
                "ancestors": [],
                "trusted_context": {},
            },
            "arguments": {"query": query},
        }
    )
    result = container.tools.call(envelope).wire()
    if "error" in result:
        raise RuntimeError(f"knowledge_search failed: {result['error'].get('code')}")
    return list(result["references"])


def observe(
    container: Any, route: str, principal: Any, agent: str, query: LongQuery, n: int
) -> QueryObservation:
    from knowledge_core.codec import identity_digest
    from knowledge_core.domain.wire import SearchRequest

    body = container.knowledge.search(principal, route, SearchRequest(query=query.text))
    identity = identity_digest(principal, route, None)
    hint_docs = [container.codec.open_ref(h.ref, identity=identity).doc_id for h in body.hints]
    refs = _tool_call(container, agent, query.text, n)
    return QueryObservation(
        hint_docs,
        body.hints[0].summary if body.hints else "",
        [r["source"]["docId"] for r in refs],
        [r["content"] for r in refs],
    )


def evaluate_answers(
    collection: LongCollection,
    container: Any,
    backend: str,
    *,
    rerank: str = "NONE",
    progress: bool = True,
) -> AnswerResult:
    """Ingest the long documents into fresh sources (one, or one per group) and measure every query through
    search and the tool, each asked of its document's source."""
    from tqdm import tqdm

    from .eval_corpus import put_eval_documents, ranking_of

    started = time.perf_counter()
    doors: dict[str, tuple[str, Any, str]] = {}  # document -> route, principal, agent of its source
    for documents in collection.sources():
        source_key, route, principal, agent = _publish_tool_agent(container, collection.name, rerank)
        put_eval_documents(container, source_key, documents, collection.name, progress=progress)
        doors.update({d.doc_id: (route, principal, agent) for d in documents})
    ingest_seconds = time.perf_counter() - started
    t0 = time.perf_counter()
    seen = [
        observe(container, *doors[q.doc_id], q, n)
        for n, q in enumerate(
            tqdm(
                collection.queries,
                unit="q",
                desc=f"query {collection.name}",
                disable=not progress,
                file=sys.stderr,
            )
        )
    ]
    per_lang = {
        lang: answer_metrics(
            [q for q in collection.queries if q.lang == lang],
            [o for q, o in zip(collection.queries, seen, strict=True) if q.lang == lang],
        )
        for lang in LANGS
    }
    return AnswerResult(
        collection=collection.name,
        backend=backend,
        documents=len(collection.documents),
        ranking=ranking_of(container),
        rerank=rerank,
        overall=answer_metrics(collection.queries, seen),
        by_language=per_lang,
        ingest_seconds=round(ingest_seconds, 3),
        query_seconds=round(time.perf_counter() - t0, 3),
        per_query=[
            {
                "qid": q.qid,
                "answers": list(q.answers),
                "hint_docs": o.hint_docs,
                "summary": o.summary,
                "reference_docs": o.reference_docs,
            }
            for q, o in zip(collection.queries, seen, strict=True)
        ],
    )


ANSWER_COLUMNS = (
    ("doc@1", "top_hint_right_document"),
    ("sum@1", "summary_contains_answer_at_1"),
    ("ref@1", "reference_contains_answer_at_1"),
    ("ref@3", "reference_contains_answer_at_3"),
    ("refs", "references_per_call"),
    ("noise", "noise_share"),
    ("P hint", "hint_precision"),
    ("P ref", "reference_precision"),
)


def format_answers(results: list[AnswerResult]) -> str:
    """One row per result and language: the long-document figures."""
    head = f"{'collection':<22} {'backend':<10} {'rerank':<7} {'lang':<4} {'q':>4} " + " ".join(
        f"{c:>7}" for c, _ in ANSWER_COLUMNS
    )
    lines = [head, "-" * len(head)]
    for r in results:
        for lang, m in [*r.by_language.items(), ("all", r.overall)]:
            values = " ".join(f"{getattr(m, key):>7.3f}" for _, key in ANSWER_COLUMNS)
            where = f"{r.collection:<22} {r.backend:<10} {r.rerank:<7}"
            lines.append(f"{where} {lang:<4} {m.queries:>4} {values}")
    return "\n".join(lines)
