"""The embedded full-text index before and after its background compaction
(adapters/sqlite/fts_compaction.py), interleaved in one run.

Per size: the scale corpus (bench/scale_corpus.py) ingested through `SqliteFtsBackend.put_documents` in
batches of 500 documents, as an ingestion job writes it, with the compactor held off — the file as FTS5's
automerge leaves it — then copied and compacted as the service does once writes are quiet. The raw FTS5
top-k (bench/scale_bench.py's baseline) and the in-process BM25 search are timed on both files,
alternating query by query. Reported: segments, compaction seconds, p50/p95 of each, after/before.

    nice -n 10 python bench/fts_compaction_bench.py --sizes 10000,100000

Results: bench/results/fts_compaction.json."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]

from _util import percentile  # noqa: E402
from scale_bench import BATCH_DOCS, SOURCE, SUBJECT, TENANT, TOP_K, raw_topk  # noqa: E402
from scale_corpus import Corpus  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def build_fragmented(corpus: Corpus, path: Path) -> None:
    from knowledge_core.adapters.sqlite import fts_compaction
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Document, DocumentAcl

    fts_compaction.QUIET_S = 1e9  # held off: this file is the "before"
    backend = SqliteFtsBackend(path)
    acl = DocumentAcl(tenant=TENANT)
    for start in range(0, len(corpus), BATCH_DOCS):
        docs = corpus.documents(start, start + BATCH_DOCS)
        backend.put_documents(
            [Document(source_key=SOURCE, doc_id=d.doc_id, title=d.title, body=d.body, acl=acl) for d in docs]
        )
    backend._db.close()


def measure(size: int, rounds: int, work: Path) -> dict[str, Any]:
    from knowledge_core.adapters.sqlite.fts_compaction import compact, segment_pages
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Viewer
    from knowledge_core.ports import QueryAnalysis, SourceQuery

    corpus = Corpus(size, seed=0)
    before_path, after_path = work / f"before-{size}.sqlite3", work / f"after-{size}.sqlite3"
    t0 = time.perf_counter()
    build_fragmented(corpus, before_path)
    ingest_s = time.perf_counter() - t0
    shutil.copy(before_path, after_path)
    after = SqliteFtsBackend(after_path)
    t0 = time.perf_counter()
    compact(after._db)
    compact_s = time.perf_counter() - t0
    before = SqliteFtsBackend(before_path)
    segments = (len(segment_pages(before._conn()) or []), len(segment_pages(after._conn()) or []))

    viewer = Viewer(tenant=TENANT, subject=SUBJECT)
    query = SourceQuery(SOURCE, TOP_K, 0.0, 15.0)
    texts = [q.text for q in corpus.queries(max(rounds, 200), seed=2)]
    limit = TOP_K * 8 + 16
    arms = {
        "raw before": raw_topk(before_path, limit),
        "raw after": raw_topk(after_path, limit),
        "search before": lambda t: before.search([query], QueryAnalysis(t), viewer),
        "search after": lambda t: after.search([query], QueryAnalysis(t), viewer),
    }
    times: dict[str, list[float]] = {name: [] for name in arms}
    for i in range(len(texts) + rounds):  # every query once first (warm pages), then the measured rounds
        text = texts[i % len(texts)]
        for name, run in arms.items():
            t = time.perf_counter()
            run(text)
            if i >= len(texts):
                times[name].append(time.perf_counter() - t)
    row: dict[str, Any] = {
        "passages": size,
        "segments_before": segments[0],
        "segments_after": segments[1],
        "ingest_s": ingest_s,
        "compact_s": compact_s,
    }
    for name, values in times.items():
        key = name.replace(" ", "_")
        row[f"{key}_p50_ms"] = percentile(values, 50) * 1000
        row[f"{key}_p95_ms"] = percentile(values, 95) * 1000
    for kind in ("raw", "search"):
        row[f"{kind}_after_over_before_p50"] = row[f"{kind}_after_p50_ms"] / row[f"{kind}_before_p50_ms"]
    print(
        f"{size:>9,} passages: segments {segments[0]} -> {segments[1]} (compacted in {compact_s:.1f} s) | "
        f"raw p50 {row['raw_before_p50_ms']:.2f} -> {row['raw_after_p50_ms']:.2f} ms "
        f"(x{row['raw_after_over_before_p50']:.2f}) | search p50 {row['search_before_p50_ms']:.2f} -> "
        f"{row['search_after_p50_ms']:.2f} ms (x{row['search_after_over_before_p50']:.2f})",
        file=sys.stderr,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--work", default="/tmp/kb-fts-compaction", help="scratch directory (emptied)")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = [measure(size, args.rounds, work) for size in sizes]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "fts_compaction.json"
    kept = [r for r in (json.loads(out.read_text()) if out.exists() else []) if r["passages"] not in sizes]
    merged = sorted(kept + rows, key=lambda r: r["passages"])  # rows of other sizes kept from earlier runs
    out.write_text(json.dumps(merged, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
