"""The no-match floors of hybrid ranking ("no match, no padding"; domain/hybrid.py): when BM25
matches nothing in a source, a dense-only candidate counts only if its raw cosine reaches its script's floor.

The floors are chosen on tuning halves only: for every query of the tuning collections (default
`xquad-mixed-train`, Chinese and English questions over Chinese and English paragraphs, and the
cross-lingual `xquad-en-zh-train` and `xquad-zh-en-train`, where BM25 matching nothing happens: a
translated question whose words are in no paragraph) whose first hint is relevant, the raw cosine of that
hint's best passage with the query vector of its script's model (the question's own or its translation's);
a script's floor is the 5th percentile of them, pooled (95 % of relevant first hits would pass it).
Off-topic queries (default: SciFact train claims and the demo questions, asked of the first collection's
corpus; they only report how many nearest neighbours a floor turns away, they choose nothing) give the share
of their first hints below each floor. Each collection reports its queries where BM25 matched nothing in a
source and how many of those have their relevant document below the current floor. The run ranks with the
floors off, so what it reads is what the fusion saw before the rule.

    python bench/no_match_floor.py [--collection xquad-mixed-train ...] [--off-topic scifact-train ...]

Results: bench/results/no_match_floor.json (and a table on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src")]

from knowledge_core.domain.analyzer import has_cjk  # noqa: E402
from knowledge_core.domain.hybrid import HybridRanking  # noqa: E402
from knowledge_core.ports import Hit  # noqa: E402

from kb_cli.evaluation import (  # noqa: E402
    add_run_arguments,
    embedding_from,
    fresh_container,
    ingest,
    lexicon_from,
    load_collection,
    searched_scores,
)

PERCENTILE = 5
DEFAULT = "xquad-mixed-train,xquad-en-zh-train,xquad-zh-en-train"


@dataclass(frozen=True)
class Recording(HybridRanking):
    """HybridRanking that remembers, per document, the best raw cosine and its passage's script of every
    fusion since the last `clear`, and whether a source had no BM25 match (the floors off: the rule under
    study must not hide what it would cut)."""

    seen: dict[str, tuple[float, bool]] = field(default_factory=dict, compare=False)
    no_match: list[bool] = field(default_factory=list, compare=False)

    def clear(self) -> None:
        self.seen.clear()
        self.no_match.clear()

    def fuse(
        self,
        lexical: list[Hit],
        lexical_cosines: list[float | None],
        dense: list[tuple[Hit, float]],
        top_k: int,
        min_score: float,
        floored: bool = True,
    ) -> list[Hit]:
        self.no_match.append(not lexical)
        pairs = [(h, c) for h, c in zip(lexical, lexical_cosines, strict=True) if c is not None] + dense
        for h, c in pairs:
            if h.doc_id not in self.seen or c > self.seen[h.doc_id][0]:
                self.seen[h.doc_id] = (c, has_cjk(h.passage))
        return super().fuse(lexical, lexical_cosines, dense, top_k, min_score, floored)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, int(q / 100 * (len(ordered) - 1))))]


def first_hits(container: Any, ingested: Any, ranking: Recording, queries: list[Any]) -> list[dict[str, Any]]:
    """Each query's first hint (relevant or not, its raw cosine and script), whether BM25 matched nothing,
    and the best raw cosine of a relevant document the fusion saw (with its script)."""
    rows = []
    for q in queries:
        ranking.clear()
        hints = searched_scores(container, ingested, q.text)
        relevant = [ranking.seen[d] for d in q.relevant if q.relevant[d] > 0 and d in ranking.seen]
        row: dict[str, Any] = {
            "no_match": any(ranking.no_match),
            "best_relevant": max(relevant, default=None),
        }
        if hints and hints[0][0] in ranking.seen:
            cosine, cjk = ranking.seen[hints[0][0]]
            row.update(first=True, relevant=q.relevant.get(hints[0][0], 0) > 0, cosine=cosine, cjk=cjk)
        rows.append(row)
    return rows


def run(name: str, args: argparse.Namespace, semantic: Any, lexicon: str | None, off: list[Any]) -> Any:
    """One collection ingested with the floors off: its queries' rows, and the off-topic queries' rows."""
    paths = {"scifact_zip": Path(args.scifact_zip), "xquad_dir": Path(args.xquad_dir)}
    corpus = load_collection(name, limit=args.limit, **paths)
    with fresh_container("sqlite", None, semantic, lexicon) as container:
        defaults = container.hybrid
        knobs = {f.name: getattr(defaults, f.name) for f in fields(HybridRanking)}
        ranking = Recording(**{**knobs, "no_match_floor": 0.0, "no_match_floor_cjk": 0.0})
        container.__dict__["hybrid"] = ranking  # before the retrieval service is built from it
        ingested = ingest(corpus, container, progress=not args.no_progress)
        return (
            defaults,
            first_hits(container, ingested, ranking, corpus.queries),
            (first_hits(container, ingested, ranking, off) if off else []),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--collection",
        action="append",
        dest="collections",
        help="tuning collections (default: " + DEFAULT + ")",
    )
    parser.add_argument(
        "--off-topic", action="append", dest="off_topic", help="collections whose queries are off-topic"
    )
    add_run_arguments(parser)
    args = parser.parse_args()
    from knowledge_core.observability import logger

    logger.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"))
    semantic, lexicon = embedding_from(args), lexicon_from(args)
    if semantic is None:
        parser.error("the floors need an embedding model (kb models fetch)")
    paths = {"scifact_zip": Path(args.scifact_zip), "xquad_dir": Path(args.xquad_dir)}
    off_queries = [
        q
        for name in (args.off_topic or ["scifact-train", "demo-all"])
        for q in load_collection(name, **paths).queries
    ]
    names = args.collections or DEFAULT.split(",")
    on: list[dict[str, Any]] = []
    off: list[dict[str, Any]] = []
    out: dict[str, Any] = {"collections": {}, "percentile": PERCENTILE, "scripts": {}}
    for i, name in enumerate(names):
        defaults, rows, far = run(name, args, semantic, lexicon, off_queries if i == 0 else [])
        on += rows
        off += far
        floors = (defaults.no_match_floor, defaults.no_match_floor_cjk)
        lost = [
            r
            for r in rows
            if r["no_match"] and r["best_relevant"] and r["best_relevant"][0] < floors[r["best_relevant"][1]]
        ]
        out["collections"][name] = {
            "queries": len(rows),
            "no_bm25_match": sum(r["no_match"] for r in rows),
            "relevant_below_floor_when_no_match": len(lost),
            "no_match_rows": [r for r in rows if r["no_match"]],
        }
        print(
            f"{name}: {len(rows)} queries, {out['collections'][name]['no_bm25_match']} where BM25 matched"
            f" nothing in a source, {len(lost)} of them with their relevant document below the floor"
        )
    print(f"{'script':<7} {'relevant first hits':>20} {'p1 / p5 / p10':>22} {'floor':>6} {'off-topic below'}")
    for cjk, script, current in ((False, "latin", floors[0]), (True, "cjk", floors[1])):
        rel = [r["cosine"] for r in on if r.get("relevant") and r["cjk"] == cjk]
        far_c = [r["cosine"] for r in off if r.get("first") and r["cjk"] == cjk]
        below = sum(c < current for c in far_c) / len(far_c) if far_c else float("nan")
        p = out["scripts"][script] = {
            "relevant_first_hits": len(rel),
            "p1": percentile(rel, 1),
            "p5": percentile(rel, PERCENTILE),
            "p10": percentile(rel, 10),
            "current_floor": current,
            "relevant_kept_at_current": sum(c >= current for c in rel) / len(rel) if rel else float("nan"),
            "off_topic_first_hits": len(far_c),
            "off_topic_below_current": below,
        }
        print(
            f"{script:<7} {len(rel):>20} {p['p1']:.3f} / {p['p5']:.3f} / {p['p10']:.3f} {current:>6.2f}"
            f" {below:>10.3f} of {len(far_c)}"
        )
    path = Path(args.out) if args.out else ROOT / "bench" / "results" / "no_match_floor.json"
    path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
