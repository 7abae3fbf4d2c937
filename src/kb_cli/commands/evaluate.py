"""`kb eval`: retrieval quality of the search path (kb_cli/evaluation.py runs it)."""

from __future__ import annotations

import argparse

from . import Call, Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "eval",
        help="retrieval quality (R@3, MRR@3, nDCG@10, R@100) of the search path on a test "
        "collection, beside a same-run BM25 baseline",
    )
    from ..evaluation import add_arguments as add_eval_arguments

    add_eval_arguments(p)
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace, call: Call | None = None) -> int:
    """Its progress and table, without the agent tool's INFO event per query on stderr (as `kb serve` and
    `kb mcp`: `POWERTOOLS_LOG_LEVEL` set in the environment still wins)."""
    import os

    from knowledge_core.observability import logger

    from .. import evaluation

    logger.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"))
    return evaluation.run(args)
