"""Cost of one `knowledge_search` call (router + fusion + ledger + live checks) beside the raw backend
query it wraps, measured interleaved in the same run; and ledger transactions/s with 16 callers
contending on one root invocation.

    python bench/tools_bench.py                 # embedded: SQLite state + SQLite FTS5
    python bench/tools_bench.py --real          # also the real DynamoDB-API server (kb services)
    python bench/tools_bench.py --embedding-model DIR --lexicon DIR   # default ranking: hybrid + translation

The raw backend query is the one the call's retrieval step sends (`SearchBackend.search` with the same
source query and the same analysed query: with models, BM25 and dense candidates); the target is
a tool call <= 3x it with the default ranking."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from knowledge_core.bootstrap import Container
from knowledge_core.domain.budget import ChainLink, Limits
from knowledge_core.domain.fusion import Candidate, RankedList, fuse
from knowledge_core.domain.models import Viewer
from knowledge_core.domain.router import plan_tool
from knowledge_core.domain.scope import KnowledgeScope
from knowledge_core.domain.tool_wire import parse_envelope
from knowledge_core.ports import SystemClock
from knowledge_core.settings import Settings

QUERIES = [
    "网关离线怎么排查",
    "设备安装规范",
    "how do I reset MFA",
    "退款政策 refund",
    "firmware upgrade 固件升级",
    "webhook signature verification",
    "数据保留多久",
    "SSO SAML setup",
]


class TimedLedger:
    """Wraps a ledger and accumulates the seconds spent in it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed


def _container(
    tmp: Path, dynamodb_endpoint: str | None, model_dir: str | None = None, lexicon_dir: str | None = None
) -> Container:
    settings = Settings(
        embedding_model_dir=model_dir,
        embedding_cache=str(tmp / "vectors.sqlite3") if model_dir else None,
        query_translation=lexicon_dir is not None,
        lexicon_dir=lexicon_dir,
        state_backend="dynamodb" if dynamodb_endpoint else "sqlite",
        state_path=str(tmp / "state.sqlite3"),
        search_backend="sqlite",
        dynamodb_endpoint=dynamodb_endpoint,
        sqlite_path=str(tmp / "kb.sqlite3"),
        token_secret="bench-secret-0123456789abcdef",
        table_name=f"kb-bench-{uuid.uuid4().hex[:8]}",
        registry_cache_seconds=60,
    )
    if dynamodb_endpoint:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    container = Container(settings=settings, clock=SystemClock())
    if dynamodb_endpoint:
        container.table.create()
    from kb_cli import demo

    demo.seed(container, with_token=False)
    return container


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9)]
    return f"p50 {statistics.median(ordered) * 1000:7.2f} ms  p90 {p90 * 1000:7.2f} ms"


def bench_calls(container: Container, rounds: int, label: str) -> None:
    from knowledge_core.services.tools import ToolsService

    ledger = TimedLedger(container.ledger)
    tools = ToolsService(container.scopes, container.backend, ledger, container.clock, container.retrieval)
    backend = container.backend
    agent = container.scopes.agent("demo-router@1.0.0")
    assert agent is not None
    viewer = Viewer(tenant="default", subject="demo-user")
    state = {"n": 0, "root": ""}

    def envelope(query: str) -> Any:
        n = state["n"]
        if n % 3 == 0:  # the root agent (demo-ondemand) allows 3 requests per source
            state["root"] = f"root-{uuid.uuid4().hex[:10]}"
        state["n"] += 1
        return parse_envelope(
            {
                "operation": "knowledge_search",
                "arguments": {"query": query},
                "invocation": {
                    "tenant": "default",
                    "app": "bench",
                    "subject": "demo-user",
                    "agent": "demo-router@1.0.0",
                    "invocation_id": f"leaf-{n}",
                    "ancestors": [{"invocation_id": state["root"], "agent": "demo-ondemand@1.0.0"}],
                    "trusted_context": {"projectType": "monitor"},
                },
            }
        )

    retrieval = container.retrieval
    analysed = {q: retrieval.analyse(q) for q in QUERIES}  # the query cache's, as in a warm call
    queries = {q: [retrieval.source_query("demo-docs@1.0.0", 5, 0.0, 15.0, a)] for q, a in analysed.items()}
    tool_s, raw_s, ledger_s, pure_s = [], [], [], []
    for i in range(rounds + 10):
        query = QUERIES[i % len(QUERIES)]
        env = envelope(query)
        ledger.seconds = 0.0
        t0 = time.perf_counter()
        result = tools.call(env).wire()
        t1 = time.perf_counter()
        assert "error" not in result, result
        (raw,) = backend.search(queries[query], analysed[query], viewer)
        t2 = time.perf_counter()
        # The pure part alone: plan + fuse over the raw hits just fetched.
        scope = KnowledgeScope("", agent, container.state.registry.get_sources(agent.allowed_keys))
        t3 = time.perf_counter()
        plan_tool(scope, query, {"projectType": "monitor"})
        fuse(
            [
                RankedList(
                    "demo-docs@1.0.0",
                    [
                        Candidate(h.source_key, h.doc_id, h.title, h.revision, h.score, h.passage)
                        for h in raw.hits
                    ],
                    5,
                )
            ],
            query=query,
            top_k=5,
            rerank="LEXICAL",
        )
        t4 = time.perf_counter()
        if i >= 10:  # warm-up
            tool_s.append(t1 - t0)
            raw_s.append(t2 - t1)
            ledger_s.append(ledger.seconds)
            pure_s.append(t4 - t3)
    med = statistics.median
    print(f"\n[{label}] knowledge_search, {rounds} calls interleaved with the raw backend query")
    print(f"  ranking: {retrieval.ranking_name}")
    print(f"  raw backend query (sqlite FTS5, 1 source) {_ms(raw_s)}")
    raw = med(raw_s)
    print(f"  knowledge_search total                    {_ms(tool_s)}   ratio {med(tool_s) / raw:6.1f}x raw")
    share = med(ledger_s) / med(tool_s)
    print(f"    of which ledger (open+charge+cite+read) {_ms(ledger_s)}   {share:6.1%} of call")
    print(f"    router + fusion (pure)                  {_ms(pure_s)}   ratio {med(pure_s) / raw:6.2f}x raw")
    rest = [t - lg - r for t, lg, r in zip(tool_s, ledger_s, raw_s, strict=True)]
    print(f"    rest (registry read, live doc checks, backend, events) p50 {med(rest) * 1000:7.2f} ms")
    stats = getattr(container.ledger, "stats", {})
    print(f"  ledger transactions {stats.get('transactions')}  retries {stats.get('retries')}")


