"""OpenSearch at scale (issue 23 point 3): one passages index grown on the shared synthetic corpus
(`bench/scale_corpus.py`: 10k, 100k, … passages, each size the first passages of the next, with synthetic
int8 vectors in the k-NN field) on an OpenSearch node of its own (`kb services start` in `--state`, so the
shared node is not loaded; `--nodes 3` for the cluster). Per size:

* ingest throughput (documents/s, passages/s) of the adapter's own write path, `put_documents` in the
  ingestion job's batches of `BATCH_DOCUMENTS` (corpus generation is not timed);
* search p50/p95 of the retrieval step every door runs (`Retrieval.run`: one `_msearch`, ranking, no
  `_mget` since `live_hits`) beside the raw `_msearch` of the same body, interleaved — BM25 and hybrid
  (BM25 + the k-NN stage with the query's synthetic vector).

`--hnsw` instead builds small k-NN-only indices of `--hnsw-passages` vectors for each (m, ef_construction)
and reports recall@10 of the k-NN query (per `ef_search`) against the exact int8 inner product, with its p50.

    nice -n 10 .venv/bin/python bench/opensearch_scale.py --sizes 10000,100000 --state /tmp/kb-scale
    nice -n 10 .venv/bin/python bench/opensearch_scale.py --hnsw --hnsw-passages 50000 --state /tmp/kb-scale

Rows go to stdout as a Markdown table, to `bench/results/opensearch_scale.md` and to
`bench/results/opensearch_scale*.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

import numpy as np  # noqa: E402
from _util import interleaved, percentile  # noqa: E402
from knowledge_core.adapters.embedding import passage_text  # noqa: E402
from knowledge_core.adapters.opensearch import OpenSearchBackend  # noqa: E402
from knowledge_core.domain.models import Document, DocumentAcl, Viewer  # noqa: E402
from knowledge_core.domain.passages import document_passages  # noqa: E402
from knowledge_core.ports import Embedder, QueryAnalysis, Vector  # noqa: E402
from knowledge_core.services.ingestion import BATCH_DOCUMENTS  # noqa: E402
from knowledge_core.services.retrieval import Retrieval, SourceAsk  # noqa: E402
from scale_corpus import DIMENSIONS, MODEL, Corpus, SyntheticDocument  # noqa: E402

from kb_cli import supervisor  # noqa: E402

KEY = "scale@1.0.0"
VIEWER = Viewer(tenant="bench", subject="bench")
RESULTS = ROOT / "bench" / "results"


class SyntheticEmbedder(Embedder):
    """The corpus's vector space as the adapter sees a model: it maps the k-NN field, and "embeds" a
    passage by looking up the corpus's vector for its text (`expect`, before each write; embedding a million
    passages on 2 cores is not possible), so ingestion runs the adapter's own `put_documents`."""

    models = (MODEL,)

    def __init__(self) -> None:
        self.table: dict[str, bytes] = {}

    def expect(self, doc: Document, vectors: np.ndarray) -> None:
        """The vectors `embed_passages` answers for `doc`'s passages (the last row for any extra one)."""
        for i, passage in enumerate(document_passages(doc.body, doc.title, doc.structured_source)):
            self.table[passage_text(doc.title, passage.indexed)] = vectors[min(i, len(vectors) - 1)].tobytes()

    def dimensions(self, model: str) -> int:
        return DIMENSIONS

    def embed_query(self, text: str) -> Vector | None:
        raise NotImplementedError("the benchmark passes the corpus's query vectors")

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        return [[Vector(MODEL, self.table[t])] for t in texts]


def _document(sdoc: SyntheticDocument) -> Document:
    return Document(
        source_key=KEY, doc_id=sdoc.doc_id, title=sdoc.title, body=sdoc.body, acl=DocumentAcl(tenant="bench")
    )


