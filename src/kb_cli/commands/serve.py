"""`kb serve`: every handler behind a local HTTP gateway and the Lambda Invoke API, on the state directory."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..local_env import (
    DEFAULT_STATE,
    OPERATOR_FILE,
    STATE_FILE,
    LocalRanking,
    _write_private,
    local_container,
    operator_credential,
)
from . import Call, Subparsers

if TYPE_CHECKING:
    from knowledge_core.bootstrap import Container

    from ..gateway import WorkerHandlers

EMBED_FUNCTION = "EmbedFunction"  # the template's logical id of the function that runs the models


def register(sub: Subparsers) -> None:
    p = sub.add_parser("serve", help="run every handler behind a local HTTP gateway and Lambda Invoke API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument(
        "--state", default=str(DEFAULT_STATE), help="state directory (SQLite index, secret, token)"
    )
    p.add_argument("--no-demo", action="store_true", help="do not seed the demo workspace")
    p.add_argument(
        "--ingest-root",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory whose files ingestion jobs may name by path (repeatable; default: none, "
        "`kb ingest DIR` then uploads the files itself)",
    )
    p.add_argument("--search-backend", choices=["sqlite", "opensearch"], default="sqlite")
    p.add_argument("--opensearch-url")
    p.add_argument(
        "--state-backend",
        choices=["sqlite", "dynamodb"],
        help="where tokens, sources, agents, runs and ledgers live (default: sqlite under --state; "
        "dynamodb when --dynamodb-endpoint is given)",
    )
    p.add_argument("--dynamodb-endpoint")
    p.add_argument(
        "--instances",
        type=int,
        default=max(2, min(4, os.cpu_count() or 2)),
        help="worker processes per function at most (each takes one event at a time, as on Lambda)",
    )
    p.add_argument(
        "--embed-instances",
        type=int,
        default=1,
        help="worker processes of the embed function at most (each holds the models; default 1)",
    )
    p.add_argument("--verbose", action="store_true", help="also print the handlers' logs and metrics")
    p.add_argument(
        "--embedding-model",
        default="auto",
        help="hybrid ranking: a model directory (or a directory of them), 'none' for BM25, or 'auto' "
        "(default): $KB_EMBEDDING_MODEL_DIR, else the per-user cache `kb models fetch` fills, else BM25",
    )
    p.add_argument(
        "--query-translation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="expand queries across Chinese and English with the lexicon `kb models fetch` compiles "
        "($KB_LEXICON_DIR, else the per-user cache; default: on when it is there, unless "
        "KB_QUERY_TRANSLATION=false)",
    )
    p.set_defaults(func=cmd_serve)


def _demo_token(container: Container, token_file: Path) -> str:
    """The demo token of an earlier start while it is still valid (for the default tenant); otherwise a new
    one."""
    from knowledge_core.services.access import token_hash

    from .. import demo

    if token_file.exists():
        token = token_file.read_text(encoding="utf-8").strip()
        session = container.state.sessions.get_session(token_hash(token))
        if (
            session is not None
            and not session.revoked
            and session.expires_at > container.clock.now() + 60
            and session.tenant == demo.DEFAULT_TENANT  # one of an older state sees no documents now
        ):
            return token
    token = demo.issue_token(container)
    _write_private(token_file, token + "\n")
    return token


def _orphaned_sources(container: Container, state: Path) -> list[str]:
    """Sources that have documents in the index but are not in the registry (an older kb serve kept
    its registry in memory)."""
    from contextlib import closing

    from knowledge_core.adapters.sqlite.driver import sqlite3  # the service's own library (driver.py)

    index = state / "search.sqlite3"
    if container.settings.search_backend != "sqlite" or not index.exists():
        return []
    with closing(sqlite3.connect(index)) as conn:
        try:
            keys = [k for (k,) in conn.execute("SELECT DISTINCT source_key FROM documents")]
        except sqlite3.Error:
            return []
    if not keys:
        return []
    known = container.state.registry.get_sources(keys)
    return sorted(k for k, source in known.items() if source is None)


def cmd_serve(args: argparse.Namespace, call: Call | None = None) -> int:
    state = Path(args.state)
    args.state_backend = args.state_backend or ("dynamodb" if args.dynamodb_endpoint else "sqlite")
    if args.state_backend == "dynamodb" and not args.dynamodb_endpoint:
        raise SystemExit("kb serve: --state-backend dynamodb needs --dynamodb-endpoint URL")
    fresh_state = not (state / STATE_FILE).exists()
    ranking = _resolve_ranking(args)
    if ranking is None:
        return 2
    from ..gateway import WorkerHandlers

    # Every function as worker processes; the models only in the embed function's (SPEC §0): this process
    # and the other workers hand it their texts.
    handlers = WorkerHandlers(
        max_instances=args.instances,
        verbose=args.verbose,
        limits={EMBED_FUNCTION: max(1, args.embed_instances)},
    )
    try:
        container = _open_state(args, state, ranking, handlers)
        if container is None:
            return 2
        if fresh_state and container.table is None:
            _note_orphans(container, state)
        if not args.no_demo:
            _seed_demo(container, state, embedded=ranking.model_dir is not None)
        return _listen(args, container, state, ranking, handlers)
    finally:
        handlers.close(grace_s=3.0)  # bounded: the instances save their pending dense graphs first


def _resolve_ranking(args: argparse.Namespace) -> LocalRanking | None:
    """The embedding models and the lexicon in force; None (after one line on stderr) when one named
    cannot be used."""
    from .. import models

    try:  # the check loads the models: in a child process, so this one never holds them
        return LocalRanking.resolve_elsewhere(args.embedding_model, args.query_translation)
    except models.ModelError as exc:
        print(f"kb serve: {exc}", file=sys.stderr)
        return None


def _open_state(
    args: argparse.Namespace, state: Path, ranking: LocalRanking, handlers: WorkerHandlers
) -> Container | None:
    """The container on the state directory (or table), opened and migrated now; None (after one line on
    stderr) when the state file cannot be used."""
    from knowledge_core.adapters.sqlite.db import SchemaError

    try:
        container = local_container(
            state,
            search_backend=args.search_backend,
            opensearch_url=args.opensearch_url,
            dynamodb_endpoint=args.dynamodb_endpoint if args.state_backend == "dynamodb" else None,
            ranking=ranking,
            ingest_roots=args.ingest_root,
            embed_function=EMBED_FUNCTION,
            embed_invoke=lambda event, timeout: handlers.invoke(EMBED_FUNCTION, event),
        )
        if container.table is None:
            container.state  # noqa: B018 - open (and migrate) the state file now, not on the first request
    except SchemaError as exc:
        print(f"kb serve: {exc}", file=sys.stderr)
        return None
    return container


def _note_orphans(container: Container, state: Path) -> None:
    orphans = _orphaned_sources(container, state)
    if orphans:
        print(
            f"note: {state} was written by an older kb serve that kept sources, agents and tokens in "
            f"memory; the index still holds documents of {', '.join(orphans)}. Publish those sources "
            "again (kb publish source FILE.json) to make them searchable, or delete "
            f"{state / 'search.sqlite3'} to start empty."
        )


def _seed_demo(container: Container, state: Path, *, embedded: bool = False) -> None:
    """Seed the demo workspace unless it is there: its text is stored now (seconds) and, with a model in
    force (`embedded`, said first), its passages' vectors are filled once kb serve listens (`_listen`)."""
    from .. import demo

    if note := demo.seeding_note(container, embedded):
        print(note, flush=True)
    moved = demo.adopt_default_tenant(container)
    seeded = demo.seed_if_absent(container, vectors_later=True)
    token_file = state / "demo-token"
    token = _demo_token(container, token_file)
    if moved:
        print(
            f"note: {state} is from before the default tenant: {moved} document(s) of demo-docs@1.0.0 moved "
            f"from tenant '{demo.LEGACY_TENANT}' to '{demo.DEFAULT_TENANT}' and the demo token below is new "
            "(tokens issued with --tenant demo no longer see them)"
        )
    what = "seeded" if seeded else "kept"
    key = f"{demo.SOURCE['id']}@{demo.SOURCE['version']}"
    count = len(container.backend.document_ids(key))  # what is stored, not what was seeded
    print(f"demo workspace 'demo' {what}: {count} documents in {key} (tenant {demo.DEFAULT_TENANT})")
    print(f"bearer token for route demo (also in {token_file}):\n{token}")


