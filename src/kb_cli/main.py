"""The `kb` command: run the service locally, operate it, and drive its handlers."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .http import DEFAULT_ENDPOINT, ApiError, call, seg

if TYPE_CHECKING:
    from knowledge_core.bootstrap import Container

DEFAULT_STATE = Path(".kb-state")
STATE_FILE = "state.sqlite3"  # beside search.sqlite3: sources, agents, tokens, runs, turns, ledgers


# --- local runtime ------------------------------------------------------------------------------------


def configure_local_env(
    state: Path,
    *,
    search_backend: str = "sqlite",
    opensearch_url: str | None = None,
    dynamodb_endpoint: str | None = None,
) -> None:
    """Environment for the handlers of this process (and its workers): state and search embedded on
    SQLite under `state` unless real endpoints are given. The directory is 0700 and its files 0600
    (G-LOCAL): those an earlier kb left wider are narrowed here, the databases as they are opened."""
    from knowledge_core.adapters.private_files import private_path

    private_path(state, directory=True)
    for name in ("token-secret", "token-secret.previous", "demo-token"):
        if (state / name).exists():
            private_path(state / name)
    secret_file = state / "token-secret"
    if not secret_file.exists():
        _write_private(secret_file, secrets.token_urlsafe(48))
    env = {
        # Read from the file (and token-secret.previous) every few seconds: `kb secret rotate` takes effect
        # in a running `kb serve` without a restart.
        "KB_TOKEN_SECRET_FILE": str(secret_file.resolve()),
        "KB_SECRET_REFRESH_SECONDS": os.environ.get("KB_SECRET_REFRESH_SECONDS", "5"),
        "KB_SEARCH_BACKEND": search_backend,
        "KB_SQLITE_PATH": str(state / "search.sqlite3"),
        "KB_STATE_BACKEND": "dynamodb" if dynamodb_endpoint else "sqlite",
        "KB_STATE_PATH": str(state / STATE_FILE),
        "KB_TABLE_NAME": os.environ.get("KB_TABLE_NAME", "agent-knowledge"),
        # Every function runs in its own processes here: without a registry cache, a disabled source or an
        # ended run is seen by the next request (local reads are cheap); on Lambda the default is 2 s.
        "KB_REGISTRY_CACHE_SECONDS": os.environ.get("KB_REGISTRY_CACHE_SECONDS", "0"),
        # The admin API answers on loopback only here, so an ingestion job may name a local directory
        # (unless the caller says otherwise: the fuzz run reads none of this machine's files).
        "KB_INGEST_DIRECTORIES": os.environ.get("KB_INGEST_DIRECTORIES", "true"),
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "AgentKnowledge",
        "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
    }
    if opensearch_url:
        env["KB_OPENSEARCH_URL"] = opensearch_url
    if os.environ.get("KB_EMBEDDING_MODEL_DIR"):  # hybrid ranking: re-seeding must not re-embed the corpus
        env["KB_EMBEDDING_CACHE"] = os.environ.get(
            "KB_EMBEDDING_CACHE", str(state / "embedding-cache.sqlite3")
        )
    if dynamodb_endpoint:
        env["KB_DYNAMODB_ENDPOINT"] = dynamodb_endpoint
        env.setdefault("AWS_ACCESS_KEY_ID", os.environ.get("AWS_ACCESS_KEY_ID", "local"))
        env.setdefault("AWS_SECRET_ACCESS_KEY", os.environ.get("AWS_SECRET_ACCESS_KEY", "local"))
    os.environ.pop("KB_TOKEN_SECRET", None)  # the file is the one source locally
    os.environ.update(env)


def _write_private(path: Path, text: str) -> None:
    """Create (or replace) a file readable by its owner only, from the first byte: written to a new 0600
    file beside it, then renamed over it (an existing file's wider mode never applies)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def local_container(state: Path, **kwargs: Any) -> Container:
    configure_local_env(state, **kwargs)
    from knowledge_core import bootstrap

    bootstrap.reset()
    container = bootstrap.container()
    if container.table is not None:
        container.table.create()
    container.admin.prepare_search()  # deploy time, locally: the read path never creates indices
    return container


def _demo_token(container: Container, token_file: Path) -> str:
    """The demo token of an earlier start while it is still valid; otherwise a new one."""
    from knowledge_core.services.access import token_hash

    from . import demo

    if token_file.exists():
        token = token_file.read_text(encoding="utf-8").strip()
        session = container.state.sessions.get_session(token_hash(token))
        if session is not None and not session.revoked and session.expires_at > container.clock.now() + 60:
            return token
    token = demo.issue_token(container)
    _write_private(token_file, token + "\n")
    return token


def _orphaned_sources(container: Container, state: Path) -> list[str]:
    """Sources that have documents in the index but are not in the registry (an older kb serve kept
    its registry in memory)."""
    import sqlite3

    index = state / "search.sqlite3"
    if container.settings.search_backend != "sqlite" or not index.exists():
        return []
    with sqlite3.connect(index) as conn:
        try:
            keys = [k for (k,) in conn.execute("SELECT DISTINCT source_key FROM documents")]
        except sqlite3.Error:
            return []
    if not keys:
        return []
    known = container.state.registry.get_sources(keys)
    return sorted(k for k, source in known.items() if source is None)


def cmd_serve(args: argparse.Namespace) -> int:
    from knowledge_core.adapters.sqlite_db import SchemaError

    from . import demo
    from .gateway import LocalGateway, WorkerHandlers, make_server
    from .ingest_worker import IngestWorker

    state = Path(args.state)
    args.state_backend = args.state_backend or ("dynamodb" if args.dynamodb_endpoint else "sqlite")
    if args.state_backend == "dynamodb" and not args.dynamodb_endpoint:
        raise SystemExit("kb serve: --state-backend dynamodb needs --dynamodb-endpoint URL")
    fresh_state = not (state / STATE_FILE).exists()
    from . import models

    try:
        model_dir, ranking = models.resolve(args.embedding_model)
    except models.ModelError as exc:
        print(f"kb serve: {exc}", file=sys.stderr)
        return 2
    if model_dir:
        os.environ["KB_EMBEDDING_MODEL_DIR"] = model_dir
    else:
        os.environ.pop("KB_EMBEDDING_MODEL_DIR", None)
    try:
        lexicon_dir, translation = models.resolve_lexicon(args.query_translation)
    except models.ModelError as exc:
        print(f"kb serve: {exc}", file=sys.stderr)
        return 2
    os.environ["KB_QUERY_TRANSLATION"] = "true" if lexicon_dir else "false"
    if lexicon_dir:
        os.environ["KB_LEXICON_DIR"] = lexicon_dir
    try:
        container = local_container(
            state,
            search_backend=args.search_backend,
            opensearch_url=args.opensearch_url,
            dynamodb_endpoint=args.dynamodb_endpoint if args.state_backend == "dynamodb" else None,
        )
        if container.table is None:
            container.state  # noqa: B018 - open (and migrate) the state file now, not on the first request
    except SchemaError as exc:
        print(f"kb serve: {exc}", file=sys.stderr)
        return 2
    if fresh_state and container.table is None:
        orphans = _orphaned_sources(container, state)
        if orphans:
            print(
                f"note: {state} was written by an older kb serve that kept sources, agents and tokens in "
                f"memory; the index still holds documents of {', '.join(orphans)}. Publish those sources "
                "again (kb publish source FILE.json) to make them searchable, or delete "
                f"{state / 'search.sqlite3'} to start empty."
            )
    if not args.no_demo:
        seeded = demo.seed_if_absent(container)
        token_file = state / "demo-token"
        token = _demo_token(container, token_file)
        what = "seeded" if seeded else "kept"
        print(f"demo workspace 'demo' {what}: {len(demo.demo_documents())} documents in demo-docs@1.0.0")
        print(f"bearer token for route demo (also in {token_file}):\n{token}")
    worker = IngestWorker(container, verbose=args.verbose)
    worker.start()  # resumes any job a killed kb serve left behind, once its lease runs out
    handlers = WorkerHandlers(max_instances=args.instances, verbose=args.verbose)
    server = make_server(args.host, args.port, LocalGateway(handlers), log_requests=True)
    host, port = str(server.server_address[0]), server.server_address[1]
    where = f"DynamoDB at {args.dynamodb_endpoint}" if container.table else f"SQLite at {state / STATE_FILE}"
    print(
        f"kb serve listening on http://{host}:{port} (search backend: {args.search_backend}; "
        f"ranking: {ranking}; query translation: {translation}; state: {where}; "
        f"up to {args.instances} instances per function)",
        flush=True,
    )
    print(f"console: http://{host}:{port}/console/ (loopback only)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        worker.stop()
        handlers.close()
    return 0


def rotate_secret(state: Path) -> None:
    """The current token secret becomes the previous one (still verified) and a new one signs."""
    from knowledge_core.adapters.private_files import private_path

    private_path(state, directory=True)
    current, previous = state / "token-secret", state / "token-secret.previous"
    if current.exists():
        _write_private(previous, current.read_text(encoding="utf-8"))
    _write_private(current, secrets.token_urlsafe(48))


def cmd_secret_rotate(args: argparse.Namespace) -> int:
    state = Path(args.state)
    rotate_secret(state)
    print(
        f"rotated {state / 'token-secret'}: new refs are signed with the new secret; refs signed with the "
        f"previous one still verify (kept in {state / 'token-secret.previous'}) until the next rotation. "
        "A running kb serve picks it up within KB_SECRET_REFRESH_SECONDS (5 s)."
    )
    return 0


def cmd_invoke(args: argparse.Namespace) -> int:
    from .events import load_event

    event = load_event(args.event)
    if args.endpoint:
        result = call(args.endpoint, "POST", f"/2015-03-31/functions/{seg(args.function)}/invocations", event)
    else:
        from . import demo
        from .gateway import Handlers

        # Handler output (EMF metrics, logs) goes to stderr, as with `sam local invoke`: stdout is the result.
        with tempfile.TemporaryDirectory(prefix="kb-invoke-") as tmp, contextlib.redirect_stdout(sys.stderr):
            demo.seed(local_container(Path(tmp)), with_token=False)
            result = Handlers().invoke(args.function, event)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from .mcp_server import cmd_mcp as run

    return run(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from . import evaluation

    return evaluation.run(args)


def cmd_services(args: argparse.Namespace) -> int:
    from . import services

    return services.main([args.action, "--state", str(args.state)])


def cmd_models(args: argparse.Namespace) -> int:
    from . import models

    argv = [args.action]
    if args.model:
        argv += ["--model", args.model]
    if args.lexicon:
        argv += ["--lexicon"]
    if args.dest:
        argv += ["--dest", str(args.dest)]
    return models.main(argv)


# --- admin API commands -----------------------------------------------------------------------------


def cmd_token_issue(args: argparse.Namespace) -> int:
    body = {
        "routes": [args.route],
        "client_id": args.client,
        "subject": args.subject,
        "tenant": args.tenant,
        "ttl_seconds": args.ttl,
    }
    if args.session:
        body["session_id"] = args.session
    if args.on_behalf_of:
        body["on_behalf_of"] = args.on_behalf_of
    print(call(args.endpoint, "POST", "/admin/v1/tokens", body)["token"])
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    tokens = call(args.endpoint, "GET", "/admin/v1/tokens")["tokens"]
    if args.json:
        print(json.dumps(tokens, ensure_ascii=False, indent=2))
        return 0
    for t in tokens:
        state = "revoked" if t["revoked"] else "active"
        print(
            f"{t['token_id']}  {state:7}  tenant={t['tenant']} client={t['client_id']} "
            f"subject={t['subject']} routes={','.join(t['routes'])} expires_at={t['expires_at']}"
        )
    print(f"{len(tokens)} token(s)", file=sys.stderr)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    token_id = args.token_id
    if token_id.startswith("kbt_"):  # the token itself: revoke it by its id without sending it anywhere
        import hashlib

        from knowledge_core.domain.models import token_id_of

        token_id = token_id_of(hashlib.sha256(token_id.encode("utf-8")).hexdigest())
    call(args.endpoint, "POST", f"/admin/v1/tokens/{seg(token_id)}/revoke", {})
    print(f"revoked {token_id}")
    return 0


def _is_loopback(endpoint: str) -> bool:
    from urllib.parse import urlparse

    return (urlparse(endpoint).hostname or "") in ("127.0.0.1", "localhost", "::1")


def _acl(args: argparse.Namespace) -> dict:
    """The documents' tenant (SPEC §1: always named) and the tenants they are shared with."""
    return {"tenant": args.tenant, "shared_tenants": list(args.share_tenant or [])}


def _file_document(args: argparse.Namespace, doc_id: str, file: Path, uri: str, title: str | None) -> dict:
    """A file as a job document: Markdown/text as a body (title from its `# heading`), other formats as
    bytes the worker extracts. `uri` is what the caller named or the path relative to the directory: never
    this machine's absolute path, which agents would see in references."""
    import base64

    from knowledge_core.domain.ingestion import file_format

    from .demo import markdown_document

    source = {"uri": uri}
    acl = _acl(args)
    if file_format(file.name) in ("markdown", "text"):
        doc = markdown_document(args.source, doc_id, file.read_text(encoding="utf-8"), title)
        return {
            "doc_id": doc_id,
            "title": doc.title,
            "body": doc.body,
            "structured_source": source,
            "acl": acl,
        }
    document = {
        "doc_id": doc_id,
        "filename": file.name,
        "content_base64": base64.b64encode(file.read_bytes()).decode("ascii"),
        "structured_source": source,
        "acl": acl,
    }
    if title:
        document["title"] = title
    return document


def _inline_jobs(args: argparse.Namespace, path: Path) -> list[dict]:
    """Job requests carrying the files themselves (a single file, or a directory on a remote endpoint),
    at most 500 documents and about 5 MB each."""
    from knowledge_core.domain.ingestion import FORMATS, directory_doc_id

    if path.is_dir():
        prefix = args.doc_id or ""
        files = [
            (directory_doc_id(prefix, p.relative_to(path)), p, p.relative_to(path).as_posix())
            for p in sorted(path.rglob("*"))
            if p.is_file() and p.suffix.lower() in FORMATS
        ]
        title = None
    else:
        if not args.doc_id:
            raise SystemExit("kb ingest: --doc-id is required for a single file")
        files, title = [(args.doc_id, path, args.file)], args.title
    jobs: list[dict] = []
    batch: list[dict] = []
    size = 0
    for doc_id, file, uri in files:
        document = _file_document(args, doc_id, file, uri, title)
        weight = len(document.get("body") or document.get("content_base64") or "")
        if batch and (len(batch) >= 500 or size + weight > 5_000_000):
            jobs.append({"documents": batch})
            batch, size = [], 0
        batch.append(document)
        size += weight
    if batch:
        jobs.append({"documents": batch})
    return jobs


def _job_line(job: dict) -> str:
    counts = job["counts"]
    handled = counts["done"] + counts["unchanged"] + counts["failed"]
    return (
        f"job {job['job_id']} {job['state']}: {handled}/{job['total']} documents "
        f"({counts['done']} done, {counts['unchanged']} unchanged, {counts['failed']} failed, "
        f"{counts['deleted']} deleted), {job['passages']} passages"
    )


def _wait_for_jobs(args: argparse.Namespace, job_ids: list[str], total: int) -> list[dict]:
    """Poll the jobs until they complete: a progress bar on a terminal (documents, passages, rate, ETA),
    a plain line every few seconds otherwise."""
    import time

    from tqdm import tqdm

    base = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs/"
    tty = sys.stderr.isatty()
    bar = tqdm(total=total, unit="doc", disable=not tty, dynamic_ncols=True)
    finished: dict[str, dict] = {}
    last_line = 0.0
    try:
        while len(finished) < len(job_ids):
            jobs = [finished.get(j) or call(args.endpoint, "GET", base + seg(j)) for j in job_ids]
            for job in jobs:
                if job["state"] == "completed":
                    finished[job["job_id"]] = job
            handled = sum(
                j["counts"]["done"] + j["counts"]["unchanged"] + j["counts"]["failed"] for j in jobs
            )
            bar.update(handled - bar.n)
            bar.set_postfix(passages=sum(j["passages"] for j in jobs), refresh=False)
            if not tty and (time.monotonic() - last_line > 2 or len(finished) == len(job_ids)):
                for job in jobs:
                    print(_job_line(job), flush=True)
                last_line = time.monotonic()
            if len(finished) < len(job_ids):
                time.sleep(0.2)
    finally:
        bar.close()
    return [finished[j] for j in job_ids]


def cmd_ingest(args: argparse.Namespace) -> int:
    path = Path(args.file)
    sync = getattr(args, "sync", False)  # callers building their own Namespace may leave the job flags out
    if path.is_dir() and _is_loopback(args.endpoint):
        # kb serve reads the directory itself (its admin API answers on loopback only).
        body: dict[str, Any] = {
            "directory": str(path.resolve()),
            "doc_id_prefix": args.doc_id or "",
            "acl": _acl(args),
        }
        if sync:
            body["sync"] = True
        requests = [body]
    else:
        if sync:
            raise SystemExit("kb ingest: --sync needs a directory and a kb serve on this machine")
        requests = _inline_jobs(args, path)
    responses = [
        call(args.endpoint, "POST", f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs", request)
        for request in requests
    ]
    accepted = [a for a in responses if isinstance(a, dict) and "job_id" in a]
    if getattr(args, "no_wait", False):
        for job in accepted:
            print(job["job_id"])
        return 0
    jobs = _wait_for_jobs(args, [a["job_id"] for a in accepted], sum(a["total"] for a in accepted))
    ingested = sum(j["counts"]["done"] + j["counts"]["unchanged"] for j in jobs)
    failed = [(e["doc_id"], e["code"]) for j in jobs for e in j["errors"]]
    print(f"ingested {ingested} document(s) into {args.source}", end="")
    unchanged = sum(j["counts"]["unchanged"] for j in jobs)
    deleted = sum(j["counts"]["deleted"] for j in jobs)
    print(f" ({unchanged} unchanged, {len(failed)} failed, {deleted} deleted)")
    for doc_id, code in failed:
        print(f"  {doc_id}: {code}", file=sys.stderr)
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    base = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs"
    if args.action == "list":
        for job in call(args.endpoint, "GET", base)["jobs"]:
            print(f"{job['created_at']}  {_job_line(job)}")
        return 0
    if not args.job_id:
        raise SystemExit("kb job status: give a JOB_ID")
    job = call(args.endpoint, "GET", f"{base}/{seg(args.job_id)}")
    if args.json:
        print(json.dumps(job, ensure_ascii=False, indent=2))
        return 0
    print(_job_line(job))
    for key in ("created_at", "started_at", "finished_at"):
        if job[key]:
            print(f"  {key}: {job[key]}")
    for error in job["errors"]:
        print(f"  {error['doc_id']}: {error['code']}")
    return 0


def cmd_tenant_migrate(args: argparse.Namespace) -> int:
    """Documents stored before every document named its tenant are visible to no one: list them, and with
    --apply assign them a tenant. Never silent: it prints what it finds and what it does."""
    path = f"/admin/v1/sources/{seg(args.source)}/tenant-migration"
    result = call(args.endpoint, "POST", path, {"tenant": args.tenant, "apply": bool(args.apply)})
    docs = result["documents"]
    verb = "assigned" if args.apply else "would assign (dry run; add --apply)"
    print(f"{args.source}: {len(docs)} document(s) without a tenant; {verb} tenant {args.tenant!r}")
    for doc_id in docs:
        print(f"  {doc_id}")
    return 0


def cmd_doc(args: argparse.Namespace) -> int:
    base = f"/admin/v1/sources/{seg(args.source)}/documents/{seg(args.doc_id)}"
    if args.action == "delete":
        call(args.endpoint, "DELETE", base)
    else:
        call(args.endpoint, "POST", f"{base}/{args.action}", {})
    print(f"{args.action.removesuffix('e')}ed {args.source} {args.doc_id}")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    definition = json.loads(Path(args.file).read_text(encoding="utf-8"))
    result = call(args.endpoint, "POST", f"/admin/v1/{args.kind}s", definition)
    key = f"{definition.get('id')}@{definition.get('version')}"
    print(
        f"published {args.kind} {key}"
        if result["created"]
        else f"{args.kind} {key} already published (identical)"
    )
    return 0


def cmd_workspace_set(args: argparse.Namespace) -> int:
    call(args.endpoint, "PUT", f"/admin/v1/workspaces/{seg(args.route)}", {"agent": args.agent})
    print(f"workspace {args.route} -> {args.agent}")
    return 0


def cmd_source(args: argparse.Namespace) -> int:
    call(args.endpoint, "POST", f"/admin/v1/sources/{seg(args.source)}/{args.action}", {})
    print(f"{args.source} {args.action}d")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    state = {"complete": "completed", "cancel": "cancelled"}[args.action]
    call(args.endpoint, "POST", f"/admin/v1/runs/{seg(args.run_id)}/end", {"state": state})
    print(f"run {args.run_id} {state}")
    return 0


# --- parser -------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kb", description="Agent Knowledge Service tools")
    sub = parser.add_subparsers(dest="command", required=True)

    def endpoint(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--endpoint", default=DEFAULT_ENDPOINT, help="kb serve / API base URL (env KB_ENDPOINT)"
        )

    p = sub.add_parser("serve", help="run every handler behind a local HTTP gateway and Lambda Invoke API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument(
        "--state", default=str(DEFAULT_STATE), help="state directory (SQLite index, secret, token)"
    )
    p.add_argument("--no-demo", action="store_true", help="do not seed the demo workspace")
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
        default=True,
        help="expand queries across Chinese and English with the lexicon `kb models fetch` compiles "
        "($KB_LEXICON_DIR, else the per-user cache; default: on when it is there)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("token", help="bearer tokens")
    tsub = p.add_subparsers(dest="action", required=True)
    t = tsub.add_parser("issue", help="issue a bearer token for a route")
    endpoint(t)
    t.add_argument("--route", required=True)
    t.add_argument("--client", default="cli")
    t.add_argument("--session")
    t.add_argument("--subject", default="user")
    t.add_argument("--on-behalf-of")
    t.add_argument("--tenant", default="default")
    t.add_argument("--ttl", type=int, default=3600, help="seconds")
    t.set_defaults(func=cmd_token_issue)
    t = tsub.add_parser("list", help="issued, unexpired tokens (ids, never the tokens)")
    endpoint(t)
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_token_list)
    t = tsub.add_parser("revoke", help="revoke a token: refused everywhere from the next request on")
    endpoint(t)
    t.add_argument("token_id", help="tok_… from `kb token list` (or the kbt_… token itself)")
    t.set_defaults(func=cmd_token_revoke)

    p = sub.add_parser(
        "ingest",
        help="create or replace documents from a file or a directory (Markdown, text, HTML, PDF, DOCX) "
        "through an ingestion job",
    )
    endpoint(p)
    p.add_argument("--source", required=True, help="exact id@version")
    p.add_argument("--doc-id", help="document id (a prefix for a directory)")
    p.add_argument("--title")
    p.add_argument("--tenant", default="default", help="the documents' tenant (SPEC §1: always named)")
    p.add_argument(
        "--share-tenant", action="append", metavar="TENANT", help="also visible to this tenant (repeatable)"
    )
    p.add_argument(
        "--sync", action="store_true", help="directory: also delete documents under the prefix that left it"
    )
    p.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    p.add_argument("file")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("tenant", help="document tenants")
    tnsub = p.add_subparsers(dest="action", required=True)
    t = tnsub.add_parser(
        "migrate", help="list a source's documents stored without a tenant; --apply assigns them one"
    )
    endpoint(t)
    t.add_argument("--source", required=True, help="exact id@version")
    t.add_argument("--tenant", required=True)
    t.add_argument("--apply", action="store_true", help="change them (default: only say what would change)")
    t.set_defaults(func=cmd_tenant_migrate)

    p = sub.add_parser("job", help="ingestion jobs: status of one, or the latest of a source")
    p.add_argument("action", choices=["status", "list"])
    p.add_argument("job_id", nargs="?")
    endpoint(p)
    p.add_argument("--source", required=True, help="exact id@version")
    p.add_argument("--json", action="store_true", help="status: the whole job as JSON")
    p.set_defaults(func=cmd_job)

    p = sub.add_parser("doc", help="delete, disable or enable a document")
    p.add_argument("action", choices=["delete", "disable", "enable"])
    endpoint(p)
    p.add_argument("--source", required=True)
    p.add_argument("--doc-id", required=True)
    p.set_defaults(func=cmd_doc)

    p = sub.add_parser("publish", help="publish an immutable source or agent version")
    p.add_argument("kind", choices=["source", "agent"])
    p.add_argument("file")
    endpoint(p)
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser(
        "workspace", help="point a workspace route at an agent version (rollback = point back)"
    )
    wsub = p.add_subparsers(dest="action", required=True)
    w = wsub.add_parser("set")
    w.add_argument("route")
    w.add_argument("--agent", required=True, help="exact id@version")
    endpoint(w)
    w.set_defaults(func=cmd_workspace_set)

    p = sub.add_parser("source", help="enable or disable a published source")
    p.add_argument("action", choices=["enable", "disable"])
    endpoint(p)
    p.add_argument("--source", required=True)
    p.set_defaults(func=cmd_source)

    p = sub.add_parser("run", help="end a run")
    p.add_argument("action", choices=["complete", "cancel"])
    endpoint(p)
    p.add_argument("--run-id", required=True)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("secret", help="the local token secret")
    ssub = p.add_subparsers(dest="action", required=True)
    s = ssub.add_parser("rotate", help="new current secret; the old one is kept as previous (still verifies)")
    s.add_argument("--state", default=str(DEFAULT_STATE))
    s.set_defaults(func=cmd_secret_rotate)

    p = sub.add_parser("invoke", help="run one event through a handler, as sam local invoke would")
    p.add_argument("function", help="logical id (SearchFunction) or short name (search)")
    p.add_argument("-e", "--event", required=True)
    p.add_argument("--endpoint", help="a running kb serve; default: in-process on fresh embedded state")
    p.set_defaults(func=cmd_invoke)

    p = sub.add_parser("mcp", help="the knowledge tools as an MCP server on stdio (remote or --embedded)")
    from .mcp_server import add_arguments as add_mcp_arguments

    add_mcp_arguments(p, DEFAULT_ENDPOINT, str(DEFAULT_STATE))
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser(
        "eval",
        help="retrieval quality (R@3, MRR@3, nDCG@10, R@100) of the search path on a test "
        "collection, beside a same-run BM25 baseline",
    )
    from .evaluation import add_arguments as add_eval_arguments

    add_eval_arguments(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("services", help="real OpenSearch and DynamoDB-API servers on loopback")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--state", default=str(DEFAULT_STATE))
    p.set_defaults(func=cmd_services)

    p = sub.add_parser("models", help="embedding models for hybrid ranking, from Maven Central")
    p.add_argument("action", choices=["fetch"])
    p.add_argument("--model", help="one model (default: every default model and the lexicon)")
    p.add_argument("--lexicon", action="store_true", help="only the query translation lexicon (no Java)")
    p.add_argument("--dest", help="default: the per-user model cache")
    p.set_defaults(func=cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ApiError as exc:
        print(f"kb: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"kb: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
