"""Search latency as the corpus grows: 10k / 100k / 1M passages x ranking (BM25, hybrid with the
synthetic vectors of bench/scale_corpus.py), each row beside the raw storage query of the same shape,
measured interleaved in the same run.

Per size and backend (`--backend sqlite`; the OpenSearch rows plug in as `--backend opensearch`, see
`BACKENDS`): the index is built once and cached under --cache (the corpus is a pure function of its seed),
through the backend's own ingest path (`put_documents`, whose rate is reported) plus the synthetic vectors
written beside the passages (embedding a million passages on 2 cores is impossible). Then:
- in-process: `backend.search` (BM25: the source's top_k; hybrid: the retrieval step's depths, pool 50,
  dense 50) interleaved with the raw FTS5 top-k (`bm25()` of `MATCH ?` under `ORDER BY … LIMIT n`, n as
  the first fetch);
- through `kb serve` (HTTP, real handlers, BM25: the server embeds queries with its own model, which
  knows no synthetic vector): 200 sequential searches after a warm-up, interleaved with the raw top-k;
- ingest rate (passages/s), index size, RSS of this process and of kb serve.

    nice -n 10 python bench/scale_bench.py --sizes 10000,100000          # the 10k and 100k rows
    nice -n 10 python bench/scale_bench.py --sizes 1000000 --no-serve    # the 1M row (cached build)
    python bench/scale_bench.py --report                                  # JSON -> Markdown + PNG

Results: bench/results/scale.json (rows merged by size/backend/ranking), scale.md, scale.png.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from _util import interleaved, percentile  # noqa: E402
from knowledge_core.adapters.sqlite.driver import sqlite3  # noqa: E402  (the service's own library)
from scale_corpus import MODEL, Corpus  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SOURCE = "demo-docs@1.0.0"  # the demo workspace's source: kb serve searches it with its seeded token
TENANT = "default"
SUBJECT = "demo-user"
SEARCH_PATH = "/agent-api/v1/workspaces/demo/knowledge/search"
BATCH_DOCS = 500
TOP_K = 3  # what a search asks (limit 3, the most a search request may ask)
POOL = DENSE = 50  # the hybrid ranking's depths (domain.hybrid.HybridRanking)


# --- the SQLite index ------------------------------------------------------------------------------
class Serve:
    """`kb serve` on a free port over `state` (BM25: --embedding-model none), stopped by close()."""

    def __init__(self, state: Path, env: dict[str, str] | None = None, log: str = "serve.log") -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = state / log
        kb = Path(sys.executable).parent / "kb"
        cmd = [str(kb), "serve", "--state", str(state), "--port", str(self.port), "--embedding-model", "none"]
        self.proc = subprocess.Popen(
            cmd,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + 600
        while "listening on" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("kb serve did not start: " + self.log.read_text()[-2000:])
            time.sleep(0.2)
        self.token = (state / "demo-token").read_text().strip()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def search(self, query: str) -> None:
        body = json.dumps({"query": query, "limit": TOP_K}).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        try:
            self.conn.request("POST", SEARCH_PATH, body=body, headers=headers)
            resp = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # kb serve drops a connection idle for READ_TIMEOUT_S (30 s), as while the other servers of a
            # comparison start: connect again (a search changes nothing, so sending it twice is harmless).
            self.conn.close()
            self.conn.request("POST", SEARCH_PATH, body=body, headers=headers)
            resp = self.conn.getresponse()
        raw = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"search answered {resp.status}: {raw[:200]!r}")

    def rss_mb(self) -> float:
        """RSS of kb serve and its children (its worker processes)."""
        pids = [str(self.proc.pid)]
        children = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        pids += children.stdout.split()
        total = 0
        for pid in pids:
            status = Path(f"/proc/{pid}/status")
            if status.exists():
                for line in status.read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def build_sqlite(corpus: Corpus, state: Path) -> dict[str, Any]:
    """A kb serve state over the corpus (cached: `build.json` says what it holds). The demo is seeded by a
    first kb serve; the corpus goes through SqliteFtsBackend.put_documents (the service's storage path);
    the synthetic vectors are written beside the passages."""
    marker = state / "build.json"
    if marker.exists():
        built: dict[str, Any] = json.loads(marker.read_text())
        if built.get("passages") == corpus.passages and built.get("seed") == corpus.seed:
            return built
    state.mkdir(parents=True, exist_ok=True)
    Serve(state).close()  # seeds the registry, the demo source and its token
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Document, DocumentAcl

    backend = SqliteFtsBackend(state / "search.sqlite3")
    acl = DocumentAcl(tenant=TENANT)
    vectors_conn = sqlite3.connect(state / "search.sqlite3", isolation_level=None, timeout=60)
    ingest_s = vectors_s = 0.0
    for start in range(0, len(corpus), BATCH_DOCS):
        docs = list(corpus.documents(start, start + BATCH_DOCS))
        t0 = time.perf_counter()
        backend.put_documents(
            [Document(source_key=SOURCE, doc_id=d.doc_id, title=d.title, body=d.body, acl=acl) for d in docs]
        )
        t1 = time.perf_counter()
        _write_vectors(vectors_conn, corpus, docs)
        ingest_s += t1 - t0
        vectors_s += time.perf_counter() - t1
        if start // BATCH_DOCS % 20 == 0:
            print(f"  built {min(start + BATCH_DOCS, len(corpus)) * 10:,} passages", file=sys.stderr)
    vectors_conn.close()
    compacted(backend)  # as the service does once writes are quiet (fts_compaction)
    built = {
        "passages": corpus.passages,
        "seed": corpus.seed,
        "ingest_passages_per_s": corpus.passages / ingest_s,
        "vector_rows_per_s": corpus.passages / vectors_s,
    }
    marker.write_text(json.dumps(built))
    return built


def bulk_sqlite(corpus: Corpus, state: Path) -> dict[str, Any]:
    """The 1M file written directly (the service's ingest would take most of an hour on 2 shared cores):
    the same rows `put_documents` writes — documents, passage ids from the source's range, FTS5 terms —
    with each vocabulary word analysed once (checked against `index_terms` on the first documents)."""
    marker = state / "build.json"
    if marker.exists():
        built: dict[str, Any] = json.loads(marker.read_text())
        if built.get("passages") == corpus.passages and built.get("seed") == corpus.seed:
            return built
    state.mkdir(parents=True, exist_ok=True)
    Serve(state).close()  # seeds the registry, the demo source and its token
    from knowledge_core.adapters.sqlite import candidates
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.analyzer import index_terms
    from knowledge_core.domain.models import DocumentAcl, document_revision
    from knowledge_core.domain.passages import document_passages

    SqliteFtsBackend(state / "search.sqlite3")  # the current layout
    conn = sqlite3.connect(state / "search.sqlite3", isolation_level=None, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    acl = DocumentAcl(tenant=TENANT).model_dump_json()
    terms: dict[str, str] = {}

    def analysed(text: str) -> str:
        out = []
        for word in text.replace(".", " ").split():
            if word not in terms:
                terms[word] = " ".join(index_terms(word))
            if terms[word]:
                out.append(terms[word])
        return " ".join(out)

    t0 = time.perf_counter()
    for start in range(0, len(corpus), BATCH_DOCS * 4):
        docs = list(corpus.documents(start, start + BATCH_DOCS * 4))
        if start == 0:
            assert all(analysed(p) == " ".join(index_terms(p)) for d in docs[:20] for p in d.passages)
            assert all(
                analysed(p.indexed) == " ".join(index_terms(p.indexed))
                for d in docs[:20]
                for p in document_passages(d.body, d.title, None)
            )
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT OR REPLACE INTO documents (source_key, doc_id, title, body, revision, status, acl, "
            "structured_source, updated_at, metadata) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    SOURCE,
                    d.doc_id,
                    d.title,
                    d.body,
                    document_revision(d.title, d.body),
                    "ready",
                    acl,
                    None,
                    0,
                    None,
                )
                for d in docs
            ],
        )
        # The service's own passages (the splitter packs short paragraphs), as put_documents writes them.
        split = {d.doc_id: document_passages(d.body, d.title, None) for d in docs}
        first = candidates.allocate_ids(conn, SOURCE, sum(len(ps) for ps in split.values()))
        rows, fts, vectors = [], [], []
        for d in docs:
            title_terms = analysed(d.title)
            doc_vectors = corpus.vectors_of(d.index)
            for i, passage in enumerate(split[d.doc_id]):
                rows.append((first, SOURCE, d.doc_id, i, passage.text, None, passage.heading_path or None))
                fts.append((first, title_terms, analysed(passage.indexed)))
                vectors.append((first, MODEL, doc_vectors[i].tobytes()))
                first += 1
        conn.executemany("INSERT INTO passage_rows VALUES (?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO passages (rowid, title_terms, body_terms) VALUES (?,?,?)", fts)
        conn.executemany("INSERT INTO passage_vectors VALUES (?,?,?)", vectors)
        conn.execute(
            "INSERT INTO source_versions VALUES (?, 1) "
            "ON CONFLICT(source_key) DO UPDATE SET version = version + 1",
            (SOURCE,),
        )
        conn.execute("COMMIT")
        print(f"  bulk {min(start + BATCH_DOCS * 4, len(corpus)) * 10:,} passages", file=sys.stderr)
    conn.close()
    built = {
        "passages": corpus.passages,
        "seed": corpus.seed,
        "bulk_passages_per_s": corpus.passages / (time.perf_counter() - t0),
    }
    marker.write_text(json.dumps(built))
    return built


def compacted(backend: Any) -> dict[str, Any]:
    """The full-text index compacted as the service does it in the background once writes are quiet or at
    `kb serve` start (adapters/sqlite/fts_compaction.py), waited for: segments before/after and seconds."""
    from knowledge_core.adapters.sqlite.fts_compaction import segment_pages

    before = segment_pages(backend._conn()) or []
    t0 = time.perf_counter()
    backend._compactor.check()
    backend._compactor.idle(3600)
    after = segment_pages(backend._conn()) or []
    return {
        "fts_segments_before": len(before),
        "fts_segments": len(after),
        "compact_s": time.perf_counter() - t0,
    }


def _write_vectors(conn: sqlite3.Connection, corpus: Corpus, docs: list[Any]) -> None:
    by_id = {d.doc_id: d for d in docs}
    marks = ",".join("?" * len(docs))
    rows = conn.execute(
        f"SELECT id, doc_id, passage_no FROM passage_rows WHERE source_key = ? AND doc_id IN ({marks})",
        [SOURCE, *by_id],
    ).fetchall()
    cache: dict[str, Any] = {}
    values = []
    for passage_id, doc_id, passage_no in rows:
        if doc_id not in cache:
            cache[doc_id] = corpus.vectors_of(by_id[doc_id].index)
        values.append((passage_id, MODEL, cache[doc_id][passage_no].tobytes()))
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT OR REPLACE INTO passage_vectors VALUES (?,?,?)", values)
    conn.execute(
        "INSERT INTO source_versions VALUES (?, 1) "
        "ON CONFLICT(source_key) DO UPDATE SET version = version + 1",
        (SOURCE,),
    )
    conn.execute("COMMIT")


def index_size_mb(state: Path) -> float:
    return sum(p.stat().st_size for p in state.glob("search.sqlite3*")) / 1e6


def raw_topk(path: Path, limit: int) -> Callable[[str], object]:
    """The raw storage query of the same shape: FTS5's top `limit` by BM25 (the service's weights), nothing
    joined — in its fastest form, `bm25()` under SQLite's ORDER BY ... LIMIT (FTS5's `ORDER BY rank`, the
    form first timed, is 1.1-1.7x slower here)."""
    from knowledge_core.adapters.sqlite.candidates import BM25_WEIGHTS
    from knowledge_core.adapters.sqlite.search import _match_expression

    conn = sqlite3.connect(path, check_same_thread=False)
    sql = (
        f"SELECT rowid, bm25(passages, {BM25_WEIGHTS}) AS s FROM passages "
        "WHERE passages MATCH ? ORDER BY s LIMIT ?"
    )
    return lambda text: conn.execute(sql, (_match_expression(text), limit)).fetchall()


def _cycle(items: list[Any]) -> Callable[[], Any]:
    state = {"i": 0}

    def take() -> Any:
        state["i"] += 1
        return items[state["i"] % len(items)]

    return take


def _row(name: str, subject: list[float], baseline: list[float], **extra: Any) -> dict[str, Any]:
    p50, p95 = percentile(subject, 50) * 1000, percentile(subject, 95) * 1000
    b50, b95 = percentile(baseline, 50) * 1000, percentile(baseline, 95) * 1000
    row = {"where": name, "p50_ms": p50, "p95_ms": p95, "raw_p50_ms": b50, "raw_p95_ms": b95}
    row |= {"ratio_p50": p50 / b50 if b50 else None, "p95_over_p50": p95 / p50 if p50 else None, **extra}
    print(
        f"  {name:<22} p50 {p50:8.2f} ms p95 {p95:8.2f} ms | "
        f"raw FTS5 top-k p50 {b50:7.2f} ms p95 {b95:7.2f} ms"
        f" | x{row['ratio_p50']:.2f}",
        file=sys.stderr,
    )
    return row


def bench_sqlite_in_process(state: Path, corpus: Corpus, rounds: int, ranking: str) -> dict[str, Any]:
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Viewer
    from knowledge_core.ports import QueryAnalysis, SourceQuery, Vector

    backend = SqliteFtsBackend(state / "search.sqlite3")
    compaction = compacted(backend)  # a file from an older build (or the 1M bulk writer) is compacted here
    viewer = Viewer(tenant=TENANT, subject=SUBJECT)
    hybrid = ranking == "hybrid"
    query = SourceQuery(SOURCE, POOL if hybrid else TOP_K, 0.0, 15.0, DENSE if hybrid else 0)
    queries = corpus.queries(max(rounds, 200))
    take = _cycle(queries)
    t0 = time.perf_counter()
    first_s: float | None = None
    if hybrid:  # the first search loads the saved graph or answers exactly while it is built: both reported
        backend.search(
            [query], QueryAnalysis(queries[0].text, vectors=(Vector(MODEL, queries[0].vector),)), viewer
        )
        first_s = time.perf_counter() - t0
        backend._dense_indexes.settle()
    load_s = time.perf_counter() - t0

    def search() -> None:
        q = take()
        vectors = (Vector(MODEL, q.vector),) if hybrid else ()
        [result] = backend.search([query], QueryAnalysis(q.text, vectors=vectors), viewer)
        if result.error is not None:
            raise RuntimeError(f"search failed: {result.error}")

    raw = raw_topk(state / "search.sqlite3", query.top_k * 8 + 16)
    raw_take = _cycle(queries)
    for _ in queries:  # every query once each first: both read their pages from a warm cache
        search()
        raw(raw_take().text)
    subject, baseline = interleaved(search, lambda: raw(raw_take().text), rounds)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    recall = dense_recall(backend, queries[:50]) if hybrid else None
    row = _row(
        "in-process",
        subject,
        baseline,
        dense_load_s=load_s if hybrid else None,
        dense_first_search_s=first_s,
        max_rss_mb=rss,
        **compaction,
    )
    return row | {"dense_recall_at_10": recall}


def dense_recall(backend: Any, queries: list[Any]) -> float:
    """recall@10 of the dense index the backend searched (HNSW past EXACT_MAX) against the exact scan of
    the same vectors, at the depth the dense stage asks for (8 passages per document, 50 documents)."""
    from knowledge_core.adapters.embedding import VectorMatrix
    from knowledge_core.adapters.sqlite import candidates
    from knowledge_core.adapters.sqlite.dense_cache import dense_vectors
    from knowledge_core.ports import Vector

    index = backend._dense_indexes.indexes[(SOURCE, MODEL)][1]
    conn = backend._conn()
    low, high = candidates.source_range(conn, SOURCE)
    ids, vectors = dense_vectors(conn, low, high, MODEL, None)
    exact = VectorMatrix(MODEL, ids.tolist(), [bytes(row) for row in vectors])
    hits = 0
    for q in queries:
        vector = Vector(MODEL, q.vector)
        truth = {i for i, _ in exact.nearest(vector, DENSE * 8)[:10]}
        hits += len(truth & {i for i, _ in index.nearest(vector, DENSE * 8)[:10]})
    return hits / (10 * len(queries))


def bench_sqlite_serve(state: Path, corpus: Corpus, rounds: int) -> dict[str, Any]:
    serve = Serve(state)
    try:
        queries = corpus.queries(max(rounds, 200), seed=2)
        take, raw_take = _cycle(queries), _cycle(queries)
        raw = raw_topk(state / "search.sqlite3", TOP_K * 8 + 16)
        for _ in queries:  # warm-up: every query once each
            serve.search(take().text)
            raw(raw_take().text)
        subject, baseline = interleaved(
            lambda: serve.search(take().text), lambda: raw(raw_take().text), rounds
        )
        return _row("kb serve (HTTP)", subject, baseline, serve_rss_mb=serve.rss_mb())
    finally:
        serve.close()


def run_sqlite(size: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    corpus = Corpus(size, seed=args.seed)
    state = Path(args.cache) / f"sqlite-{size}"
    print(f"sqlite, {size:,} passages: {state}", file=sys.stderr)
    built = bulk_sqlite(corpus, state) if size > args.bulk_above else build_sqlite(corpus, state)
    common = {"backend": "sqlite", "passages": size, "index_mb": index_size_mb(state)}
    common |= {k: v for k, v in built.items() if k.endswith("_per_s")}
    rows = []
    for ranking in args.rankings.split(","):
        rows.append(
            common | {"ranking": ranking} | bench_sqlite_in_process(state, corpus, args.rounds, ranking)
        )
    if args.serve:
        rows.append(common | {"ranking": "bm25"} | bench_sqlite_serve(state, corpus, args.rounds))
    return rows


BACKENDS: dict[str, Callable[[int, argparse.Namespace], list[dict[str, Any]]]] = {"sqlite": run_sqlite}


# --- results -------------------------------------------------------------------------------------
def merge(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of this run replace those of the same (backend, passages, ranking, where) in scale.json."""
    path = RESULTS / "scale.json"
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    key = lambda r: (r["backend"], r["passages"], r["ranking"], r["where"])  # noqa: E731
    fresh = {key(r) for r in rows}
    merged = sorted([r for r in old if key(r) not in fresh] + rows, key=key)
    path.write_text(json.dumps({"rows": merged}, indent=2))
    return merged


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | passages | ranking | where | p50 ms | p95 ms | raw FTS5 top-k p50 ms | p50 / raw | "
        "p95 / p50 | ingest passages/s | index MB | RSS MB | dense build s | dense recall@10 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rss = r.get("serve_rss_mb") or r.get("max_rss_mb") or 0
        lines.append(
            f"| {r['backend']} | {r['passages']:,} | {r['ranking']} | {r['where']} | {r['p50_ms']:.2f} | "
            f"{r['p95_ms']:.2f} | {r['raw_p50_ms']:.2f} | {r['ratio_p50']:.2f} | {r['p95_over_p50']:.2f} | "
            f"{_ingest(r)} | {r.get('index_mb') or 0:,.0f} | {rss:,.0f} | "
            f"{_optional(r.get('dense_load_s'), '.1f')} | {_optional(r.get('dense_recall_at_10'), '.3f')} |"
        )
    return "\n".join(lines) + "\n"


