"""OpenSearch backend on the real node (`kb services`): bulk ingest throughput (passages/s) of >= 10,000
passages of SciFact abstracts (two sources), then warm search latency through the service
(`KnowledgeService.search`: scope, plan, one `_msearch`, merge, refs, byte budget) against the raw `_msearch`
request it sends (same body, same client), interleaved in the same run.

Target: service p50 <= 1.3x the raw `_msearch`. Uses its own index prefix and DynamoDB table,
dropped at the end; the shared services are started if needed and left running.

    .venv/bin/python bench/opensearch_bench.py [--passages 10000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import re
import sys
import time
import uuid
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")

from _util import interleaved, percentile, report  # noqa: E402
from knowledge_core.bootstrap import Container  # noqa: E402
from knowledge_core.domain.models import (  # noqa: E402
    AgentDefinition,
    Document,
    DocumentAcl,
    Principal,
    SourceDefinition,
)
from knowledge_core.domain.passages import split_passages  # noqa: E402
from knowledge_core.domain.router import plan_search  # noqa: E402
from knowledge_core.domain.wire import SearchRequest  # noqa: E402
from knowledge_core.ports import SourceQuery, SystemClock  # noqa: E402
from knowledge_core.settings import Settings  # noqa: E402

from kb_cli import supervisor  # noqa: E402

SCIFACT = Path(os.environ.get("KB_SCIFACT_ZIP", "/work/shared/eval/scifact/scifact.zip"))
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")
ROUTE = "bench"
PRINCIPAL = Principal(client_id="bench", session_id="bench", subject="bench", tenant="bench", routes=[ROUTE])


def scifact() -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(title, sentences) of every abstract, and the training claims as queries."""
    with zipfile.ZipFile(SCIFACT) as zf:
        corpus = csv.DictReader(io.TextIOWrapper(zf.open("corpus_train.csv"), encoding="utf-8"))
        abstracts = [(row["title"], [a or b for a, b in _QUOTED.findall(row["abstract"])]) for row in corpus]
        claims = csv.DictReader(io.TextIOWrapper(zf.open("claims_train.csv"), encoding="utf-8"))
        queries = [row["claim"] for row in claims]
    return [(t, s) for t, s in abstracts if s], queries


def documents(keys: list[str], target_passages: int) -> tuple[list[Document], int]:
    """Abstracts as documents (two sentences a paragraph), then recombined abstracts, alternating sources,
    until `target_passages` passages (counted with the backend's own splitter)."""
    abstracts, _ = scifact()
    rng = random.Random(7)
    docs: list[Document] = []
    passages = 0
    n = 0
    while passages < target_passages:
        if n < len(abstracts):
            title, sentences = abstracts[n]
        else:  # recombine: the title of one abstract over sentences drawn from three others
            title = rng.choice(abstracts)[0]
            sentences = [s for _ in range(3) for s in rng.choice(abstracts)[1]]
        body = "\n\n".join(" ".join(sentences[i : i + 2]) for i in range(0, len(sentences), 2))
        doc = Document(
            source_key=keys[n % len(keys)],
            doc_id=f"sf-{n}",
            title=title[:4096],
            body=body,
            acl=DocumentAcl(tenant="bench"),
        )
        docs.append(doc)
        passages += len(split_passages(body))
        n += 1
    return docs, passages


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=250, help="documents per put_documents call")
    args = parser.parse_args()

    endpoints = supervisor.ensure_running(Path(os.environ.get("KB_SERVICES_STATE", ".kb-state")))
    tag = uuid.uuid4().hex[:8]
    settings = Settings(
        state_backend="dynamodb",
        dynamodb_endpoint=endpoints["DYNAMODB_ENDPOINT"],
        search_backend="opensearch",
        opensearch_url=endpoints["OPENSEARCH_URL"],
        opensearch_index_prefix=f"kbbench-{tag}",
        table_name=f"kbbench-{tag}",
        token_secret="bench-secret-" + tag * 4,
    )
    container = Container(settings=settings, clock=SystemClock())
    container.table.create()
    backend = container.backend
    try:
        keys = [f"scifact-{i}@1.0.0" for i in range(2)]
        for key in keys:
            id_, version = key.split("@")
            container.admin.publish_source(
                SourceDefinition.model_validate({"id": id_, "version": version, "topK": 5, "minScore": 0})
            )
        container.admin.publish_agent(
            AgentDefinition.model_validate(
                {
                    "id": "bench-agent",
                    "version": "1.0.0",
                    "modelProfile": {"candidates": [{"model": "m"}]},
                    "allowedKnowledge": [{"id": k.split("@")[0], "version": "1.0.0"} for k in keys],
                }
            )
        )
        container.admin.set_workspace(ROUTE, "bench-agent@1.0.0")

        docs, passages = documents(keys, args.passages)
        backend.ensure_indices()
        started = time.perf_counter()
        for i in range(0, len(docs), args.batch):
            container.admin.put_documents(docs[i : i + args.batch])
        elapsed = time.perf_counter() - started
        print(
            f"bulk ingest: {len(docs)} documents, {passages} passages in {elapsed:.1f} s "
            f"= {passages / elapsed:,.0f} passages/s ({len(docs) / elapsed:,.0f} docs/s, "
            f"batches of {args.batch} docs, refresh=wait_for)"
        )

        _, claims = scifact()
        queries = random.Random(11).sample(claims, 64)
        scope = container.scopes.resolve(ROUTE)
        viewer = PRINCIPAL.viewer
        timeout = float(scope.routing.source_timeout_seconds)
        bodies = {}
        for q in queries:
            planned = plan_search(scope, q)
            sq = [
                SourceQuery(p.key, p.source.definition.top_k, p.source.definition.min_score, timeout)
                for p in planned
            ]
            bodies[q] = (backend.search_body(sq, q, viewer), len(sq))
        assert all(n == len(keys) for _, n in bodies.values()), "every query searches both sources"
        statuses = {
            container.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query=q)).wire()["status"]
            for q in queries
        }
        assert statuses == {"ok"}, statuses
        cycle = iter(range(1 << 30))
        current = {"q": queries[0]}

        def service() -> object:
            current["q"] = queries[next(cycle) % len(queries)]
            return container.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query=current["q"])).wire()

        def raw() -> object:  # the same query's `_msearch`, as the service sent it
            return backend.msearch(bodies[current["q"]][0], timeout + 1.0)

        subject, baseline = interleaved(service, raw, args.rounds, warmup=30)
        result = report(
            "service search (2 sources)", subject, baseline, "raw _msearch (same body)", "target <= 1.30x"
        )
        print(
            f"raw _msearch p95 {percentile(baseline, 95) * 1000:.2f} ms; service p95 "
            f"{percentile(subject, 95) * 1000:.2f} ms; overhead p50 "
            f"{(percentile(subject, 50) - percentile(baseline, 50)) * 1000:.2f} ms"
        )
        return 0 if result["ratio_p50"] <= 1.3 else 1
    finally:
        backend.drop_indices()  # type: ignore[attr-defined]
        container.table.delete()


if __name__ == "__main__":
    sys.exit(main())
