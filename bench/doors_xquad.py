"""Cross-lingual R@3 through every door (SPEC §3.9 K-PIPE) on a mixed-language corpus built from XQuAD's
tuning half: the tuning articles alternate between kept only in Chinese and kept only in English (one source,
one document per paragraph); English questions ask about the Chinese paragraphs (en→zh) and Chinese
questions about the English ones (zh→en), `--per-direction` of each (120 by default, spread over the
articles). Every door runs in this process on the same container, the default ranking (hybrid with both
models + zh<->en query translation):

    search       KnowledgeService.search (POST …/knowledge/search), limit 3
    mcp          the MCP door's knowledge_search (ServiceDoor: what /mcp and `kb mcp --embedded` serve)
    turn inline  POST …/turns without knowledge_delivery (the agent's startup retrieval, bodies)
    tool         the agent tool's knowledge_search (AUTO agent, rerank NONE), first 3 references
    startup      the agent tool's startup
    eval         KnowledgeService.rank (`kb eval`), depth 3

Hints and inline items name their document through their signed ref (opened with the service's codec).

    .venv/bin/python bench/doors_xquad.py [--backend sqlite opensearch] [--opensearch-url URL]
        [--embedding-model DIR] [--lexicon DIR] [--per-direction 120] [--json bench/results/doors.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # the tool's events are logged per call

from kb_cli import evaluation, models

DOORS = ("search", "mcp", "turn inline", "tool", "startup", "eval")


def mixed_corpus(xquad_dir: Path, per_direction: int) -> tuple[list[tuple[str, str, str]], dict[str, list]]:
    """(doc_id, title, body) of the tuning articles, each in one language only, and per direction the
    questions (qid, text, relevant doc id), spread evenly over the articles of that direction."""
    files = {lang: evaluation.xquad_articles(xquad_dir, lang) for lang in ("zh", "en")}
    docs: list[tuple[str, str, str]] = []
    questions: dict[str, list[tuple[str, str, str]]] = {"en→zh": [], "zh→en": []}
    train = [a for a in range(len(files["zh"])) if evaluation.xquad_split(a) == "train"]
    for n, a in enumerate(train):
        doc_lang, q_lang = ("zh", "en") if n % 2 == 0 else ("en", "zh")
        direction = f"{q_lang}→{doc_lang}"
        for p, paragraph in enumerate(files[doc_lang][a]["paragraphs"]):
            doc_id = f"{doc_lang}-{a:02d}-{p}"
            docs.append((doc_id, files[doc_lang][a]["title"].replace("_", " "), paragraph["context"]))
            for qa in files[q_lang][a]["paragraphs"][p]["qas"]:
                questions[direction].append((qa["id"], qa["question"], doc_id))
    for direction, qs in questions.items():
        step = max(1, len(qs) // per_direction)
        questions[direction] = qs[::step][:per_direction]
    return docs, questions


def _publish(container: Any, docs: list[tuple[str, str, str]]) -> tuple[str, str, Any]:
    from knowledge_core.domain.models import (
        AgentDefinition,
        Document,
        DocumentAcl,
        Principal,
        SourceDefinition,
    )

    run = uuid.uuid4().hex[:8]
    source = SourceDefinition.model_validate({"id": f"doors-{run}", "version": "1", "topK": 10})
    agent = AgentDefinition.model_validate(
        {
            "id": f"doors-agent-{run}",
            "version": "1",
            "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
            "allowedKnowledge": [{"id": source.id, "version": "1"}],
            "knowledgeRouting": {
                "mode": "AUTO",
                "topK": 3,
                "rerank": "NONE",
                "maxContextChars": 65536,
                "sourceMaxChars": 65536,
                "maxRetrievals": 64,
                "rules": [{"knowledge": {"id": source.id, "version": "1"}, "always": True}],
            },
        }
    )
    route = f"doors-{run}"
    container.admin.publish_source(source)
    container.admin.publish_agent(agent)
    container.admin.set_workspace(route, agent.key)
    for i in range(0, len(docs), 50):
        container.admin.put_documents(
            [
                Document(source_key=source.key, doc_id=d, title=t, body=b, acl=DocumentAcl(tenant="eval"))
                for d, t, b in docs[i : i + 50]
            ]
        )
    principal = Principal(client_id="doors", session_id=run, subject="eval", tenant="eval", routes=[route])
    return route, agent.key, principal


def _ref_doc(container: Any, principal: Any, route: str, ref: str, run_id: str | None = None) -> str:
    from knowledge_core.codec import identity_digest

    return container.codec.open_ref(ref, identity=identity_digest(principal, route, run_id)).doc_id


def doors(container: Any, route: str, agent: str, principal: Any, query: str, n: int) -> dict[str, list[str]]:
    """The top 3 documents of each door for one question."""
    from knowledge_core.domain.tool_wire import parse_envelope
    from knowledge_core.domain.turn_wire import TurnRequest
    from knowledge_core.domain.wire import SearchRequest
    from knowledge_core.mcp_server import ServiceDoor

    hints = container.knowledge.search(principal, route, SearchRequest(query=query, limit=3)).wire()
    mcp = ServiceDoor(container.knowledge, principal, route).search(SearchRequest(query=query, limit=3))
    turn = container.turns.start(principal, route, TurnRequest(turn_id=f"t-{n}", message=query)).wire()

    def tool(operation: str) -> list[str]:
        invocation = {
            "tenant": "eval",
            "app": "doors",
            "subject": "eval",
            "agent": agent,
            "invocation_id": f"{operation}-{n}",
            "trusted_context": {},
        }
        envelope = {"operation": operation, "invocation": invocation, "arguments": {"query": query}}
        result = container.tools.call(parse_envelope(envelope)).wire()
        return [r["source"]["docId"] for r in result.get("references", [])][:3]

    return {
        "search": [_ref_doc(container, principal, route, h["ref"]) for h in hints["hints"]],
        "mcp": [_ref_doc(container, principal, route, h["ref"]) for h in mcp["hints"]],
        "turn inline": [
            _ref_doc(container, principal, route, k["ref"], turn["run_id"])
            for k in turn["context"]["knowledge"]
        ][:3],
        "tool": tool("knowledge_search"),
        "startup": tool("startup"),
        "eval": [doc_id for _, doc_id, _ in container.knowledge.rank(principal, route, query, 3)],
    }


def run_backend(args: argparse.Namespace, backend: str, docs: list, questions: dict) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kb-doors-") as tmp:
        semantic = evaluation.Semantic(model_dir=args.model_dir, cache=str(Path(tmp) / "vectors.sqlite3"))
        container = evaluation.build_container(
            backend, Path(tmp), args.opensearch_url, semantic=semantic, lexicon=args.lexicon_dir
        )
        if backend == "opensearch":
            container.admin.prepare_search()
        started = time.perf_counter()
        route, agent, principal = _publish(container, docs)
        ingest_s = time.perf_counter() - started
        table: dict[str, dict[str, float]] = {}
        disagreements = 0
        n = 0
        for direction, qs in questions.items():
            hits = dict.fromkeys(DOORS, 0)
            for _, text, relevant in qs:
                n += 1
                found = doors(container, route, agent, principal, text, n)
                disagreements += len({tuple(v) for v in found.values()}) > 1
                for door, ids in found.items():
                    hits[door] += relevant in ids
            table[direction] = {door: round(hits[door] / len(qs), 4) for door in DOORS}
        if backend == "opensearch":
            container.backend.drop_indices()
        return {
            "r_at_3": table,
            "questions_with_disagreeing_doors": disagreements,
            "ingest_s": round(ingest_s, 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", nargs="+", default=["sqlite"], choices=["sqlite", "opensearch"])
    parser.add_argument("--opensearch-url", default=os.environ.get("OPENSEARCH_URL"))
    parser.add_argument("--embedding-model", default="auto")
    parser.add_argument("--lexicon")
    parser.add_argument("--per-direction", type=int, default=120)
    parser.add_argument("--xquad-dir", default=str(evaluation.XQUAD_DIR))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    args.model_dir, ranking = models.resolve(args.embedding_model)
    if args.model_dir is None:
        raise SystemExit(f"bench/doors_xquad.py needs the embedding models: {ranking}")
    if args.lexicon:
        os.environ["KB_LEXICON_DIR"] = args.lexicon
    args.lexicon_dir, translation = models.resolve_lexicon(True)
    docs, questions = mixed_corpus(Path(args.xquad_dir), args.per_direction)
    print(f"{len(docs)} documents; {', '.join(f'{d}: {len(q)}' for d, q in questions.items())} questions")
    print(f"ranking: {ranking}; query translation: {translation}")
    results = {b: run_backend(args, b, docs, questions) for b in args.backend}
    print(f"\n| backend | direction | {' | '.join(DOORS)} |\n|---|---|{'---|' * len(DOORS)}")
    for backend, result in results.items():
        for direction, row in result["r_at_3"].items():
            print(f"| {backend} | {direction} | {' | '.join(f'{row[d]:.3f}' for d in DOORS)} |")
    for backend, result in results.items():
        print(f"{backend}: questions whose doors disagree: {result['questions_with_disagreeing_doors']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