def _listen(
    args: argparse.Namespace,
    container: Container,
    state: Path,
    ranking: LocalRanking,
    handlers: WorkerHandlers,
) -> int:
    from ..gateway import LocalGateway, make_server
    from ..ingest_worker import IngestWorker
    from ..local_env import VectorFill

    container.backend.warm()  # in the background (the embedded backend's dense graphs); a no-op elsewhere
    worker = IngestWorker(container, verbose=args.verbose)
    worker.start()  # resumes any job a killed kb serve left behind, once its lease runs out
    operator = operator_credential(state)  # G-LOCAL: the admin and Invoke APIs and the console need it
    server = make_server(args.host, args.port, LocalGateway(handlers, operator), log_requests=True)
    host, port = str(server.server_address[0]), server.server_address[1]
    if container.settings.embed_function:
        _embed_through(handlers, f"http://{_loopback(host)}:{port}")
    where = f"DynamoDB at {args.dynamodb_endpoint}" if container.table else f"SQLite at {state / STATE_FILE}"
    backend = args.search_backend
    if backend == "sqlite":  # its full-text ranking: kb_bm25, built now if need be, or bm25() and why
        from knowledge_core.adapters.sqlite import rank

        backend = f"sqlite, ranked by {rank.described()}"
    print(
        f"kb serve listening on http://{host}:{port} (search backend: {backend}; "
        f"{ranking.banner(filling=container.backend.vectors_pending())}; state: {where}; "
        f"up to {args.instances} instances per function)",
        flush=True,
    )
    # In the URL's fragment, which a browser never sends: no request line or log holds the credential.
    print(
        f"console: http://{host}:{port}/console/#operator={operator} (loopback only; this URL holds the "
        f"operator credential, also in {state / OPERATOR_FILE})",
        flush=True,
    )
    fill = VectorFill(container, say=lambda line: print(line, flush=True))
    fill.start()  # BM25 answers meanwhile (every door: the state is the store's)
    stop_on_sigterm = threading.current_thread() is threading.main_thread()  # (signal's own condition)
    if stop_on_sigterm:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        if stop_on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one stops at once
        # Within 10 s of a SIGTERM, even mid-embedding: each part stops after its batch, or is left behind.
        server.server_close()
        fill.stop(timeout=2.0)
        worker.stop(timeout=2.0)
        handlers.close(grace_s=3.0)  # bounded: the instances save their pending dense graphs first
        container.close()  # and this process its own (bounded, never raises)
    return 0


