"""e2e fixtures: one `kb serve` subprocess per test session on a free loopback port with its own state
directory, and small HTTP helpers. Every test here is marked `e2e`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite.driver import sqlite3

from kb_cli.http import OPERATOR_HEADER, needs_operator
from kb_cli.local_env import OPERATOR_FILE

ROOT = Path(__file__).resolve().parents[2]
# The installed console script when there is one (it is what users run), else the module.
_SCRIPT = Path(sys.executable).parent / "kb"
KB = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kb_cli.main"]
START_TIMEOUT_S = 120  # kb serve stores the demo's text and listens within seconds, vectors or not
# A first start with the test models fills the demo's vectors through three models in the background (308
# passages; the multilingual one at ~6 passages/s on this 2-core machine: 70-120 s measured idle, 300-370 s
# with the machine shared) before hybrid ranking is in force: the bound leaves room.
HYBRID_TIMEOUT_S = 480


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.raw)


@dataclass(frozen=True)
class KbServer:
    endpoint: str
    port: int
    token: str  # the demo token, route `demo`
    state: Path

    @property
    def operator(self) -> str:
        """G-LOCAL: the local operator credential kb serve keeps in its state (what the kb CLI sends)."""
        return (self.state / OPERATOR_FILE).read_text(encoding="utf-8").strip()

    @property
    def operator_headers(self) -> dict[str, str]:
        return {OPERATOR_HEADER: self.operator}

    @property
    def console_url(self) -> str:
        """The console's URL as kb serve prints it: the operator credential in the fragment."""
        return f"{self.endpoint}/console/#operator={self.operator}"

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        token: str | None = None,
        raw_body: bytes | None = None,
        operator: bool = True,
    ) -> Response:
        """`operator`: with the operator credential on the admin and Invoke APIs (as the kb CLI sends it)."""
        data = (
            raw_body
            if raw_body is not None
            else (None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8"))
        )
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if operator and needs_operator(path):
            headers.update(self.operator_headers)
        request = urllib.request.Request(self.endpoint + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
        except urllib.error.HTTPError as exc:
            return Response(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())

    def knowledge(self, route: str, action: str, body: object = None, token: str | None = None) -> Response:
        method = "GET" if action == "capabilities" else "POST"
        return self.request(
            method,
            f"/agent-api/v1/workspaces/{route}/knowledge/{action}",
            body,
            self.token if token is None else token,
        )

    def ranking(self) -> dict:
        """How searches rank now: capabilities' `extensions.ranking` on route demo."""
        return self.knowledge("demo", "capabilities").json["extensions"]["ranking"]

    def wait_for_vectors(self, timeout_s: float = HYBRID_TIMEOUT_S) -> dict:
        """Until the demo's vectors are filled (hybrid ranking, with a model), polling capabilities."""
        deadline = time.monotonic() + timeout_s
        while (ranking := self.ranking())["vectors"] == "filling":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the demo's vectors were not filled within {timeout_s:.0f} s")
            time.sleep(1.0)
        return ranking

    def kb(self, *args: str, endpoint: bool = True) -> subprocess.CompletedProcess:
        """Run the `kb` console script against this server."""
        argv = [*KB, *args, *(["--endpoint", self.endpoint] if endpoint else [])]
        return subprocess.run(
            argv,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            # The CLI reads the operator credential from this server's state (its --state default).
            env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR", "KB_STATE": str(self.state)},
            check=False,
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_kb_serve(
    state: Path,
    *,
    demo: bool = True,
    table_prefix: str = "kb-e2e",
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    umask: int = -1,
    vectors: bool = False,
    port: int | None = None,
) -> Iterator[KbServer]:
    """`kb serve` as a subprocess on a free port with its own state and table (and `umask`, -1: this
    process's); stopped on exit. `vectors`: yielded once the demo's vectors are filled (a test comparing
    hybrid rankings), not as soon as it listens. `port`: a port chosen beforehand (free_port), when the
    server's own URL must be in its settings."""
    port = port or free_port()
    table = f"{table_prefix}-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR", "KB_TABLE_NAME": table, **(env or {})}
    log_path = state / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                *KB,
                "serve",
                "--state",
                str(state),
                "--port",
                str(port),
                *([] if demo else ["--no-demo"]),
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            umask=umask,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            # The "listening" line comes once the demo's text is stored; its vectors fill in after it.
            while "listening on" not in log_path.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("kb serve did not start:\n" + log_path.read_text())
                time.sleep(0.1)
            token = (state / "demo-token").read_text().strip() if demo else ""
            server = KbServer(f"http://127.0.0.1:{port}", port, token, state)
            if vectors and demo:
                server.wait_for_vectors()
            yield server
        finally:
            stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """A server process ended: asked to stop, killed if it has not within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def kb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbServer]:
    # Directory jobs may read the session's temporary directories (the tests' corpora), nothing else.
    roots = ("--ingest-root", str(tmp_path_factory.getbasetemp()))
    with running_kb_serve(tmp_path_factory.mktemp("kb-serve"), args=roots) as server:
        yield server


def index_integrity(state: Path, prefix: str) -> tuple[int, int, int, int]:
    """(documents whose id starts with `prefix-`, passages without a document, documents without a passage,
    passages missing from the full-text index) of the embedded search index: all but the first must be 0."""
    with sqlite3.connect(state / "search.sqlite3", timeout=10) as conn:
        documents = conn.execute(
            "SELECT count(*) FROM documents WHERE doc_id LIKE ?", (prefix + "-%",)
        ).fetchone()[0]
        orphans = conn.execute(
            "SELECT count(*) FROM passage_rows r LEFT JOIN documents d "
            "ON d.source_key = r.source_key AND d.doc_id = r.doc_id WHERE d.doc_id IS NULL"
        ).fetchone()[0]
        empty = conn.execute(
            "SELECT count(*) FROM documents d WHERE NOT EXISTS (SELECT 1 FROM passage_rows r "
            "WHERE r.source_key = d.source_key AND r.doc_id = d.doc_id)"
        ).fetchone()[0]
        unindexed = conn.execute(
            "SELECT count(*) FROM passage_rows r WHERE r.id NOT IN (SELECT rowid FROM passages)"
        ).fetchone()[0]
    return documents, orphans, empty, unindexed
