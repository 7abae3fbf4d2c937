"""Cold import time of each function module vs a bare `import boto3`, interleaved in fresh interpreters.

Target (issue: agent knowledge API): every function module within 1.3x of `import boto3`; the MCP function
(M-MCP) within 1.5x — it imports the `mcp` SDK on its first request, which is reported apart.
The functions are those of template.yaml."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER = ROOT / "layers" / "knowledge_core"

_MODULE = """
import sys, time, importlib.util
sys.path.insert(0, {layer!r})
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("app", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(time.perf_counter() - t)
"""
_BOTO3 = "import time\nt = time.perf_counter()\nimport boto3\nprint(time.perf_counter() - t)\n"
_SDK = """
import sys, time
sys.path.insert(0, {layer!r})
t = time.perf_counter()
import mcp.server.lowlevel, mcp.server.streamable_http_manager
print(time.perf_counter() - t)
"""
TARGETS = {"mcp": 1.5}
DEFAULT_TARGET = 1.3
ENV = {"POWERTOOLS_TRACE_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"}


def _time(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    from kb_cli.template import functions as template_functions

    functions = sorted(
        fn.code_dir / (fn.handler.rpartition(".")[0].replace(".", "/") + ".py")
        for fn in template_functions().values()
    )
    results = {}
    print(f"cold import, median of {args.rounds} fresh interpreters, interleaved with `import boto3`")
    worst = 0.0
    over = []
    for path in functions:
        code = _MODULE.format(layer=str(LAYER), path=str(path))
        subject, baseline = [], []
        for _ in range(args.rounds):
            subject.append(_time(code))
            baseline.append(_time(_BOTO3))
        s, b = statistics.median(subject) * 1000, statistics.median(baseline) * 1000
        ratio = s / b
        worst = max(worst, ratio)
        target = TARGETS.get(path.parent.name, DEFAULT_TARGET)
        if ratio > target:
            over.append(path.parent.name)
        results[path.parent.name] = {"import_ms": s, "boto3_ms": b, "ratio": ratio, "target": target}
        print(
            f"  {path.parent.name:<14} {s:7.1f} ms   import boto3 {b:7.1f} ms   "
            f"ratio {ratio:4.2f}x (target <= {target:.2f}x)"
        )
    print(f"worst ratio {worst:.2f}x" + (f"; over target: {', '.join(over)}" if over else ""))
    sdk = statistics.median(_time(_SDK.format(layer=str(LAYER))) for _ in range(args.rounds)) * 1000
    results["mcp_sdk_first_request"] = {"import_ms": sdk}
    print(f"  the mcp SDK, imported by the MCP function on its first request: {sdk:7.1f} ms")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "cold_import.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
