"""The local runtime's files and environment: the state directory, its private files, and the container of
this process built on them (shared by `kb serve`, `kb mcp --embedded`, `kb invoke` and `kb eval`)."""

from __future__ import annotations

import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowledge_core.adapters.remote_embedding import Invoke
    from knowledge_core.bootstrap import Container
    from knowledge_core.settings import Settings

# The state directory of `kb serve` and of the CLI that operates it: --state, else $KB_STATE, else this.
DEFAULT_STATE = Path(os.environ.get("KB_STATE") or ".kb-state")
STATE_FILE = "state.sqlite3"  # beside search.sqlite3: sources, agents, tokens, runs, turns, ledgers
# G-LOCAL: the local operator credential the admin API, the Invoke API and the console's admin actions need.
OPERATOR_FILE = "operator-credential"


@dataclass(frozen=True)
class LocalRanking:
    """The embedding models and the zh<->en lexicon the local runtime ranks with, resolved once the way
    every local door shares (`kb serve`, `kb mcp --embedded`, `kb invoke`), and how a banner says it."""

    model_dir: str | None = None
    lexicon_dir: str | None = None
    ranking: str = "BM25"
    translation: str = "off"

    @classmethod
    def resolve(cls, embedding_model: str = "auto", query_translation: bool | None = None) -> LocalRanking:
        """`auto`: `$KB_EMBEDDING_MODEL_DIR`, else the per-user cache `kb models fetch` fills, else BM25;
        the lexicon likewise (`query_translation` None: as `$KB_QUERY_TRANSLATION` says, default on). A
        directory named that cannot be used raises `models.ModelError`."""
        from . import models

        if query_translation is None:
            query_translation = os.environ.get("KB_QUERY_TRANSLATION", "true").lower() not in ("false", "0")
        model_dir, ranking = models.resolve(embedding_model)
        lexicon_dir, translation = models.resolve_lexicon(query_translation)
        return cls(model_dir, lexicon_dir, ranking, translation)

    @classmethod
    def resolve_elsewhere(
        cls, embedding_model: str = "auto", query_translation: bool | None = None
    ) -> LocalRanking:
        """`resolve`, its model check run in a child process: a process that only hands texts to an embed
        worker (kb serve's own) never holds the models the check loads."""
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            return pool.submit(cls.resolve, embedding_model, query_translation).result()

    def banner(self, filling: bool = False) -> str:
        """`filling`: passages wait for their vectors, so BM25 ranks until they are in."""
        ranking = f"BM25 while vectors fill in, then {self.ranking}" if filling else self.ranking
        return f"ranking: {ranking}; query translation: {self.translation}"


