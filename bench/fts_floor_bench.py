"""The embedded search's floor and what lowers it: on the scale corpus's indexes
(bench/scale_bench.py builds them under --cache), per size, interleaved in one process:

- the raw FTS5 top-k (`bm25()` of `MATCH ?` under ORDER BY ... LIMIT, the service's first fetch) on the
  SQLite Python links (Debian's 3.40 here: the standard library's `sqlite3`) against the same statement
  on the library the service uses (adapters/sqlite/driver.py: `pysqlite3`, SQLite 3.51), same rows checked;
- the raw top-k by `kb_bm25` (adapters/sqlite/rank.py) against the same statement by `bm25()`, on the
  service's library, same rows checked;
- the in-process BM25 search (`SqliteFtsBackend.search`, top_k 3) with one statement (`slices=1`) against
  the default (the source's id range in slices read at once, one thread each: candidates.SlicedCandidates),
  same hits checked;
- citing (`passage_candidates` of a search's first 3 hits, 3 passages each, timed alone after its search):
  from the search's own candidate rows where they hold them, against asking the index per document.

    nice -n 10 python bench/fts_floor_bench.py --sizes 10000,100000,1000000

Read-only: the standard library's connection only reads, while nothing writes (two copies of SQLite in
one process must not share a file that is written: driver.py). Results: bench/results/fts_floor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

import sqlite3 as stdlib_sqlite3  # noqa: E402

from _util import interleaved, percentile  # noqa: E402
from knowledge_core.adapters.sqlite.driver import sqlite3  # noqa: E402
from scale_bench import _cycle  # noqa: E402
from scale_corpus import Corpus  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SOURCE = "demo-docs@1.0.0"
TENANT, SUBJECT = "default", "demo-user"
TOP_K = 3


def _p50(samples: list[float]) -> float:
    return percentile(samples, 50) * 1000


def _p95(samples: list[float]) -> float:
    return percentile(samples, 95) * 1000


def _pair(name: str, subject: list[float], baseline: list[float], base_name: str) -> dict[str, Any]:
    row = {
        "what": name,
        "p50_ms": _p50(subject),
        "p95_ms": _p95(subject),
        "baseline": base_name,
        "baseline_p50_ms": _p50(baseline),
        "baseline_p95_ms": _p95(baseline),
        "ratio_p50": _p50(subject) / _p50(baseline),
    }
    print(
        f"  {name:<34} p50 {row['p50_ms']:7.2f} ms p95 {row['p95_ms']:7.2f} | {base_name:<26} p50 "
        f"{row['baseline_p50_ms']:7.2f} ms p95 {row['baseline_p95_ms']:7.2f} | x{row['ratio_p50']:.2f}",
        file=sys.stderr,
    )
    return row


def bench_size(size: int, cache: Path, rounds: int) -> list[dict[str, Any]]:
    from knowledge_core.adapters.sqlite import rank
    from knowledge_core.adapters.sqlite.candidates import (
        BM25_WEIGHTS,
        SLICE_MIN_PASSAGES,
        default_slices,
    )
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend, _match_expression
    from knowledge_core.domain.models import Viewer
    from knowledge_core.ports import QueryAnalysis, SourceQuery

    path = cache / f"sqlite-{size}" / "search.sqlite3"
    if not path.exists():
        raise SystemExit(f"{path} is missing: build it with bench/scale_bench.py --sizes {size}")
    texts = [q.text for q in Corpus(size).queries(max(rounds, 200))]
    limit = TOP_K * 8 + 16
    raw_sql = (
        f"SELECT rowid, bm25(passages, {BM25_WEIGHTS}) AS s FROM passages "
        "WHERE passages MATCH ? ORDER BY s, rowid LIMIT ?"
    )
    old = stdlib_sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    new = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    matches = [_match_expression(t) for t in texts]
    for m in matches:
        if old.execute(raw_sql, (m, limit)).fetchall() != new.execute(raw_sql, (m, limit)).fetchall():
            raise AssertionError(f"the two libraries answer {m!r} differently")
    take = _cycle(matches)
    take_old = _cycle(matches)
    print(
        f"sqlite {size:,} passages: SQLite {stdlib_sqlite3.sqlite_version} (stdlib) vs "
        f"{sqlite3.sqlite_version} (driver); slices {default_slices()} from {SLICE_MIN_PASSAGES:,} passages",
        file=sys.stderr,
    )
    subject, baseline = interleaved(
        lambda: new.execute(raw_sql, (take(), limit)).fetchall(),
        lambda: old.execute(raw_sql, (take_old(), limit)).fetchall(),
        rounds,
    )
    rows = [
        _pair("raw top-k, driver", subject, baseline, f"raw top-k, stdlib {stdlib_sqlite3.sqlite_version}")
    ]
    library = rank.library()  # kb_bm25 (rank.py): the same statement without a %_docsize read per row
    if library is not None:
        rank.install(new)
        kb_sql = raw_sql.replace("bm25(", f"{rank.FUNCTION}(")
        for m in matches:
            if new.execute(kb_sql, (m, limit)).fetchall() != new.execute(raw_sql, (m, limit)).fetchall():
                raise AssertionError(f"kb_bm25 answers {m!r} unlike bm25()")
        c1, c2 = _cycle(matches), _cycle(matches)
        subject, baseline = interleaved(
            lambda: new.execute(kb_sql, (c1(), limit)).fetchall(),
            lambda: new.execute(raw_sql, (c2(), limit)).fetchall(),
            rounds,
        )
        rows.append(_pair("raw top-k, kb_bm25", subject, baseline, "raw top-k, bm25()"))

    one = SqliteFtsBackend(path, slices=1)
    sliced = SqliteFtsBackend(path)
    viewer = Viewer(tenant=TENANT, subject=SUBJECT)
    query = SourceQuery(SOURCE, TOP_K, 0.0, 15.0, 0)

    def search(backend: Any, text: str) -> list[Any]:
        [result] = backend.search([query], QueryAnalysis(text), viewer)
        if result.error is not None:
            raise RuntimeError(f"search failed: {result.error}")
        return [(h.doc_id, h.score, h.passage) for h in result.hits]

    for t in texts:
        if search(one, t) != search(sliced, t):
            raise AssertionError(f"slicing changed the hits of {t!r}")
    a, b = _cycle(texts), _cycle(texts)
    subject, baseline = interleaved(lambda: search(sliced, a()), lambda: search(one, b()), rounds)
    rows.append(_pair(f"search, {default_slices()} slices", subject, baseline, "search, one statement"))

    # Citing (with the models, after the relevance cut): the shown hits' best passages, from the search's
    # own candidate rows where they provably hold them, against asking the index for each document.
    asked = SqliteFtsBackend(path)
    wide = SourceQuery(SOURCE, 10, 0.0, 15.0, 0)
    shown = []
    for t in texts:
        [result] = sliced.search([wide], QueryAnalysis(t), viewer)
        shown.append((QueryAnalysis(t), result.hits[:TOP_K]))
    c, d = _cycle(shown), _cycle(shown)

    def cite(backend: Any, item: tuple[Any, list[Any]], remembered: bool) -> Any:
        analysis, hits = item
        backend.search([wide], analysis, viewer)
        if not remembered:
            backend._last_rows.rows = {}
        t0 = time.perf_counter()
        backend.passage_candidates(hits, analysis, 3, 5.0)
        return time.perf_counter() - t0

    memo_s: list[float] = []
    index_s: list[float] = []
    for _ in range(20):
        cite(sliced, c(), True)
        cite(asked, d(), False)
    for _ in range(rounds):
        memo_s.append(cite(sliced, c(), True))
        index_s.append(cite(asked, d(), False))
    rows.append(_pair("citing 3 hits, search's rows", memo_s, index_s, "citing, asking the index"))
    for backend in (one, sliced, asked):
        backend.close()
    return [{"passages": size, **row} for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--cache", default="/tmp/kb-scale")
    args = parser.parse_args()
    rows = [r for size in args.sizes.split(",") for r in bench_size(int(size), Path(args.cache), args.rounds)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fts_floor.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
