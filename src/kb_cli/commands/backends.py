"""`kb services` (real OpenSearch and DynamoDB-API servers on loopback) and `kb models` (the embedding
models and the lexicon): what local backends need."""

from __future__ import annotations

import argparse

from ..local_env import DEFAULT_STATE
from . import Call, Subparsers


def register_services(sub: Subparsers) -> None:
    p = sub.add_parser("services", help="real OpenSearch, DynamoDB-API and S3-API servers on loopback")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--state", default=str(DEFAULT_STATE))
    p.add_argument("--only", action="append", choices=["opensearch", "dynamodb", "s3"], help="just this one")
    p.add_argument("--nodes", type=int, help="OpenSearch nodes (start): more than one is a loopback cluster")
    p.set_defaults(func=cmd_services)


def register_models(sub: Subparsers) -> None:
    p = sub.add_parser("models", help="embedding models for hybrid ranking, from Maven Central")
    p.add_argument("action", choices=["fetch"])
    p.add_argument("--model", help="one model (default: every default model and the lexicon)")
    p.add_argument("--lexicon", action="store_true", help="only the query translation lexicon (no Java)")
    p.add_argument("--dest", help="default: the per-user model cache")
    p.set_defaults(func=cmd_models)


def cmd_services(args: argparse.Namespace, call: Call | None = None) -> int:
    from .. import supervisor

    only = [arg for name in getattr(args, "only", None) or [] for arg in ("--only", name)]
    nodes = ["--nodes", str(args.nodes)] if getattr(args, "nodes", None) else []
    return supervisor.main([args.action, "--state", str(args.state), *only, *nodes])


def cmd_models(args: argparse.Namespace, call: Call | None = None) -> int:
    from .. import models

    argv = [args.action]
    if args.model:
        argv += ["--model", args.model]
    if args.lexicon:
        argv += ["--lexicon"]
    if args.dest:
        argv += ["--dest", str(args.dest)]
    return models.main(argv)