def _embed_through(handlers: WorkerHandlers, endpoint: str) -> None:
    """The function workers started from now on reach the embed worker through this server's Invoke API
    (`endpoint`), knowing its models already (no request at their start, when it may be busy filling)."""
    from ..gateway import FunctionError

    os.environ["KB_EMBED_ENDPOINT"] = endpoint
    try:
        described = handlers.invoke(EMBED_FUNCTION, {"op": "describe"})
    except FunctionError:
        described = None  # (each worker asks at its start instead)
    if isinstance(described, dict) and "models" in described:
        os.environ["KB_EMBED_DESCRIPTION"] = json.dumps(described, ensure_ascii=False)
    threading.Thread(target=_warm_models, args=(handlers,), name="kb-embed-warm", daemon=True).start()


def _warm_models(handlers: WorkerHandlers) -> None:
    """Load the embed worker's models now (one query through every model), not at the first search: on a
    state whose vectors are in, that search would wait about 2 s for them."""
    try:
        handlers.invoke(EMBED_FUNCTION, {"op": "query", "text": "warm-up 预热", "across": True})
    except Exception:  # (stopping, or models that fail: the first search reports it as before)
        return


def _loopback(host: str) -> str:
    """The address this server's own workers reach it at (a wildcard bind answers on loopback too)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class _Terminated(Exception):
    """SIGTERM (a supervisor, `docker stop`, a test's terminate()): kb serve stops as on Ctrl-C."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated
