"""Filtered vs unfiltered search (SPEC §8, F-FILTER): on the synthetic corpus of bench/scale_corpus.py (100k
passages by default, with the corpus's own vectors), both backends in the same run, each source search asked
exactly what the retrieval step asks (hybrid: BM25 pool and dense stage, one `search` call), with no filter
and with a selective (1 % of documents) and a broad (50 %) filter, interleaved query by query.

Target: filtered p50 <= 1.5x unfiltered p50 on the same corpus, per backend and filter. The embedded backend
runs in a temp file; OpenSearch (`kb services`, started if needed and left running) under its own index
prefix, dropped at the end. Hybrid by default; `--bm25` leaves the vectors out.

    nice -n 10 .venv/bin/python bench/filter_bench.py [--passages 100000] [--rounds 100]
        [--backends sqlite,opensearch] [--bm25]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")

from _util import interleaved, report  # noqa: E402
from knowledge_core.adapters.embedding import passage_text  # noqa: E402
from knowledge_core.domain.filters import Filter, parse_filter  # noqa: E402
from knowledge_core.domain.models import Document, DocumentAcl, Viewer  # noqa: E402
from knowledge_core.ports import Embedder, QueryAnalysis, SearchBackend, Vector  # noqa: E402
from knowledge_core.services.retrieval import Retrieval  # noqa: E402
from scale_corpus import DIMENSIONS, MODEL, Corpus  # noqa: E402

KEY = "filters@1.0.0"
VIEWER = Viewer(tenant="bench", subject="bench")
FILTERS: dict[str, dict] = {
    "selective (1%)": {"equals": {"key": "group", "value": "g07"}},
    "broad (50%)": {"lessThan": {"key": "bucket", "value": 50}},
}
BATCH = 250


class CorpusVectors(Embedder):
    """The corpus's own vectors as an embedder: ingestion stores them as any model's vectors are stored."""

    models = (MODEL,)

    def __init__(self) -> None:
        self.by_text: dict[str, bytes] = {}

    def dimensions(self, model: str) -> int:
        return DIMENSIONS

    def embed_query(self, text: str) -> Vector | None:
        return None  # queries carry the corpus's query vectors

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        return [[Vector(MODEL, self.by_text[t])] if t in self.by_text else [] for t in texts]


def metadata(index: int) -> dict[str, object]:
    """`group` g00-g99 and `bucket` 0-99 from the document's index, independent of its topic."""
    bucket = (index * 7919) % 100
    return {"group": f"g{bucket:02d}", "bucket": bucket, "year": 2000 + index % 25}


def documents(corpus: Corpus, vectors: CorpusVectors | None) -> list[list[Document]]:
    batches: list[list[Document]] = [[]]
    for doc in corpus.documents():
        if vectors is not None:
            for passage, row in zip(doc.passages, corpus.vectors(doc), strict=True):
                vectors.by_text[passage_text(doc.title, passage)] = row.tobytes()
        if len(batches[-1]) == BATCH:
            batches.append([])
        batches[-1].append(
            Document(
                source_key=KEY,
                doc_id=doc.doc_id,
                title=doc.title,
                body=doc.body,
                acl=DocumentAcl(tenant="bench"),
                metadata=metadata(doc.index),
            )
        )
    return batches


def load(backend: SearchBackend, batches: list[list[Document]], name: str) -> None:
    started = time.perf_counter()
    for batch in batches:
        backend.put_documents(batch)
    count = sum(len(b) for b in batches)
    print(f"{name}: {count} documents loaded in {time.perf_counter() - started:.0f} s", flush=True)


def searcher(
    backend: SearchBackend, analyses: list[QueryAnalysis], node: Filter | None
) -> Callable[[], object]:
    """One source search per call, cycling through the queries, asked what the retrieval step asks."""
    retrieval = Retrieval(backend)
    queries = itertools.cycle(analyses)

    def run() -> object:
        analysis = next(queries)
        q = retrieval.source_query(KEY, 5, 0.0, 15.0, analysis, node)
        [result] = backend.search([q], analysis, VIEWER)
        assert result.error is None, result.error
        return result

    return run


def measure(name: str, backend: SearchBackend, analyses: list[QueryAnalysis], rounds: int) -> list[dict]:
    # The first dense search builds the source's index (an HNSW graph past 50k vectors): not measured.
    warm = Retrieval(backend).source_query(KEY, 5, 0.0, 900.0, analyses[0])
    started = time.perf_counter()
    [result] = backend.search([warm], analyses[0], VIEWER)
    assert result.error is None, result.error
    print(f"{name}: first search (builds the dense index) {time.perf_counter() - started:.1f} s", flush=True)
    rows = []
    for label, raw in FILTERS.items():
        node = parse_filter(raw)
        # The same query sequence for both sides: a filtered call and an unfiltered call alternate.
        filtered, unfiltered = interleaved(
            searcher(backend, analyses, node), searcher(backend, analyses, None), rounds
        )
        row = report(f"{name} {label}", filtered, unfiltered, "unfiltered", "(target <= 1.5x)")
        rows.append({"backend": name, "filter": label, **row})
    return rows


def sqlite_backend(batches: list[list[Document]], vectors: CorpusVectors | None, tmp: str) -> SearchBackend:
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend

    backend = SqliteFtsBackend(Path(tmp) / "filters.sqlite3", embedder=vectors)
    load(backend, batches, "sqlite")
    return backend


def opensearch_backend(batches: list[list[Document]], vectors: CorpusVectors | None) -> SearchBackend:
    from knowledge_core.adapters.opensearch import OpenSearchBackend

    from kb_cli import supervisor

    state = Path(os.environ.get("KB_SERVICES_STATE", "/work/svc"))
    url = supervisor.ensure_running(state, (supervisor.OPENSEARCH,))["OPENSEARCH_URL"]
    backend = OpenSearchBackend(
        url, index_prefix=f"kbf-{uuid.uuid4().hex[:8]}", embedder=vectors, timeout_s=60
    )
    backend.prepare()
    load(backend, batches, "opensearch")
    return backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--backends", default="sqlite,opensearch")
    parser.add_argument("--bm25", action="store_true", help="no vectors: BM25 candidates only")
    args = parser.parse_args()
    corpus = Corpus(args.passages, seed=7)
    vectors = None if args.bm25 else CorpusVectors()
    batches = documents(corpus, vectors)
    analyses = [
        QueryAnalysis(q.text, "", () if args.bm25 else (Vector(MODEL, q.vector),))
        for q in corpus.queries(200)
    ]
    print(
        f"{args.passages} passages, {len(corpus)} documents, {'BM25' if args.bm25 else 'hybrid'}", flush=True
    )
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends.split(","):
            backend = sqlite_backend(batches, vectors, tmp) if name == "sqlite" else None
            if name == "opensearch":
                backend = opensearch_backend(batches, vectors)
            assert backend is not None, name
            try:
                rows += measure(name, backend, analyses, args.rounds)
            finally:
                if name == "opensearch":
                    backend.drop_indices()  # type: ignore[attr-defined]
                backend.close()  # before the temp dir goes: pending dense graphs are saved beside the file
    print("\n| backend | filter | unfiltered p50 ms | filtered p50 ms | filtered p99 ms | ratio p50 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['filter']} | {r['baseline_p50_ms']:.2f} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {r['ratio_p50']:.2f}x |"
        )


if __name__ == "__main__":
    main()
