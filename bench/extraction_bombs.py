"""Peak memory and time of extracting each hostile file of the security review (M2), before and after
the bounds.

    .venv/bin/python bench/extraction_bombs.py [--before OLD_EXTRACTION.py] [--cap SECONDS]

Each bomb runs in a fresh process (the stand-in for `kb serve`'s ingestion worker) that is sampled for
its peak RSS (VmHWM) and killed at `--cap`. "after" extracts through `ProcessExtractor` (the container's
default): the serving process's own peak and the extraction child's peak are reported apart. "before"
runs `extract` of an older `extraction.py` (e.g. `git show main~N:layers/…/extraction.py > old.py`)
in-process, as the worker thread of `kb serve` did."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOMBS = ("docx_of_spaces", "nested_tables", "pdf_shared_stream", "nested_divs")

_RUN = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from tests import bombs
which, mode, old, work = sys.argv[1:5]
if which == "docx_of_spaces":
    data, name = bombs.docx_of_spaces(Path(work) / "bomb.docx").read_bytes(), "bomb.docx"
else:
    data = getattr(bombs, which)()
    name = "bomb.pdf" if which.startswith("pdf") else "bomb.html"
print(json.dumps({{"input_bytes": len(data)}}), flush=True)
started = time.monotonic()
if mode == "before":
    import importlib.util
    spec = importlib.util.spec_from_file_location("knowledge_core.old_extraction", old)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    run = module.extract
else:
    from knowledge_core.extraction_sandbox import ProcessExtractor
    run = ProcessExtractor()
try:
    outcome = "text of %d chars" % len(run(name, data).body)
except Exception as exc:
    outcome = type(exc).__name__ + (":" + exc.code if hasattr(exc, "code") else "")
seconds = time.monotonic() - started
if mode == "after":
    run.close()
print(json.dumps({{"outcome": outcome, "seconds": round(seconds, 2),
    "child_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}}), flush=True)
"""


def _peak_mib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def measure(which: str, mode: str, old: str, cap: float) -> dict:
    with tempfile.TemporaryDirectory() as work:
        script = _RUN.format(root=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-c", script, which, mode, old, work],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        header = json.loads(proc.stdout.readline())  # the bomb is built: the clock starts
        started, peak = time.monotonic(), 0
        while proc.poll() is None and time.monotonic() - started < cap:
            peak = max(peak, _peak_mib(proc.pid))
            time.sleep(0.05)
        result: dict = {"bomb": which, "mode": mode, **header}
        if proc.poll() is None:
            peak = max(peak, _peak_mib(proc.pid))
            proc.kill()
            proc.wait()
            result.update(outcome=f"still running at the {cap:.0f} s cap (killed)", seconds=f"> {cap:.0f}")
        else:
            result.update(json.loads(proc.stdout.readline()))
        result["worker_peak_mib"] = peak
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="an older extraction.py to measure as 'before'")
    parser.add_argument("--cap", type=float, default=180.0, help="kill a run after this many seconds")
    parser.add_argument("--only", choices=BOMBS, action="append")
    args = parser.parse_args()
    modes = ["before", "after"] if args.before else ["after"]
    for which in args.only or BOMBS:
        for mode in modes:
            print(json.dumps(measure(which, mode, args.before or "", args.cap)), flush=True)


if __name__ == "__main__":
    main()
