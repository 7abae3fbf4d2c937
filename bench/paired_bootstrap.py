"""Is a quality difference between two `kb eval` runs more than chance? A paired bootstrap over the queries.

Two results files of `kb eval` (or bench/quality.py) over the same collections: per query, R@3 (from each
query's `top` and `relevant`) and nDCG@10 of the second run minus the first; the mean difference, its 95 %
interval over 10,000 resamples of the queries (a fixed seed, so a rerun prints the same), a two-sided p,
and how many queries went up and down. docs/archive/quality-log.md "SciFact's R@3 gap, tested for chance" used
it.

    python bench/paired_bootstrap.py BEFORE.json AFTER.json [--resamples 10000]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from typing import Any

from kb_cli.evaluation import recall_at_k

Query = dict[str, Any]


def per_query(path: str) -> dict[str, dict[str, Query]]:
    """Per collection, its queries by id."""
    with open(path, encoding="utf-8") as f:
        return {c["collection"]: {q["qid"]: q for q in c["per_query"]} for c in json.load(f)}


def recall_at_3(query: Query) -> float:
    """`kb eval`'s R@3 of one query, from its top ten and its relevant documents."""
    return recall_at_k(query["top"], dict.fromkeys(query["relevant"], 1), 3)


def ndcg_at_10(query: Query) -> float:
    return float(query["ndcg@10"])


def bootstrap(differences: list[float], resamples: int, seed: int = 7) -> tuple[float, float, float]:
    """The 2.5th and 97.5th percentiles of the resampled mean difference, and the two-sided p of zero."""
    rng = random.Random(seed)
    n = len(differences)
    means = sorted(sum(differences[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    below = sum(m <= 0 for m in means) / resamples
    above = sum(m >= 0 for m in means) / resamples
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1], min(1.0, 2 * min(below, above))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args()
    before, after = per_query(args.before), per_query(args.after)
    metrics: tuple[tuple[str, Callable[[Query], float]], ...] = (
        ("R@3", recall_at_3),
        ("nDCG@10", ndcg_at_10),
    )
    for collection in sorted(set(before) & set(after)):
        ids = sorted(set(before[collection]) & set(after[collection]))
        for name, metric in metrics:
            a = [metric(before[collection][i]) for i in ids]
            b = [metric(after[collection][i]) for i in ids]
            d = [y - x for x, y in zip(a, b, strict=True)]
            lo, hi, p = bootstrap(d, args.resamples)
            print(
                f"{collection:16s} {name:8s} {sum(a) / len(a):.4f} -> {sum(b) / len(b):.4f}  "
                f"diff {sum(d) / len(d):+.4f} 95% [{lo:+.4f}, {hi:+.4f}] p~{p:.3f}  "
                f"up/down {sum(x > 0 for x in d)}/{sum(x < 0 for x in d)} of {len(d)}"
            )


if __name__ == "__main__":
    main()
