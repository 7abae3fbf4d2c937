"""The agent tool's first reference under `knowledgeRouting.rerank` NONE and LEXICAL (SPEC §3.5), on every
`kb eval` collection: is the first reference a relevant document, are any of the first three, and how many
references a call returns. Both agents call the same ingested source in the same run, so only the rerank
differs. `kb eval --collection xquad-long[-train] --tool-rerank …` measures the long-document figures
(does the reference *contain* the answer); this measures the paragraph and abstract collections, among
them the cross-lingual ones, where an answer in the other language shares few of the question's words.

    python bench/tool_rerank.py --collection demo-zh --collection xquad-mixed-train

Results: bench/results/tool_rerank.json (and a table on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src")]

from kb_cli.eval_answers import _tool_call  # noqa: E402
from kb_cli.evaluation import (  # noqa: E402
    add_run_arguments,
    embedding_from,
    fresh_container,
    ingest,
    lexicon_from,
    load_collection,
)

RERANKS = ("NONE", "LEXICAL")


def publish_tool_agent(container: Any, source_key: str, rerank: str) -> str:
    """An AUTO agent that always selects the collection's source (routing defaults but `rerank`)."""
    from knowledge_core.domain.models import AgentDefinition

    source_id, _, version = source_key.partition("@")
    agent = AgentDefinition.model_validate(
        {
            "id": f"tool-{rerank.lower()}-{uuid.uuid4().hex[:8]}",
            "version": "1",
            "systemPrompt": "evaluation",
            "modelProfile": {"candidates": [{"model": "eval", "toolCalling": True}]},
            "allowedKnowledge": [{"id": source_id, "version": version}],
            "knowledgeRouting": {
                "mode": "AUTO",
                "rerank": rerank,
                "rules": [{"knowledge": {"id": source_id, "version": version}, "always": True}],
            },
        }
    )
    container.admin.publish_agent(agent)
    return agent.key


def measure(name: str, args: argparse.Namespace, semantic: Any, lexicon: str | None) -> dict[str, Any]:
    collection = load_collection(
        name, limit=args.limit, scifact_zip=Path(args.scifact_zip), xquad_dir=Path(args.xquad_dir)
    )
    with fresh_container("sqlite", None, semantic, lexicon) as container:
        ingested = ingest(collection, container, progress=not args.no_progress)
        agents = {r: publish_tool_agent(container, ingested.source_key, r) for r in RERANKS}
        out: dict[str, Any] = {"collection": name, "queries": len(collection.queries)}
        for rerank, agent in agents.items():
            first = at3 = refs = 0
            changed: list[str] = []
            for n, query in enumerate(collection.queries):
                docs = [r["source"]["docId"] for r in _tool_call(container, agent, query.text, n)]
                first += bool(docs) and query.relevant.get(docs[0], 0) > 0
                at3 += any(query.relevant.get(d, 0) > 0 for d in docs[:3])
                refs += len(docs)
                changed.append(docs[0] if docs else "")
            q = len(collection.queries)
            out[rerank] = {"ref@1": first / q, "ref@3": at3 / q, "refs": refs / q, "first": changed}
        out["first_differs"] = sum(
            a != b for a, b in zip(out["NONE"]["first"], out["LEXICAL"]["first"], strict=True)
        )
        for rerank in RERANKS:
            del out[rerank]["first"]
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", action="append", dest="collections", required=True)
    add_run_arguments(parser)
    args = parser.parse_args()
    from knowledge_core.observability import logger

    logger.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"))  # as `kb eval`: no event per call
    semantic = embedding_from(args)
    lexicon = lexicon_from(args)
    rows = [measure(name, args, semantic, lexicon) for name in args.collections]
    print(f"{'collection':<24} {'q':>5}  NONE ref@1 / ref@3 / refs   LEXICAL ref@1 / ref@3 / refs   differ")
    for r in rows:
        a, b = r["NONE"], r["LEXICAL"]
        print(
            f"{r['collection']:<24} {r['queries']:>5}  {a['ref@1']:.4f} / {a['ref@3']:.4f} / {a['refs']:.2f}"
            f"         {b['ref@1']:.4f} / {b['ref@3']:.4f} / {b['refs']:.2f}   {r['first_differs']}"
        )
    path = Path(args.out) if args.out else ROOT / "bench" / "results" / "tool_rerank.json"
    path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
