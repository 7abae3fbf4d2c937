"""Retrieval quality benchmark: R@3, MRR@3, nDCG@10 and R@100 of the search path on SciFact (English), the
demo corpus' hand-labelled queries (Chinese) and XQuAD zh/en (monolingual, cross-lingual, mixed), beside a
same-run BM25 baseline (docs/archive/quality-log.md).

    .venv/bin/python bench/quality.py                      # SciFact test + demo-zh on embedded SQLite
    .venv/bin/python bench/quality.py --collection xquad-en-zh --collection xquad-mixed
    .venv/bin/python bench/quality.py --backend opensearch # on the loopback OpenSearch of `kb services`

Tuning runs go through bench/tune_hybrid.py (the -train collections only).

The harness lives in kb_cli.evaluation (shared with `kb eval`)."""

from __future__ import annotations

from kb_cli.evaluation import main

if __name__ == "__main__":
    raise SystemExit(main())
