"""The local runtime's files and environment: the state directory, its private files, and the container of
this process built on them (shared by `kb serve`, `kb mcp --embedded`, `kb invoke` and `kb eval`)."""

from __future__ import annotations

import os
import secrets
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowledge_core.bootstrap import Container

DEFAULT_STATE = Path(".kb-state")
STATE_FILE = "state.sqlite3"  # beside search.sqlite3: sources, agents, tokens, runs, turns, ledgers


def configure_local_env(
    state: Path,
    *,
    search_backend: str = "sqlite",
    opensearch_url: str | None = None,
    dynamodb_endpoint: str | None = None,
) -> None:
    """Environment for the handlers of this process (and its workers): state and search embedded on
    SQLite under `state` unless real endpoints are given."""
    state.mkdir(parents=True, exist_ok=True)
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
        # The admin API answers on loopback only here, so an ingestion job may name a local directory.
        "KB_INGEST_DIRECTORIES": "true",
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "AgentKnowledge",
        "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
        # Handlers that add no metric make Powertools warn on every event; the worker processes inherit it.
        "PYTHONWARNINGS": _with_quiet_metrics(os.environ.get("PYTHONWARNINGS", "")),
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
    warnings.filterwarnings("ignore", message="No application metrics to publish")  # this process too


QUIET_METRICS_WARNING = "ignore:No application metrics to publish"


def _with_quiet_metrics(current: str) -> str:
    """PYTHONWARNINGS with Powertools' empty-metrics warning ignored (once), the caller's rules kept."""
    rules = [r for r in current.split(",") if r and r != QUIET_METRICS_WARNING]
    return ",".join([*rules, QUIET_METRICS_WARNING])


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


def rotate_secret(state: Path) -> None:
    """The current token secret becomes the previous one (still verified) and a new one signs."""
    state.mkdir(parents=True, exist_ok=True)
    current, previous = state / "token-secret", state / "token-secret.previous"
    if current.exists():
        _write_private(previous, current.read_text(encoding="utf-8"))
    _write_private(current, secrets.token_urlsafe(48))
