"""OpenSearch at scale: one passages index grown on the shared synthetic corpus
(`bench/scale_corpus.py`: 10k, 100k, … passages, each size the first passages of the next, with synthetic
int8 vectors in the k-NN field) on an OpenSearch node of its own (`kb services start` in `--state`, so the
shared node is not loaded; `--nodes 3` for the cluster). Per size:

* ingest throughput (documents/s, passages/s) of the adapter's own write path, `put_documents` in the
  ingestion job's batches of `BATCH_DOCUMENTS` (corpus generation is not timed);
* the compaction the end of an ingestion job starts (`SearchBackend.compact`), waited for;
* search p50/p95 of the retrieval step every door runs (`Retrieval.run`: one `_msearch`, ranking, no
  `_mget` since `live_hits`) beside the raw `_msearch` of the same body, interleaved — BM25 and hybrid
  (BM25 + the k-NN stage with the query's synthetic vector).

`--same-run` times the growth as a same-run ratio: every size's index up at once on the node (built for the
run; the largest may be one an earlier `--keep-index` run grew, `--reuse-prefix`), the retrieval step of each
size in turns of `--block` searches; `--shards 1,2` also times a copy of each size's index with two primary
shards (`KB_OPENSEARCH_PASSAGE_SHARDS`), `--merged 3` one force-merged to 3 segments, `--compacted` one
compacted as an ingestion job's end compacts it, in the same turns.
`--filter-costs --reuse-prefix P` times the raw BM25 `_msearch` of a kept index with its filters, all but
the source's, or its collapse taken out, and with its source's filter as the bare terms it was before they
became one cacheable bool query.

    nice -n 10 .venv/bin/python bench/opensearch_scale.py --sizes 10000,100000,1000000 --keep-index ...
    .venv/bin/python bench/opensearch_scale.py --same-run --sizes 10000,100000,1000000 --reuse-prefix P ...

`--hnsw` instead builds small k-NN-only indices of `--hnsw-passages` vectors for each (m, ef_construction)
and reports recall@10 of the k-NN query (per `ef_search`) against the exact int8 inner product, with its p50.

    nice -n 10 .venv/bin/python bench/opensearch_scale.py --sizes 10000,100000 --state /tmp/kb-scale
    nice -n 10 .venv/bin/python bench/opensearch_scale.py --hnsw --hnsw-passages 50000 --state /tmp/kb-scale

Rows go to stdout as a Markdown table, to `bench/results/opensearch_scale.md` and to
`bench/results/opensearch_scale*.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

import numpy as np  # noqa: E402
from _util import in_blocks, interleaved, percentile  # noqa: E402
from knowledge_core.adapters.embedding import passage_text  # noqa: E402
from knowledge_core.adapters.opensearch import OpenSearchBackend  # noqa: E402
from knowledge_core.domain.models import Document, DocumentAcl, Viewer  # noqa: E402
from knowledge_core.domain.passages import document_passages  # noqa: E402
from knowledge_core.ports import Embedder, QueryAnalysis, Vector  # noqa: E402
from knowledge_core.services.ingestion import BATCH_DOCUMENTS  # noqa: E402
from knowledge_core.services.retrieval import Retrieval, SourceAsk  # noqa: E402
from opensearchpy.exceptions import NotFoundError  # noqa: E402
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


QUERIES = 64


def _analysed(corpus: Corpus, ranking: str) -> list[QueryAnalysis]:
    """The corpus's first QUERIES queries as the retrieval step gets them (hybrid: with their vectors)."""
    return [
        QueryAnalysis(q.text, "", (Vector(MODEL, q.vector),) if ranking == "hybrid" else ())
        for q in corpus.queries(QUERIES)
    ]


def search_rows(backend: OpenSearchBackend, corpus: Corpus, rounds: int) -> dict[str, dict[str, float]]:
    """p50/p95 of `Retrieval.run` and of the raw `_msearch` of the same body, BM25 and hybrid."""
    retrieval = Retrieval(backend)
    out: dict[str, dict[str, float]] = {}
    for ranking in ("bm25", "hybrid"):
        analysed = _analysed(corpus, ranking)
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
            compacted = compact_as_a_job_ends(backend)
            searches = search_rows(backend, corpus, rounds)
            row = {
                "passages": size,
                "ingest": rate,
                "search": searches,
                "index_bytes": index_bytes(backend),
                "compacted": compacted,
                "segments": sum(s.segments for s in backend.index_states()),
            }
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