def ingest(
    backend: OpenSearchBackend, embedder: SyntheticEmbedder, corpus: Corpus, start: int, stop: int
) -> dict[str, float]:
    """Write documents [start, stop) through `put_documents` in the ingestion job's batches
    (`BATCH_DOCUMENTS`), timing the puts only (passage split, passage-count lookup, bulk and refresh; corpus
    generation and the vector table are not timed)."""
    timed = 0.0
    passages = 0
    for first in range(start, stop, BATCH_DOCUMENTS):
        embedder.table.clear()
        docs = []
        for sdoc in corpus.documents(first, min(stop, first + BATCH_DOCUMENTS)):
            doc = _document(sdoc)
            embedder.expect(doc, corpus.vectors(sdoc))
            docs.append(doc)
        passages += len(embedder.table)
        t0 = time.perf_counter()
        backend.put_documents(docs)
        timed += time.perf_counter() - t0
    docs_n = stop - start
    return {
        "docs": docs_n,
        "passages": passages,
        "seconds": timed,
        "docs_s": docs_n / timed,
        "passages_s": passages / timed,
    }


def search_rows(backend: OpenSearchBackend, corpus: Corpus, rounds: int) -> dict[str, dict[str, float]]:
    """p50/p95 of `Retrieval.run` and of the raw `_msearch` of the same body, BM25 and hybrid."""
    retrieval = Retrieval(backend)
    queries = corpus.queries(64)
    out: dict[str, dict[str, float]] = {}
    for ranking in ("bm25", "hybrid"):
        analysed = [
            QueryAnalysis(q.text, "", (Vector(MODEL, q.vector),) if ranking == "hybrid" else ())
            for q in queries
        ]
        asks = [SourceAsk(KEY, 10, 0.0)]
        bodies = [
            backend.search_body(
                [retrieval.source_query(KEY, 10, 0.0, 15.0, a)], a.lexical, VIEWER, a.vectors, bool(a.vectors)
            )
            for a in analysed
        ]
        assert all(retrieval.run(asks, a, VIEWER, 15.0).outcomes[0].hits for a in analysed[:8]), "no hits"
        out[ranking] = _timed(retrieval, backend, asks, analysed, bodies, rounds)
        out[ranking]["ratio_p50"] = out[ranking]["p50_ms"] / out[ranking]["raw_p50_ms"]
    return out


def _timed(
    retrieval: Retrieval,
    backend: OpenSearchBackend,
    asks: list[SourceAsk],
    analysed: list[QueryAnalysis],
    bodies: list[list[dict[str, Any]]],
    rounds: int,
) -> dict[str, float]:
    """Interleaved: the retrieval step of query i, then the raw `_msearch` of its body."""
    state = {"i": 0}

    def service() -> object:
        state["i"] += 1
        return retrieval.run(asks, analysed[state["i"] % len(analysed)], VIEWER, 15.0)

    def raw() -> object:
        return backend.msearch(bodies[state["i"] % len(bodies)], 16.0)

    subject, baseline = interleaved(service, raw, rounds, warmup=20)
    return {
        "p50_ms": percentile(subject, 50) * 1000,
        "p95_ms": percentile(subject, 95) * 1000,
        "raw_p50_ms": percentile(baseline, 50) * 1000,
        "raw_p95_ms": percentile(baseline, 95) * 1000,
    }


def index_bytes(backend: OpenSearchBackend) -> int:
    stats = backend.client.indices.stats(index=backend.passages_alias, metric="store")
    return int(stats["_all"]["primaries"]["store"]["size_in_bytes"])


CONCURRENT_SETTING = "index.search.concurrent_segment_search.mode"


def concurrent_segments(backend: OpenSearchBackend, corpus: Corpus, rounds: int) -> dict[str, Any]:
    """Lucene's concurrent segment search (OpenSearch 2.17+, an index setting) off and on, in alternating
    blocks on the same index: each block's p50 of the retrieval step, BM25 and hybrid, and the segments."""
    client, alias = backend.client, backend.passages_alias
    segments = len(client.cat.segments(index=alias, format="json"))
    blocks: list[dict[str, Any]] = []
    try:
        for mode in ("none", "all", "none", "all"):
            client.indices.put_settings(index=alias, body={CONCURRENT_SETTING: mode})
            rows = search_rows(backend, corpus, rounds)
            blocks.append({"mode": mode} | {r: rows[r]["p50_ms"] for r in rows})
            print(
                f"  concurrent segment search {mode:<4}: BM25 p50 {rows['bm25']['p50_ms']:.2f} ms, "
                f"hybrid p50 {rows['hybrid']['p50_ms']:.2f} ms ({segments} segments)",
                flush=True,
            )
    finally:
        client.indices.put_settings(index=alias, body={CONCURRENT_SETTING: None})
    return {"segments": segments, "blocks": blocks}


