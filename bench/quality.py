"""Retrieval quality benchmark: nDCG@10, Recall@3 and Recall@100 of the search path on SciFact (English)
and the demo corpus' hand-labelled queries (Chinese), beside a same-run BM25 baseline.

    .venv/bin/python bench/quality.py                      # SciFact test + demo-zh on embedded SQLite
    .venv/bin/python bench/quality.py --backend opensearch # on the loopback OpenSearch of `kb services`

The harness lives in kb_cli.evaluation (shared with `kb eval`)."""

from __future__ import annotations

from kb_cli.evaluation import main

if __name__ == "__main__":
    raise SystemExit(main())