COMPACTED = -1  # a same-run variant: the index as the service leaves it after an ingestion job


def compact_as_a_job_ends(backend: OpenSearchBackend, timeout_s: float = 3600.0) -> bool:
    """What the end of an ingestion job does (`SearchBackend.compact`: a background force merge when the
    index is fragmented), waited for here, so what is timed is the index the service leaves; whether it
    merged."""
    started = backend.compact()
    deadline = time.monotonic() + timeout_s
    while started and time.monotonic() < deadline:
        if not any(s.merging or s.fragmented for s in backend.index_states()):
            break
        time.sleep(5)
    return started


def same_run(
    url: str,
    sizes: list[int],
    rounds: int,
    block: int,
    reuse: str | None = None,
    keep: bool = False,
    shards: Sequence[int] = (1,),
    merged: int | None = None,
    compacted: bool = False,
) -> list[dict[str, Any]]:
    """Every size's index up at once on the same node — each built here, or for the largest size an index
    an earlier `--keep-index` run grew (`reuse`, its prefix) — and the retrieval step of each size timed in
    turns of blocks (`_util.in_blocks`): the growth as a same-run ratio, every size timed warm while the
    machine's drift hits all of them alike (a growth run times its smallest size right after ingesting it,
    with a cold JVM, and its largest up to an hour later). Timing starts once the node's merges are done
    (`settle`). Variants of every size's passages index are timed in the same turns (`index_copy`): each
    shard count of `shards` other than one, and with `merged` a one-shard copy force-merged to that many
    segments; with `compacted` a one-shard copy compacted as the end of an ingestion job compacts it. A
    variant is (shards, segments): segments 0 is the index as written, COMPACTED the service's compaction."""
    corpus = Corpus(max(sizes))
    embedder = SyntheticEmbedder()
    variants = [(n, 0) for n in shards if n != 1] + ([(1, merged)] if merged else [])
    variants += [(1, COMPACTED)] if compacted else []
    backends: dict[tuple[int, int, int], OpenSearchBackend] = {}
    built: list[OpenSearchBackend] = []
    copies: list[OpenSearchBackend] = []
    indexed: dict[int, int] = {}
    try:
        for size in sizes:
            prefix = reuse if reuse and size == max(sizes) else f"kbscale-{uuid.uuid4().hex[:8]}"
            backend = OpenSearchBackend(url, index_prefix=prefix, embedder=embedder, timeout_s=60.0)
            if prefix != reuse:
                backend.ensure_indices()
                built.append(backend)
                ingest(backend, embedder, corpus, 0, -(-size // 10))
                backend.client.indices.refresh(index=backend.passages_alias)
            indexed[size] = int(backend.client.count(index=backend.passages_alias)["count"])
            if indexed[size] < 0.9 * size:  # a size's documents hold about size passages (scale_corpus)
                raise SystemExit(f"index {prefix} holds {indexed[size]:,} passages, not about {size:,}")
            backends[size, 1, 0] = backend
            for n, segments in variants:
                copies.append(index_copy(url, backend, embedder, n, segments))
                backends[size, n, segments] = copies[-1]
        settle(backend.client)
        segment_counts = {key: sum(s.segments for s in b.index_states()) for key, b in backends.items()}
        rows: list[dict[str, Any]] = []
        for ranking in ("bm25", "hybrid"):
            subjects = {key: _retrieval_step(b, corpus, ranking) for key, b in backends.items()}
            samples = _warm_in_blocks(subjects, rounds, block)
            for (size, n, segments), taken in samples.items():
                p50, p95 = percentile(taken, 50), percentile(taken, 95)
                rows.append(
                    {
                        "ranking": ranking,
                        "passages": size,
                        "shards": n,
                        "merged_to_segments": segments if segments > 0 else None,
                        "compacted": segments == COMPACTED,
                        "segments": segment_counts[size, n, segments],
                        "indexed": indexed[size],
                        "p50_ms": p50 * 1000,
                        "p95_ms": p95 * 1000,
                        "p50_over_smallest": p50 / percentile(samples[sizes[0], n, segments], 50),
                        "p50_over_smallest_as_written": p50 / percentile(samples[sizes[0], 1, 0], 50),
                    }
                )
    finally:
        for backend in copies:  # the copy's passages index, and its alias on the shared documents index
            backend.client.indices.delete(index=backend.passages_index, ignore_unavailable=True)
            with contextlib.suppress(NotFoundError):
                for documents in backend.client.indices.get_alias(name=backend.documents_alias):
                    backend.client.indices.delete_alias(index=documents, name=backend.documents_alias)
        for backend in built if not keep else ():
            backend.drop_indices()
    return rows


def index_copy(
    url: str, backend: OpenSearchBackend, embedder: Embedder, shards: int = 1, segments: int = 0
) -> OpenSearchBackend:
    """A copy of `backend`'s passages index under a prefix of its own, its documents index shared, made from
    its segment files while the source is blocked for writes: with `shards` primary shards (`_split`, named
    as the service names it: `KB_OPENSEARCH_PASSAGE_SHARDS`), its rows of other shards then expunged by a
    merge, so each shard holds only its own rows, as when the service copies rows into a new index; or one
    shard (`_clone`) force-merged to `segments`, or (COMPACTED) compacted by the service's own rule."""
    client = backend.client
    [source] = client.indices.get_alias(name=backend.passages_alias)
    copy_of = OpenSearchBackend(
        url,
        index_prefix=f"{backend.index_prefix}-x{shards}m{segments if segments >= 0 else 'c'}",
        embedder=embedder,
        timeout_s=600.0,
        passage_shards=shards,
    )
    target = copy_of.passages_index
    body: dict[str, Any] = {"aliases": {copy_of.passages_alias: {}}}
    client.indices.put_settings(index=source, body={"index.blocks.write": True})
    try:
        make = client.indices.clone
        if shards != 1:
            body["settings"] = {"index.number_of_shards": shards}
            make = client.indices.split
        active = {"wait_for_active_shards": "1"}
        make(index=source, target=target, body=body, params=active, request_timeout=600)
    finally:
        client.indices.put_settings(index=source, body={"index.blocks.write": None})
    client.indices.put_settings(index=target, body={"index.blocks.write": None})
    client.cluster.health(index=target, wait_for_status="yellow", request_timeout=600)
    if shards != 1:
        client.indices.forcemerge(index=target, only_expunge_deletes=True, request_timeout=3600)
    if segments > 0:
        client.indices.forcemerge(index=target, max_num_segments=segments, request_timeout=3600)
    [documents] = client.indices.get_alias(name=backend.documents_alias)
    client.indices.put_alias(index=documents, name=copy_of.documents_alias)
    if segments == COMPACTED:
        compact_as_a_job_ends(copy_of)
    return copy_of


def settle(client: Any, timeout_s: float = 900.0) -> None:
    """Wait until the node runs no merge (an index just built keeps merging for minutes, taking a core from
    every search timed meanwhile), then refresh, so the merged segments are the ones searched."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = client.nodes.stats(metric="indices", index_metric="merge")["nodes"]
        if not any(n["indices"]["merges"]["current"] for n in stats.values()):
            break
        time.sleep(5)
    client.indices.refresh(index="_all")


def _warm_in_blocks(
    subjects: dict[Any, Callable[[int], object]], rounds: int, block: int
) -> dict[Any, list[float]]:
    """`_util.in_blocks` after a warm-up of every subject over every query once."""
    for call in subjects.values():
        for i in range(QUERIES):
            call(i)
    return in_blocks(subjects, rounds, block)


def _retrieval_step(backend: OpenSearchBackend, corpus: Corpus, ranking: str) -> Callable[[int], object]:
    """Round i -> the retrieval step every door runs, for the corpus's query i (BM25 or hybrid)."""
    retrieval = Retrieval(backend)
    analysed = _analysed(corpus, ranking)
    asks = [SourceAsk(KEY, 10, 0.0)]
    return lambda i: retrieval.run(asks, analysed[i % len(analysed)], VIEWER, 15.0)


def _without(body: list[dict[str, Any]], part: str) -> list[dict[str, Any]]:
    """The BM25 `_msearch` body with one part taken out (every filter, all filters but the source's — its
    term and `status` — or the collapse to documents) or, "bare source terms", the body as it was before the
    source's term and `status` became one bool query the node's query cache can keep (`source_filter`)."""
    header, search = body[0], copy.deepcopy(body[1])
    clauses = search["query"]["bool"]
    if part == "filters":
        clauses["filter"] = []
    elif part == "filters but the source":
        clauses["filter"] = clauses["filter"][:1]
    elif part == "bare source terms":
        clauses["filter"] = [*clauses["filter"][0]["bool"]["filter"], *clauses["filter"][1:]]
    elif part == "collapse":
        search.pop("collapse")
    return [header, search]


FILTER_PARTS = ("nothing", "bare source terms", "filters", "filters but the source", "collapse")


def filter_costs(url: str, prefix: str, size: int, rounds: int, block: int) -> dict[str, dict[str, float]]:
    """Where a kept index's BM25 time goes (the corpus of `size` passages it was grown to): the raw
    `_msearch` of the retrieval step's bodies with one part taken out (FILTER_PARTS), in turns of blocks."""
    backend = OpenSearchBackend(url, index_prefix=prefix, embedder=SyntheticEmbedder(), timeout_s=60.0)
    retrieval = Retrieval(backend)
    bodies = [
        backend.search_body([retrieval.source_query(KEY, 10, 0.0, 15.0, a)], a.lexical, VIEWER, (), False)
        for a in _analysed(Corpus(size), "bm25")
    ]

    def probe(part: str) -> Callable[[int], object]:
        variant = [_without(b, part) for b in bodies]
        return lambda i: backend.msearch(variant[i % len(variant)], 16.0)

    subjects = {part: probe(part) for part in FILTER_PARTS}
    samples = _warm_in_blocks(subjects, rounds, block)
    return {
        part: {"p50_ms": percentile(t, 50) * 1000, "p95_ms": percentile(t, 95) * 1000}
        for part, t in samples.items()
    }


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
    parser.add_argument(
        "--same-run",
        action="store_true",
        help="every size's index up at once, timed in turns of blocks (the growth as a same-run ratio)",
    )
    parser.add_argument("--block", type=int, default=20, help="--same-run: searches in a row per size")
    parser.add_argument(
        "--shards",
        default="1",
        help="--same-run: primary shard counts of the passages index, comma-separated (each one other than "
        "1 times a copy of every size's index made by _split)",
    )
    parser.add_argument(
        "--merged",
        type=int,
        default=None,
        help="--same-run: also time a one-shard copy of each size's index force-merged to this many segments",
    )
    parser.add_argument(
        "--compacted",
        action="store_true",
        help="--same-run: also time a one-shard copy of each size's index compacted as the end of an "
        "ingestion job compacts it (kb search-indices compact)",
    )
    parser.add_argument(
        "--reuse-prefix", help="--same-run: the largest size is this kept index (an earlier --keep-index run)"
    )
    parser.add_argument(
        "--filter-costs",
        action="store_true",
        help="with --reuse-prefix (grown to the largest --sizes): the raw BM25 _msearch with its filters or "
        "its collapse taken out",
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
    if args.filter_costs:
        if not args.reuse_prefix:
            parser.error("--filter-costs needs --reuse-prefix (a kept index)")
        size = max(int(s) for s in args.sizes.split(","))
        costs = filter_costs(url, args.reuse_prefix, size, args.rounds, args.block)
        for part, row in costs.items():
            print(f"{part:<24} p50 {row['p50_ms']:.2f} ms, p95 {row['p95_ms']:.2f} ms")
        (RESULTS / "opensearch_filter_costs.json").write_text(json.dumps(costs, indent=2) + "\n")
        return 0
    if args.same_run:
        return _same_run_report(url, args)
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


def _variant(row: dict[str, Any]) -> str:
    return " (merged)" if row["merged_to_segments"] else " (compacted)" if row["compacted"] else ""


def _same_run_report(url: str, args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    shards = [int(n) for n in args.shards.split(",")]
    rows = same_run(
        url,
        sizes,
        args.rounds,
        args.block,
        args.reuse_prefix,
        args.keep_index,
        shards,
        args.merged,
        args.compacted,
    )
    lines = [
        "| ranking | passages | shards | segments | p50 ms | p95 ms | p95 / p50 | p50 / the smallest size's "
        "(same variant) | p50 / the smallest size's (as written) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['ranking']} | {r['passages']:,} | {r['shards']} | {r['segments']}{_variant(r)} | "
        f"{r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
        f"{r['p95_ms'] / r['p50_ms']:.2f} | {r['p50_over_smallest']:.2f} | "
        f"{r['p50_over_smallest_as_written']:.2f} |"
        for r in rows
    ]
    print("\n".join(lines))
    (RESULTS / "opensearch_same_run.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "opensearch_same_run.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
