"""The embedded default under use (issue: embedded state), ratios against baselines of the same run:

1. one `knowledge_search` tool call on the embedded default (SQLite state + SQLite FTS5), in-process
   through the real handler and through `kb serve`'s Lambda Invoke API, each interleaved with the raw
   backend query it makes — target <= 3x;
2. flat with use: p50 of tool calls 1-100 vs 9,901-10,000 through `kb serve` (fresh invocation ids each
   call, as the agent runtime sends them) — target <= 1.2x;
3. DynamoDB round trips per tool call (cold process, warm) counted on the adapter — targets <= 4 / <= 3;
4. 16 concurrent HTTP clients on `kb serve` search for 20 s — target p99 <= 5x p50, 0 errors.

    python bench/state_bench.py [--calls 10000] [--seconds 20] [--clients 16]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "AgentKnowledgeBench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench._util import interleaved, percentile, report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EVENT = json.loads((ROOT / "events" / "agent_tools" / "knowledge_search.json").read_text(encoding="utf-8"))
INVOKE = "/2015-03-31/functions/AgentToolsFunction/invocations"
QUERIES = [
    "设备安装规范",
    "网关离线怎么排查",
    "firmware upgrade 固件升级",
    "退款政策 refund",
    "SSO SAML setup",
]


def tool_event(n: int) -> dict:
    """The example three-level event with fresh invocation ids (a new tree every call)."""
    event = json.loads(json.dumps(EVENT))
    inv = event["invocation"]
    tree = uuid.uuid4().hex[:12]
    inv["ancestors"][0]["invocation_id"] = f"root-{tree}"
    inv["ancestors"][1]["invocation_id"] = f"mid-{tree}"
    inv["invocation_id"] = f"leaf-{tree}"
    event["arguments"]["query"] = QUERIES[n % len(QUERIES)]
    return event


class Client:
    """One keep-alive HTTP connection, as boto3 and agent hosts keep theirs (one per thread)."""

    def __init__(self, base_url: str, operator: str | None = None) -> None:
        self._operator = operator  # kb serve's operator credential, for its Invoke API (G-LOCAL)
        parts = urllib.parse.urlsplit(base_url)
        self._conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)

    def post(self, path: str, body: dict, token: str | None = None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self._operator:
            headers["X-Kb-Operator"] = self._operator
        try:
            self._conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
            resp = self._conn.getresponse()
            return resp.status, resp.read()
        except (http.client.HTTPException, OSError):
            self._conn.close()  # reconnect on the next request
            raise


class Serve:
    """`kb serve` on a free port over a fresh --state, stopped on exit."""

    def __init__(self, state: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state / "serve.log"
        kb = Path(sys.executable).parent / "kb"
        self.proc = subprocess.Popen(
            [str(kb), "serve", "--state", str(state), "--port", str(self.port), "--embedding-model", "none"],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 120
        while "listening on" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.log.read_text())
            time.sleep(0.1)
        self.token = (state / "demo-token").read_text().strip()
        self.operator = (state / "operator-credential").read_text().strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def raw_query(state: Path) -> Any:
    """The backend query one tool call makes (demo-docs, top 5), on the same index file."""
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Viewer
    from knowledge_core.ports import SourceQuery

    backend = SqliteFtsBackend(state / "search.sqlite3")
    viewer = Viewer(tenant="default", subject="demo-user")
    counter = iter(range(10**9))

    def query() -> None:
        text = QUERIES[next(counter) % len(QUERIES)]
        (result,) = backend.search([SourceQuery("demo-docs@1.0.0", 5, 0.0, 15.0)], text, viewer)
        assert result.hits

    return query


def bench_tool_call(state: Path, serve: Serve, rounds: int) -> list[dict]:
    from kb_cli.gateway import Handlers
    from kb_cli.main import local_container

    local_container(state)  # this process's handlers on the same files kb serve uses
    handlers = Handlers()
    baseline = raw_query(state)
    counter = iter(range(10**9))

    def in_process() -> None:
        result = handlers.invoke("AgentToolsFunction", tool_event(next(counter)))
        assert result.get("references"), result

    client = Client(serve.url, serve.operator)

    def over_http() -> None:
        status, raw = client.post(INVOKE, tool_event(next(counter)))
        assert status == 200 and b'"references"' in raw, raw[:200]

    out = []
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):  # the handler's EMF metrics
        s, b = interleaved(in_process, baseline, rounds)
    out.append(report("tool call, handler in-process", s, b, "raw backend query", "(target <= 3x)"))
    s, b = interleaved(over_http, baseline, rounds)
    out.append(report("tool call, kb serve Invoke API", s, b, "raw backend query", "(target <= 3x)"))
    return out


def bench_flat(state: Path, serve: Serve, calls: int) -> dict:
    """Tool calls 1-100 vs the last 100 of `calls`, each window interleaved with the raw backend query:
    the plain ratio, and the ratio of the two windows' tool/raw ratios (the same-run baseline absorbs a
    change of machine load between the windows, which are a minute or more apart)."""
    client = Client(serve.url, serve.operator)
    baseline = raw_query(state)
    counter = iter(range(10**9))

    def call() -> None:
        status, raw = client.post(INVOKE, tool_event(next(counter)))
        assert status == 200 and b'"references"' in raw, raw[:200]

    first, first_raw = interleaved(call, baseline, 100, warmup=0)
    for _ in range(calls - 200):
        call()
    last, last_raw = interleaved(call, baseline, 100, warmup=0)
    label = f"tool calls {calls - 99}-{calls} (kb serve)"
    plain = report(label, last, first, "tool calls 1-100", "(target <= 1.2x)")
    early, late = percentile(_per(first, first_raw), 50), percentile(_per(last, last_raw), 50)
    print(
        f"  per raw backend query of the same moment: calls 1-100 p50 {early:.2f}x, calls "
        f"{calls - 99}-{calls} p50 {late:.2f}x, ratio {late / early:.2f}x (target <= 1.2x)"
    )
    return {**plain, "per_raw_early": early, "per_raw_late": late, "per_raw_ratio": late / early}


def _per(calls: list[float], raws: list[float]) -> list[float]:
    """Each call's time in units of the raw query measured right after it."""
    return [c / r for c, r in zip(calls, raws, strict=True)]


