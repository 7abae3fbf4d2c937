"""G-LOCAL first start: `kb serve` listens at once with a model in force (the demo's text stored, its vectors
filled in the background while BM25 answers), and stops within 10 s of SIGTERM even while it embeds, its
worker processes and the background fill with it. A slow fake model (tests/e2e/slow_model_serve.py) stands
in for the real ones, so this runs without model files and takes seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import ROOT, START_TIMEOUT_S, KbServer, free_port

STOP_BOUND_S = 10.0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_g_local_kb_serve_listens_at_once_and_stops_within_10_s_of_sigterm_while_it_embeds(
    tmp_path: Path,
) -> None:
    """G-LOCAL: a first start with a (slow) model listens before any vector is in, answers a search by
    BM25 meanwhile (a worker process started for it), and SIGTERM mid-embedding ends kb serve, its worker
    processes and the fill within 10 s."""
    state, port = tmp_path / "state", free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.e2e.slow_model_serve",
                "serve",
                "--state",
                str(state),
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the test can see (and clean up) every process of it
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "listening on" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        banner = log_path.read_text()
        assert "ranking: BM25 while vectors fill in, then hybrid (slow-1)" in banner
        server = KbServer(f"http://127.0.0.1:{port}", port, (state / "demo-token").read_text().strip(), state)
        found = server.knowledge("demo", "search", {"query": "网关离线怎么排查"})
        assert found.status == 200 and found.json["hints"]
        assert "vectors filled" not in log_path.read_text()  # still embedding
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_BOUND_S + 5)
        while _group_alive(proc.pid) and time.monotonic() - stopped_at < STOP_BOUND_S + 5:
            time.sleep(0.1)
        took = time.monotonic() - stopped_at
        assert not _group_alive(proc.pid) and took < STOP_BOUND_S, (took, log_path.read_text())
        assert proc.returncode == 0, log_path.read_text()
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
