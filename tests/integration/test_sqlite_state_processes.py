"""R-BUDGET on the embedded SQLite state across processes: 16 threads in this process and 2 other
processes (each a separate connection family, as two `kb serve` on one `--state` are) spend on one root
at once; the root's limits are met exactly, never exceeded, and no refusal leaves a partial charge."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from knowledge_core.adapters.sqlite import sqlite_stores

from tests.contract.test_state_contract import check_shared_root, spend_as_child

THREADS, PROCESSES = 16, 2


def _spend_in_process(path: str, root: str, n: int, barrier: Any, out: Any) -> None:
    out.put(spend_as_child(sqlite_stores(path).ledger, root, n, barrier.wait))


def test_r_budget_16_threads_and_2_processes_on_one_root_never_overspend(tmp_path: Path) -> None:
    path = str(tmp_path / "state.sqlite3")
    ledger = sqlite_stores(path).ledger
    root = f"root-{uuid.uuid4().hex[:8]}"
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(1 + PROCESSES), ctx.Queue()  # this process's threads, then the others
    processes = [
        ctx.Process(target=_spend_in_process, args=(path, root, THREADS + i, barrier, out))
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    local_start = threading.Barrier(THREADS, action=barrier.wait)  # all threads and processes start together
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        outcomes = list(pool.map(lambda n: spend_as_child(ledger, root, n, local_start.wait), range(THREADS)))
    outcomes += [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    summary = check_shared_root(ledger, root, outcomes)
    assert summary["granted"] == 64 and summary["chars"] <= 1000