class VectorFill:
    """Passage vectors stored later (a first start's demo) filled in a background thread of this process
    (`SearchBackend.fill_vectors`), in small batches so `stop` ends it within one; until they are in, every
    door ranks by BM25 (the state is the store's). `say` gets one line when it ends."""

    def __init__(self, container: Container, say: Callable[[str], None]) -> None:
        self._container = container
        self._say = say
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kb-vector-fill", daemon=True)

    def start(self) -> bool:
        """Start filling when vectors are pending; False (nothing started) when none are."""
        if not self._container.backend.vectors_pending():
            self._done.set()
            return False
        self._thread.start()
        return True

    def _run(self) -> None:
        started = time.monotonic()
        try:
            if self._container.backend.fill_vectors(self._stop):
                took = time.monotonic() - started
                self._say(f"vectors filled in {took:.0f} s: hybrid ranking in force")
        except Exception as exc:  # the operator's console; BM25 keeps answering meanwhile
            self._say(f"filling vectors failed ({type(exc).__name__}); BM25 ranks until the next start")
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def stop(self, timeout: float = 3.0) -> None:
        """Stop after the batch under way (what is embedded is kept: the next start carries on)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)


def local_settings(
    state: Path,
    *,
    search_backend: str = "sqlite",
    opensearch_url: str | None = None,
    dynamodb_endpoint: str | None = None,
    ranking: LocalRanking | None = None,
    ingest_roots: list[str] | None = None,
    embed_function: str | None = None,
) -> Settings:
    """The settings of the local runtime: what the environment sets (`Settings.from_env`, the one table),
    with state and search embedded on SQLite under `state` unless real endpoints are given, and ranked as
    `ranking` says (default: as `kb serve` resolves it). `ingest_roots`: where a directory job may read
    (`--ingest-root`; default: $KB_INGEST_ROOTS, else none); `embed_function`: see `_embed_settings`."""
    from knowledge_core.adapters.private_files import private_path
    from knowledge_core.settings import Settings

    ranking = ranking or LocalRanking.resolve()
    # The directory is 0700 and its files 0600 (G-LOCAL): those an earlier kb left wider are narrowed here,
    # the databases as they are opened.
    private_path(state, directory=True)
    for name in ("token-secret", "token-secret.previous", "demo-token", OPERATOR_FILE):
        if (state / name).exists():
            private_path(state / name)
    secret_file = state / "token-secret"
    if not secret_file.exists():
        _write_private(secret_file, secrets.token_urlsafe(48))
    base = Settings.from_env()
    local = {
        # The file is the one secret locally, re-read every few seconds: `kb secret rotate` takes effect in
        # a running `kb serve` without a restart.
        "token_secret": None,
        "token_secret_previous": None,
        "token_secret_file": str(secret_file.resolve()),
        "secret_refresh_seconds": _unless_set(base, "secret_refresh_seconds", 5.0),
        "search_backend": search_backend,
        "sqlite_path": str(state / "search.sqlite3"),
        "opensearch_url": opensearch_url,
        "state_backend": "dynamodb" if dynamodb_endpoint else "sqlite",
        "state_path": str(state / STATE_FILE),
        "dynamodb_endpoint": dynamodb_endpoint,
        # Every function runs in its own processes here: without a registry cache, a disabled source or an
        # ended run is seen by the next request (local reads are cheap); on Lambda the default is 2 s.
        "registry_cache_seconds": _unless_set(base, "registry_cache_seconds", 0.0),
        # An ingestion job may name a local directory (unless KB_INGEST_DIRECTORIES=false: the fuzz run
        # reads none of this machine's files), and S3 prefixes.
        "ingest_directories": _unless_set(base, "ingest_directories", True),
        # Only under the roots the operator named (G-LOCAL): a request cannot make kb serve read elsewhere.
        "ingest_roots": os.pathsep.join(str(Path(root).resolve()) for root in ingest_roots)
        if ingest_roots
        else base.ingest_roots,
        "embedding_model_dir": ranking.model_dir,
        # Hybrid ranking: re-seeding (or a restart) must not re-embed the corpus.
        "embedding_cache": (base.embedding_cache or str(state / "embedding-cache.sqlite3"))
        if ranking.model_dir
        else None,
        "query_translation": ranking.lexicon_dir is not None,
        "lexicon_dir": ranking.lexicon_dir,
    } | _embed_settings(state, embed_function if ranking.model_dir else None)  # (no models: none to run)
    return Settings.model_validate({**base.model_dump(), **local})


def _embed_settings(state: Path, embed: str | None) -> dict[str, Any]:
    """The embed function the local functions reach the models through (kb serve's embed worker), with the
    operator credential's file; its endpoint and description are set once kb serve listens."""
    return {
        "embed_function": embed,
        "embed_endpoint": None,
        "embed_description": None,
        "embed_operator_file": str((state / OPERATOR_FILE).resolve()) if embed else None,
        "embed_models_s3_uri": None,
    }


def _unless_set(base: Settings, field: str, local_default: object) -> Any:
    """The environment's value of `field` (read once, by Settings.from_env), else the local default."""
    return getattr(base, field) if field in base.model_fields_set else local_default


def configure_local_env(state: Path, **kwargs: Any) -> Settings:
    """The local settings (`local_settings`), also written to this process's environment: the worker
    processes `kb serve` starts for its functions read them back with `Settings.from_env`."""
    from knowledge_core.settings import ENV

    settings = local_settings(state, **kwargs)
    for names in ENV.values():  # nothing stale from the shell or an earlier configuration of this process
        for name in names:
            os.environ.pop(name, None)
    os.environ.update(settings.to_env())
    os.environ.update(
        {
            "AWS_DEFAULT_REGION": settings.region,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_NAMESPACE": "AgentKnowledge",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
            # Handlers adding no metric make Powertools warn on every event; the worker processes inherit it.
            "PYTHONWARNINGS": _with_quiet_metrics(os.environ.get("PYTHONWARNINGS", "")),
        }
    )
    warnings.filterwarnings("ignore", message="No application metrics to publish")  # kb invoke runs here
    if settings.dynamodb_endpoint:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    return settings


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


class OperatorCredentialUnreadable(Exception):
    """The CLI cannot read the operator credential of `--state` (another user's kb serve, or none there)."""


def operator_credential(state: Path) -> str:
    """G-LOCAL: the local operator credential of `state`, created once (random, 0600 in the 0700 state
    directory) and kept across restarts."""
    from knowledge_core.adapters.private_files import private_path

    private_path(state, directory=True)
    path = state / OPERATOR_FILE
    if path.exists():
        private_path(path)  # one an earlier kb left wider is narrowed
        credential = path.read_text(encoding="utf-8").strip()
        if credential:
            return credential
    credential = secrets.token_urlsafe(32)
    _write_private(path, credential + "\n")
    return credential


def read_operator_credential(state: Path) -> str:
    """The operator credential the CLI sends, read from `state`; a one-line reason when it cannot be."""
    path = state / OPERATOR_FILE
    try:
        credential = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise OperatorCredentialUnreadable(
            f"no operator credential at {path}: run kb with the --state of the kb serve it talks to "
            "(or KB_STATE)"
        ) from None
    except OSError as exc:
        raise OperatorCredentialUnreadable(
            f"cannot read the operator credential at {path} ({exc.strerror}): only the user who started "
            "kb serve can operate it"
        ) from None
    if not credential:
        raise OperatorCredentialUnreadable(f"the operator credential at {path} is empty: restart kb serve")
    return credential


def local_container(state: Path, embed_invoke: Invoke | None = None, **kwargs: Any) -> Container:
    """The container of this process on the local runtime's settings (`local_settings` arguments), set as
    the process container for the handlers, its table and search indices made (deploy time, locally).
    `embed_invoke`: how this process reaches the embed function (kb serve: its embed worker, directly)."""
    settings = configure_local_env(state, **kwargs)
    from knowledge_core import bootstrap
    from knowledge_core.bootstrap import Container

    container = Container(settings, embed_invoke=embed_invoke if settings.embed_function else None)
    bootstrap.reset(container)
    if container.table is not None:
        container.table.create()
    container.admin.prepare_search()  # deploy time, locally: the read path never creates indices
    return container


def rotate_secret(state: Path) -> None:
    """The current token secret becomes the previous one (still verified) and a new one signs."""
    from knowledge_core.adapters.private_files import private_path

    private_path(state, directory=True)
    current, previous = state / "token-secret", state / "token-secret.previous"
    if current.exists():
        _write_private(previous, current.read_text(encoding="utf-8"))
    _write_private(current, secrets.token_urlsafe(48))