def _ingest(row: dict[str, Any]) -> str:
    """The service's ingest rate; for a bulk-written index, the bulk writer's (marked)."""
    if row.get("ingest_passages_per_s"):
        return f"{row['ingest_passages_per_s']:,.0f}"
    return f"{row['bulk_passages_per_s']:,.0f} (bulk)" if row.get("bulk_passages_per_s") else ""


def _optional(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        series.setdefault(f"{r['backend']} {r['ranking']} {r['where']}", []).append(
            (r["passages"], r["p50_ms"])
        )
        if r["where"] == "in-process" and r["ranking"] == "bm25":
            series.setdefault(f"{r['backend']} raw FTS5 top-k", []).append((r["passages"], r["raw_p50_ms"]))
    for name, points in sorted(series.items()):
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=name, linestyle="--" if "raw" in name else "-")
    ax.set(
        xscale="log", yscale="log", xlabel="passages", ylabel="search p50 (ms)", title="Search p50 vs corpus"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "scale.png", dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="passages, comma-separated")
    parser.add_argument("--backend", default="sqlite", choices=sorted(BACKENDS))
    parser.add_argument("--rankings", default="bm25,hybrid")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default="/tmp/kb-scale", help="where built indexes are kept between runs")
    parser.add_argument(
        "--bulk-above", type=int, default=100_000, help="write bigger indexes directly (bulk_sqlite)"
    )
    parser.add_argument("--no-serve", dest="serve", action="store_false", help="skip the kb serve rows")
    parser.add_argument("--report", action="store_true", help="only rewrite scale.md / scale.png")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    if not args.report:
        for size in (int(s) for s in args.sizes.split(",")):
            rows += BACKENDS[args.backend](size, args)
    merged = merge(rows)
    (RESULTS / "scale.md").write_text(markdown(merged))
    plot(merged)
    print(markdown(merged))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
