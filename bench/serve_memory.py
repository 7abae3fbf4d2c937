"""`kb serve` memory and first start with the models: how long a fresh state takes to listen, its first
search, when the demo's vectors are in (the first hybrid answer), then every process's memory (parent and
function workers) after 100 searches, per process and in all (RSS and PSS), for this checkout and optionally
another one (`--before PATH`, e.g. a worktree of the commit before the embed function), with the ratios.

    .venv/bin/python bench/serve_memory.py --before /path/to/older/checkout

Each checkout runs with its own code (PYTHONPATH) on this venv, a fresh state directory and the models of the
per-user cache (`kb models fetch`). Target (issue "what you test is what you deploy"): total RSS <= 1 GB."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [
    "如何安装摄像头",
    "battery life of the sensor",
    "设备安装高度",
    "how do I reset the gateway",
    "网络配置",
    "firmware update steps",
    "报警阈值设置",
    "power supply requirements",
    "摄像头夜视",
    "warranty",
]
FILL_TIMEOUT_S = 1200.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def memory(pid: int) -> tuple[int, int, str]:
    """RSS and PSS in KiB, and what the process is (the parent, a worker holding ONNX Runtime, a worker)."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Pss:"):
            pss = int(line.split()[1])
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    maps = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    if "kb_cli.main serve" in cmdline:
        kind = "kb serve"
    elif "resource_tracker" in cmdline:
        kind = "resource tracker"
    elif "onnxruntime" in maps:
        kind = "worker with the models"
    else:
        kind = "function worker"
    return rss, pss, kind


def search(url: str, token: str, query: str) -> None:
    req = urllib.request.Request(
        f"{url}/agent-api/v1/workspaces/demo/knowledge/search",
        data=json.dumps({"query": query}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, r.status


def measure(checkout: Path, searches: int) -> dict[str, object]:
    """Start kb serve of `checkout` on a fresh state, wait for the demo's vectors, search, measure, stop."""
    state = Path(tempfile.mkdtemp(prefix="kb-mem-"))
    port = free_port()
    code = checkout.resolve()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(code / p) for p in ("layers/knowledge_core", "src", ".")),
    }
    env.pop("KB_EMBEDDING_MODEL_DIR", None)  # the per-user cache, as `make serve` ranks
    proc = subprocess.Popen(
        [sys.executable, "-m", "kb_cli.main", "serve", "--state", str(state), "--port", str(port)],
        cwd=code,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    filled, listening = threading.Event(), threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "listening on" in line:
                listening.set()
            if "vectors filled" in line and listening.is_set():
                filled.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        started = time.monotonic()
        if not listening.wait(FILL_TIMEOUT_S):
            raise SystemExit(f"{checkout}: not listening after {FILL_TIMEOUT_S:.0f} s:\n{''.join(lines)}")
        listen_s = time.monotonic() - started
        token_file = state / "demo-token"
        if not token_file.exists():
            raise SystemExit(f"{checkout}: no demo token in {state}:\n{''.join(lines)}")
        token = token_file.read_text().strip()
        url = f"http://127.0.0.1:{port}"
        t0 = time.perf_counter()  # a fresh worker's first search, while the vectors fill in (BM25)
        search(url, token, QUERIES[0])
        first_search_s = time.perf_counter() - t0
        if not filled.wait(FILL_TIMEOUT_S):
            raise SystemExit(
                f"{checkout}: the demo's vectors were not in after {FILL_TIMEOUT_S:.0f} s:\n{''.join(lines)}"
            )
        fill_s = time.monotonic() - started
        t0 = time.perf_counter()  # the first search the hybrid ranking answers
        search(url, token, QUERIES[1])
        first_hybrid_s = time.perf_counter() - t0
        took = []
        for i in range(searches):
            t0 = time.perf_counter()
            search(url, token, QUERIES[i % len(QUERIES)] + ("" if i < len(QUERIES) else f" {i}"))
            took.append(time.perf_counter() - t0)
        rows = []
        for pid in tree(proc.pid):
            try:
                rows.append((pid, *memory(pid)))
            except OSError:
                continue
        took.sort()
        return {
            "checkout": str(checkout),
            "processes": rows,
            "rss_kib": sum(r[1] for r in rows if r[3] != "resource tracker"),
            "pss_kib": sum(r[2] for r in rows if r[3] != "resource tracker"),
            "listen_s": listen_s,
            "first_search_ms": 1000 * first_search_s,
            "fill_s": fill_s,
            "first_hybrid_search_ms": 1000 * first_hybrid_s,
            "search_p50_ms": 1000 * took[len(took) // 2],
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def report(result: dict[str, object]) -> None:
    r = result
    print(f"\n{r['checkout']}:")
    print(f"  listening after {r['listen_s']:.1f} s; first search {r['first_search_ms']:.0f} ms")
    print(f"  vectors in (first hybrid answer) after {r['fill_s']:.0f} s")
    print(f"  first hybrid search {r['first_hybrid_search_ms']:.0f} ms")
    print(f"  search p50 {r['search_p50_ms']:.0f} ms")
    print(f"  {'pid':>7}  {'RSS MiB':>8}  {'PSS MiB':>8}  process")
    for pid, rss, pss, kind in result["processes"]:  # type: ignore[attr-defined]
        print(f"  {pid:>7}  {rss / 1024:>8.0f}  {pss / 1024:>8.0f}  {kind}")
    print(
        f"  {'total':>7}  {result['rss_kib'] / 1024:>8.0f}  {result['pss_kib'] / 1024:>8.0f}"
        "  (resource tracker left out)"
    )  # type: ignore[operator]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, help="another checkout to measure first (the 'before')")
    parser.add_argument("--searches", type=int, default=100)
    args = parser.parse_args()
    before = measure(args.before, args.searches) if args.before else None
    after = measure(ROOT, args.searches)
    if before:
        report(before)
    report(after)
    if before:
        for key, label in (
            ("rss_kib", "total RSS"),
            ("pss_kib", "total PSS"),
            ("search_p50_ms", "search p50"),
            ("listen_s", "first start to listening"),
            ("fill_s", "first hybrid answer"),
            ("first_search_ms", "first search"),
        ):
            print(f"after/before {label}: {after[key] / before[key]:.2f}x")  # type: ignore[operator]
    goal = 1024 * 1024
    print(
        f"total RSS {after['rss_kib'] / 1024:.0f} MiB: "
        f"{'within' if after['rss_kib'] <= goal else 'over'} the 1 GB target"
    )  # type: ignore[operator]
    return 0


if __name__ == "__main__":
    sys.exit(main())
