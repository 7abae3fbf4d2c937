"""How `kb serve`'s search latency grows from one corpus size to the next (the target: p50 at ~100k
passages <= 1.5x the p50 at ~10k, p95 <= 3x p50), measured with every server of the comparison up at once
and its requests interleaved round-robin, so the machine's drift (large here: the same server's p50 moves
by 2x between runs minutes apart) hits every size and configuration alike.

Per configuration (an environment for `kb serve`) and size (an index bench/scale_bench.py built and cached
under --cache): one `kb serve --embedding-model none` (BM25) over that index. The default configurations
compare the service as it was before the SQLite floor work (`KB_SQLITE_LIBRARY=stdlib`: Debian's SQLite
3.40; `KB_SQLITE_SEARCH_SLICES=1`: one FTS5 statement), the newer SQLite of adapters/sqlite/driver.py with
one statement, FTS5's own bm25() (`KB_SQLITE_RANK=bm25`: the ranking before kb_bm25, adapters/sqlite/rank.py),
and the defaults (that SQLite; a large source's id range read in slices at once; kb_bm25).

    nice -n 10 python bench/scale_bench.py --sizes 10000,100000 --rankings bm25 --no-serve  # build once
    nice -n 10 python bench/serve_growth.py --sizes 10000,100000

Results: bench/results/serve_growth.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from _util import in_blocks, percentile  # noqa: E402
from scale_bench import RESULTS, Serve  # noqa: E402
from scale_corpus import Corpus  # noqa: E402

WARM = 3  # searches before each block, not timed
CONFIGURATIONS: dict[str, dict[str, str]] = {
    "stdlib SQLite, one statement": {"KB_SQLITE_LIBRARY": "stdlib", "KB_SQLITE_SEARCH_SLICES": "1"},
    "one statement": {"KB_SQLITE_SEARCH_SLICES": "1"},
    "FTS5's bm25()": {"KB_SQLITE_RANK": "bm25"},
    "defaults": {},
}


def _searcher(server: Serve, texts: list[str]) -> Callable[[int], None]:
    return lambda i: server.search(texts[i % len(texts)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=400, help="searches per server")
    parser.add_argument("--block", type=int, default=20, help="searches in a row per server")
    parser.add_argument("--cache", default="/tmp/kb-scale")
    parser.add_argument("--config", action="append", help=f"only these of {list(CONFIGURATIONS)}")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    configs = {k: v for k, v in CONFIGURATIONS.items() if not args.config or k in args.config}
    servers: dict[tuple[str, int], Serve] = {}
    try:
        for name, env in configs.items():
            for size in sizes:
                state = Path(args.cache) / f"sqlite-{size}"
                if not (state / "build.json").exists():
                    raise SystemExit(f"{state} is not built: bench/scale_bench.py --sizes {size} first")
                log = f"serve-growth-{list(configs).index(name)}.log"
                servers[(name, size)] = Serve(state, env=env, log=log)
        queries = {
            size: [q.text for q in Corpus(size).queries(max(args.rounds, 200), seed=2)] for size in sizes
        }
        for key, server in servers.items():  # warm-up: every query once each
            for text in queries[key[1]]:
                server.search(text)
        samples = in_blocks(
            {key: _searcher(server, queries[key[1]]) for key, server in servers.items()},
            args.rounds,
            args.block,
            WARM,
        )
    finally:
        for server in servers.values():
            server.close()
    rows: list[dict[str, Any]] = []
    for (name, size), taken in samples.items():
        p50, p95 = percentile(taken, 50) * 1000, percentile(taken, 95) * 1000
        base = samples[(name, sizes[0])]
        rows.append(
            {
                "configuration": name,
                "passages": size,
                "p50_ms": p50,
                "p95_ms": p95,
                "p95_over_p50": p95 / p50,
                "p50_over_smallest": p50 / (percentile(base, 50) * 1000),
            }
        )
    print("| configuration | passages | p50 ms | p95 ms | p95 / p50 | p50 / p50 at the smallest size |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['configuration']} | {r['passages']:,} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
            f"{r['p95_over_p50']:.2f} | {r['p50_over_smallest']:.2f} |"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serve_growth.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
