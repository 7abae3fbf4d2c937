"""Hybrid ranking knobs over a small grid, on the tuning collections only (scifact-train and the XQuAD
`-train` halves; never the reported ones): each collection is ingested once per backend and its queries are
ranked at every grid point over that index; passage vectors come from --embedding-cache, so a second run
embeds nothing. Prints per collection a row per point beside the in-run BM25 baseline, then each point's
mean over the collections.

    .venv/bin/python bench/tune_hybrid.py                                   # default grid, embedded SQLite
    .venv/bin/python bench/tune_hybrid.py --collection xquad-en-zh-train --fusion blend,rrf \
        --semantic-weight 0.1,0.3 --dense-k default,50 --rrf-k 60
    .venv/bin/python bench/tune_hybrid.py --backend opensearch ...

The harness lives in kb_cli.evaluation (shared with `kb eval`)."""

from __future__ import annotations

from kb_cli.evaluation import tune_main

if __name__ == "__main__":
    raise SystemExit(tune_main())