def bench_round_trips() -> dict:
    """Botocore calls per tool call on the DynamoDB adapter (moto): a cold process, then warm ones."""
    sys.path[:0] = [str(ROOT)]
    from knowledge_core.bootstrap import Container
    from knowledge_core.domain.tool_wire import parse_envelope
    from knowledge_core.settings import Settings

    from kb_cli import demo
    from tests.dynamo_tables import moto_table

    with moto_table() as table, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            state_backend="dynamodb",
            search_backend="sqlite",
            sqlite_path=f"{tmp}/kb.sqlite3",
            token_secret="bench-secret-0123456789abcdef",
            table_name=table.name,
        )
        demo.seed(Container(settings, state=table.stores()), with_token=False)
        calls: list[str] = []
        table.client.meta.events.register(
            "before-call.dynamodb.*", lambda model, **_: calls.append(model.name)
        )
        container = Container(settings, state=table.stores())
        counts = []
        for n in range(6):
            start = len(calls)
            result = container.tools.call(parse_envelope(tool_event(n))).wire()
            assert result.get("references"), result
            counts.append(calls[start:])
    cold, warm = counts[0], counts[1:]
    print(f"DynamoDB round trips per tool call: cold {len(cold)} ({', '.join(cold)}) (target <= 4)")
    print(f"  warm {[len(c) for c in warm]} ({', '.join(warm[-1])}) (target <= 3)")
    return {"cold": len(cold), "warm_max": max(len(c) for c in warm), "warm_calls": warm[-1]}


def bench_load(serve: Serve, clients: int, seconds: float) -> dict:
    path = "/agent-api/v1/workspaces/demo/knowledge/search"
    warm = [Client(serve.url) for _ in range(clients)]
    with ThreadPoolExecutor(max_workers=clients) as pool:  # start every instance first (no cold starts)
        list(pool.map(lambda c: c.post(path, {"query": "网关"}, serve.token), warm))
    samples: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        n = k
        conn = Client(serve.url)
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                status, raw = conn.post(path, {"query": QUERIES[n % len(QUERIES)], "limit": 3}, serve.token)
                ok = status == 200 and b'"status":"ok"' in raw
                problem = None if ok else f"{status} {raw[:120]!r}"
            except OSError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            elapsed = time.perf_counter() - t0
            with lock:
                samples.append(elapsed)
                if problem:
                    errors.append(problem)
            n += clients

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p50, p99 = percentile(samples, 50) * 1000, percentile(samples, 99) * 1000
    print(
        f"kb serve search, {clients} clients x {seconds:.0f} s: {len(samples)} requests "
        f"({len(samples) / seconds:.0f}/s), p50 {p50:.1f} ms, p99 {p99:.1f} ms, p99/p50 {p99 / p50:.2f}x "
        f"(target <= 5x), errors {len(errors)} (target 0)"
    )
    for problem in errors[:5]:
        print(f"  error: {problem}")
    return {"requests": len(samples), "p50_ms": p50, "p99_ms": p99, "errors": len(errors)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="interleaved tool calls per path")
    parser.add_argument("--calls", type=int, default=10_000, help="sequential tool calls for flatness")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    results: dict[str, Any] = {"round_trips": bench_round_trips()}
    with tempfile.TemporaryDirectory(prefix="kb-state-bench-") as tmp:
        state = Path(tmp)
        serve = Serve(state)
        try:
            results["tool_call"] = bench_tool_call(state, serve, args.rounds)
            results["load"] = bench_load(serve, args.clients, args.seconds)
            results["flat"] = bench_flat(state, serve, args.calls)
        finally:
            serve.close()
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "state_bench.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