def bench_contention(container: Container, callers: int, per_caller: int, label: str) -> None:
    ledger = container.ledger
    root = f"hot-{uuid.uuid4().hex[:8]}"
    big = Limits(10**9, 10**9, 10**9)  # far above the spec caps: measure throughput, not refusals
    root_link = ChainLink(root, "root@1", big)
    links = [[root_link, ChainLink(f"c{n}", "child@1", big)] for n in range(callers)]
    stats = getattr(ledger, "stats", None)
    before = dict(stats or {"retries": 0})
    barrier = threading.Barrier(callers + 1)

    def charge(n: int, i: int) -> None:
        ids = [link.invocation_id for link in links[n]]
        snapshot = ledger.open_chain(root, ids)
        ledger.charge_retrievals(snapshot, links[n], [f"s{i % 4}@1"], time.time())

    def caller(n: int) -> None:
        barrier.wait()
        for i in range(per_caller):
            charge(n, i)

    with ThreadPoolExecutor(max_workers=callers) as pool:
        futures = [pool.submit(caller, n) for n in range(callers)]
        barrier.wait()
        t0 = time.perf_counter()
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - t0
    total = callers * per_caller
    entry = ledger.entry(root, root)
    assert entry is not None and entry.retrievals == total
    retries = (stats or before)["retries"] - before["retries"]
    print(
        f"\n[{label}] ledger contention: {callers} callers x {per_caller} charges on one root "
        f"(read + 2-item write each)"
    )
    print(
        f"  {total / elapsed:8.1f} charges/s   {elapsed / total * 1000:6.2f} ms each   "
        f"retries {retries} ({retries / total:.2f} per commit)"
    )
    single_t0 = time.perf_counter()
    for i in range(per_caller * 2):
        charge(0, i)
    single = (time.perf_counter() - single_t0) / (per_caller * 2)
    print(
        f"  uncontended single caller: {1 / single:8.1f} charges/s ({single * 1000:.2f} ms each); "
        f"16-way / 1-way throughput ratio {(total / elapsed) * single:5.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=120)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--per-caller", type=int, default=20)
    parser.add_argument("--real", action="store_true", help="also against the real DynamoDB-API server")
    parser.add_argument("--embedding-model", help="a model directory: rank hybrid (the default ranking)")
    parser.add_argument("--lexicon", help="the zh<->en lexicon directory: translate queries")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-tools-bench-") as tmp:
        (Path(tmp) / "embedded").mkdir()
        embedded = _container(Path(tmp) / "embedded", None, args.embedding_model, args.lexicon)
        bench_calls(embedded, args.rounds, "embedded: sqlite state + sqlite FTS5")
        bench_contention(embedded, args.callers, args.per_caller, "embedded: sqlite state")
        if args.real:
            from kb_cli import supervisor

            endpoint = supervisor.ensure_running(Path(os.environ.get("KB_SERVICES_STATE", ".kb-state")))[
                "DYNAMODB_ENDPOINT"
            ]
            (Path(tmp) / "real").mkdir()
            real = _container(Path(tmp) / "real", endpoint, args.embedding_model, args.lexicon)
            bench_calls(real, args.rounds, f"real DynamoDB-API server at {endpoint} + sqlite")
            bench_contention(real, args.callers, args.per_caller, "real DynamoDB-API server")


if __name__ == "__main__":
    main()