def growth(
    url: str, sizes: list[int], rounds: int, keep: bool = False, concurrent: bool = False
) -> list[dict[str, Any]]:
    corpus = Corpus(max(sizes))
    embedder = SyntheticEmbedder()
    backend = OpenSearchBackend(
        url, index_prefix=f"kbscale-{uuid.uuid4().hex[:8]}", embedder=embedder, timeout_s=60.0
    )
    backend.ensure_indices()
    rows: list[dict[str, Any]] = []
    done_docs = 0
    try:
        for size in sizes:
            target_docs = -(-size // 10)
            rate = ingest(backend, embedder, corpus, done_docs, target_docs)
            done_docs = target_docs
            backend.client.indices.refresh(index=backend.passages_alias)
            searches = search_rows(backend, corpus, rounds)
            row = {"passages": size, "ingest": rate, "search": searches, "index_bytes": index_bytes(backend)}
            rows.append(row)
            print(_growth_line(row), flush=True)
            if concurrent:
                row["concurrent_segments"] = concurrent_segments(backend, corpus, max(50, rounds // 2))
    finally:
        if keep:
            print(f"kept: index prefix {backend.index_prefix}")
        else:
            backend.drop_indices()
    return rows


def _growth_line(row: dict[str, Any]) -> str:
    i, b, h = row["ingest"], row["search"]["bm25"], row["search"]["hybrid"]
    return (
        f"| {row['passages']:,} | {i['docs_s']:,.0f} docs/s, {i['passages_s']:,.0f} passages/s | "
        f"{b['p50_ms']:.1f} / {b['p95_ms']:.1f} ms (raw {b['raw_p50_ms']:.1f} / {b['raw_p95_ms']:.1f}, "
        f"{b['ratio_p50']:.2f}x) | {h['p50_ms']:.1f} / {h['p95_ms']:.1f} ms (raw {h['raw_p50_ms']:.1f} / "
        f"{h['raw_p95_ms']:.1f}, {h['ratio_p50']:.2f}x) | {row['index_bytes'] / 2**20:,.0f} MiB |"
    )


# --- HNSW parameters ---------------------------------------------------------------------------------


def _knn_index(client: Any, name: str, m: int, ef_construction: int) -> None:
    method = {"name": "hnsw", "engine": "lucene", "space_type": "innerproduct",
              "parameters": {"m": m, "ef_construction": ef_construction}}  # fmt: skip
    client.indices.create(
        index=name,
        body={
            "settings": {
                "index": {
                    "knn": True,
                    "number_of_shards": 1,
                    "number_of_replicas": 0,
                    "refresh_interval": "-1",
                }
            },
            "mappings": {
                "properties": {
                    "v": {
                        "type": "knn_vector",
                        "dimension": DIMENSIONS,
                        "data_type": "byte",
                        "method": method,
                    }
                }
            },
        },
    )


def hnsw(url: str, passages: int, queries: int) -> list[dict[str, Any]]:
    """Recall@10 vs exact and p50 of the raw k-NN query, per (m, ef_construction) and ef_search."""
    corpus = Corpus(passages)
    vectors = np.concatenate([corpus.vectors(d) for d in corpus.documents()])[:passages]
    qs = corpus.queries(queries, seed=3)
    qv = np.stack([np.frombuffer(q.vector, dtype=np.int8) for q in qs]).astype(np.int32)
    exact = np.argsort(-(qv @ vectors.astype(np.int32).T), axis=1)[:, :10]
    backend = OpenSearchBackend(url, timeout_s=120.0)
    client = backend.client
    rows: list[dict[str, Any]] = []
    for m, efc in ((16, 100), (16, 256), (32, 256)):
        name = f"kbhnsw-{uuid.uuid4().hex[:8]}"
        _knn_index(client, name, m, efc)
        try:
            t0 = time.perf_counter()
            for i in range(0, passages, 2000):
                lines: list[str] = []
                for j in range(i, min(passages, i + 2000)):
                    lines.append(json.dumps({"index": {"_index": name, "_id": str(j)}}))
                    lines.append(json.dumps({"v": vectors[j].tolist()}))
                client.bulk(body="\n".join(lines) + "\n", request_timeout=300)
            client.indices.refresh(index=name, request_timeout=600)
            client.indices.forcemerge(index=name, max_num_segments=1, request_timeout=1800)
            build_s = time.perf_counter() - t0
            for ef in (10, 100, 200):
                recall, took = 0.0, []
                for q, truth in zip(qv, exact, strict=True):
                    body = {
                        "size": 10,
                        "_source": False,
                        "query": {"knn": {"v": {"vector": q.tolist(), "k": max(10, ef)}}},
                    }
                    t1 = time.perf_counter()
                    hits = client.search(index=name, body=body)["hits"]["hits"]
                    took.append(time.perf_counter() - t1)
                    recall += len({int(h["_id"]) for h in hits[:10]} & set(truth.tolist())) / 10
                row = {"m": m, "ef_construction": efc, "ef_search": ef, "recall_at_10": recall / len(qv),
                       "p50_ms": percentile(took, 50) * 1000, "build_s": build_s}  # fmt: skip
                rows.append(row)
                recall_s, p50_s = f"{row['recall_at_10']:.3f}", f"{row['p50_ms']:.1f} ms"
                print(f"| {m} | {efc} | {ef} | {recall_s} | {p50_s} | {build_s:.0f} s |", flush=True)
        finally:
            client.indices.delete(index=name, ignore_unavailable=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="passages, ascending, comma-separated")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--state", default=os.environ.get("KB_SERVICES_STATE", ".kb-state"))
    parser.add_argument(
        "--nodes", type=int, default=None, help="OpenSearch nodes of --state (default: as it is)"
    )
    parser.add_argument("--keep-index", action="store_true", help="leave the grown index (experiments)")
    parser.add_argument(
        "--concurrent-segments",
        action="store_true",
        help="also time each size with Lucene's concurrent segment search off and on (alternating blocks)",
    )
    parser.add_argument("--hnsw", action="store_true", help="the HNSW parameter table instead of the growth")
    parser.add_argument("--hnsw-passages", type=int, default=50_000)
    parser.add_argument("--hnsw-queries", type=int, default=100)
    args = parser.parse_args()
    env = supervisor.ensure_running(Path(args.state), (supervisor.OPENSEARCH,), args.nodes)
    url = env.get("OPENSEARCH_NODE_URLS") or env["OPENSEARCH_URL"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.hnsw:
        print("| m | ef_construction | ef_search (k) | recall@10 vs exact | p50 | build + merge |")
        print("|---|---|---|---|---|---|")
        rows = hnsw(url, args.hnsw_passages, args.hnsw_queries)
        (RESULTS / "opensearch_scale_hnsw.json").write_text(json.dumps(rows, indent=2) + "\n")
        return 0
    header = [
        "| passages | ingest (put_documents) | BM25 p50 / p95 (raw _msearch, ratio)"
        " | hybrid p50 / p95 (raw, ratio) | index |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(header), flush=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = growth(url, sizes, args.rounds, args.keep_index, args.concurrent_segments)
    (RESULTS / "opensearch_scale.json").write_text(json.dumps(rows, indent=2) + "\n")
    growths = []
    for ranking in ("bm25", "hybrid"):
        first, last = rows[0]["search"][ranking]["p50_ms"], rows[-1]["search"][ranking]["p50_ms"]
        largest, smallest = f"{rows[-1]['passages']:,}", f"{rows[0]['passages']:,}"
        growths.append(f"{ranking} p50 at {largest} = {last / first:.2f}x its p50 at {smallest}")
    summary = "; ".join(growths) + " (target <= 2x at 1M)"
    print(summary)
    table = [*header, *map(_growth_line, rows), "", summary]
    (RESULTS / "opensearch_scale.md").write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
