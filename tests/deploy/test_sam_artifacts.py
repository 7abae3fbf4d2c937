"""What `sam build` produces is what is tested (SPEC §0, §5, K-REL): every function with its layers fits
Lambda's 250 MB unpacked, and the built artifacts — the function and layer folders as they would be
uploaded, nothing else on the path but the Lambda runtime's boto3 — rank a fixed query set exactly as
`kb serve` ranks it on the same corpus, the multilingual model and the relevance step included.

The build is `.aws-sam/build` (`make sam`; CI builds it before the tests) or $KB_SAM_BUILD_DIR; the models
are those `kb models fetch` put in $KB_TEST_EMBEDDING_MODEL_DIR (scripts/test.sh) or the per-user cache.
Without either the tests say so: skipped here, failed under KB_REQUIRE_SAM_BUILD=1 (CI)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_cli import demo
from kb_cli import template as tpl

ROOT = Path(__file__).resolve().parents[2]
LAMBDA_LIMIT_BYTES = 262_144_000  # 250 MB unpacked: a function and all its layers
HOST_PY = f"{sys.version_info.major}.{sys.version_info.minor}"
# A fixed query set over the corpus below: Chinese, English, cross-lingual (the multilingual model's), one
# that nothing should match (the relevance step's abstention).
QUERIES = [
    "如何重置设备密码",
    "how do I reset a device password",
    "账单和发票",
    "billing and invoices",
    "设备离线怎么办",
    "device offline troubleshooting",
    "固件升级",
    "firmware upgrade",
    "API 速率限制",
    "rate limits of the API",
    "数据保留多久",
    "how long is data retained",
    "recipe for chocolate cake",
]
CORPUS_DOCS = 6  # of the demo corpus (its first, by file name): both sides embed them


def _require(message: str) -> None:
    if os.environ.get("KB_REQUIRE_SAM_BUILD") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def build_dir() -> Path:
    path = Path(os.environ.get("KB_SAM_BUILD_DIR") or ROOT / ".aws-sam" / "build")
    if not (path / "template.yaml").is_file():
        _require(f"no sam build output at {path}: run `make sam` first (CI does)")
    return path


@pytest.fixture(scope="module")
def model_dir() -> Path:
    given = os.environ.get("KB_TEST_EMBEDDING_MODEL_DIR")
    path = Path(given) if given else Path.home() / ".cache" / "agent-knowledge" / "models"
    found = sorted(p.parent.name for p in path.glob("*/model.json"))
    if not any("multilingual" in name for name in found) or len(found) < 3:
        _require(
            f"the embedding models are not on this machine ({path}: {found or 'none'}): run "
            "`kb models fetch` (CI does, in scripts/test.sh); parity without them would prove nothing"
        )
    return path


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _built_functions(build: Path) -> dict[str, tuple[Path, list[str], str]]:
    """Per built function: its folder, the layers (logical ids) built here that it lists, its runtime."""
    template = tpl.load_template(build / "template.yaml")
    runtime_default = template.get("Globals", {}).get("Function", {}).get("Runtime", "")
    out = {}
    for logical_id, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        props = res["Properties"]
        layers = [
            ref
            for item in props.get("Layers") or []
            for ref in re.findall(r"'Ref': '(\w+)'", str(item))
            if (build / ref).is_dir()
        ]
        out[logical_id] = (build / props["CodeUri"], layers, props.get("Runtime", runtime_default))
    return out


def test_every_function_with_its_layers_fits_lambda(build_dir: Path) -> None:
    """SPEC §0: each function and its layers <= 250 MB unpacked, measured on the `sam build` output; the
    models are not in any of them (the embed function copies them from S3, docs/ranking.md "On Lambda")."""
    functions = _built_functions(build_dir)
    assert "EmbedFunction" in functions, "the embed function is built"
    sizes = {
        name: _tree_bytes(build_dir / name) for name in {n for _, ls, _ in functions.values() for n in ls}
    }
    lines = [f"{'function':<22} {'runtime':<10} {'code MB':>8} {'layers MB':>10} {'total MB':>9}  layers"]
    over = []
    for name, (code, layers, runtime) in sorted(functions.items()):
        code_bytes = _tree_bytes(code)
        layer_bytes = sum(sizes[layer] for layer in layers)
        total = code_bytes + layer_bytes
        lines.append(
            f"{name:<22} {runtime:<10} {code_bytes / 1e6:>8.2f} {layer_bytes / 1e6:>10.1f}"
            f" {total / 1e6:>9.1f}"
            f"  {', '.join(layers)}"
        )
        if total > LAMBDA_LIMIT_BYTES:
            over.append(name)
    print(
        "\nsam build sizes (unpacked, MB = 10^6 bytes; the limit, 250 MiB, is 262.1 MB):\n" + "\n".join(lines)
    )
    assert not over, f"over Lambda's 250 MB unpacked: {over}"
    assert functions["EmbedFunction"][1] == ["EmbedRuntimeLayer"], "the embed function has its own layer only"
    assert all("EmbedRuntimeLayer" not in ls for n, (_, ls, _) in functions.items() if n != "EmbedFunction")
    assert not list((build_dir / "EmbedRuntimeLayer").rglob("model.onnx")), "models are not in a layer"


# --- parity ---------------------------------------------------------------------------------------------


def _embed_layer(build_dir: Path, tmp: Path) -> tuple[Path, str]:
    """The embed layer's python/ folder for this interpreter: the built one when it targets this Python,
    else the same Makefile target (same pinned wheels, same core package) built for this Python, and why."""
    built = build_dir / "EmbedRuntimeLayer" / "python"
    tag = f"cpython-{HOST_PY.replace('.', '')}-"
    if any(tag in p.name for p in (built / "numpy").rglob("*.so")):
        return built, "the built embed layer"
    out = tmp / "embed-layer"
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "layers"), "build-EmbedRuntimeLayer", f"ARTIFACTS_DIR={out}",
         f"EMBED_PYTHON={HOST_PY}", f"PIP={sys.executable} -m pip"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "python", (
        f"the embed layer's Makefile target rebuilt for this Python {HOST_PY} (the template's embed function "
        "runs python3.12; this machine has no 3.12)"
    )


class _Lines:
    """A child process answering one JSON line per JSON line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
            env=env,
            cwd="/",
        )
        self._lock = threading.Lock()

    def ask(self, message: dict[str, Any]) -> Any:
        assert self.proc.stdin and self.proc.stdout
        with self._lock:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        assert line, "the artifact runner ended"
        return json.loads(line)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


# Runs the built functions of the core layer (one module each, by file path, as Lambda loads them) on
# stdin/stdout lines; the deploy step (table, search indices) first, as CloudFormation and the admin API do.
_RUNNER = r"""
import importlib.util, json, os, sys, traceback
sys.path[:0] = json.loads(sys.argv[1])
answers, sys.stdout = sys.stdout, open(os.devnull, "w")  # (the handlers' metrics lines go nowhere)
class Context:
    def __init__(self, name):
        self.function_name = name; self.memory_limit_in_mb = 1024; self.aws_request_id = "parity"
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + name
    def get_remaining_time_in_millis(self):
        return 300000
from knowledge_core import bootstrap
bootstrap.container().table.create()
modules = {}
for line in sys.stdin:
    request = json.loads(line)
    name, path = request["function"], request["path"]
    try:
        if name not in modules:
            spec = importlib.util.spec_from_file_location("fn_" + name, path)
            modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[name])
        answer = {"ok": modules[name].lambda_handler(request["event"], Context(name))}
    except Exception as exc:
        traceback.print_exc()
        answer = {"error": type(exc).__name__, "message": str(exc)}
    answers.write(json.dumps(answer) + "\n")
    answers.flush()
"""

# The embed function's artifacts behind a Lambda Invoke API on loopback, one event at a time (one instance).
_EMBED = r"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
sys.path[:0] = json.loads(sys.argv[1])
import app
class Context:
    function_name = "EmbedFunction"; memory_limit_in_mb = 3008; aws_request_id = "parity"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:EmbedFunction"
    def get_remaining_time_in_millis(self):
        return 120000
one = threading.Lock()
class Invoke(BaseHTTPRequestHandler):
    def do_POST(self):
        event = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with one:
            body = json.dumps(app.lambda_handler(event, Context())).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Invoke)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class ArtifactFunctions:
    """The gateway's function runner on the built artifacts (kb_cli.gateway.FunctionRunner)."""

    def __init__(self, build: Path, runner: _Lines) -> None:
        self._functions = _built_functions(build)
        self._runner = runner
        self._names = tpl.functions()

    def resolve(self, name: str) -> tpl.Function:
        return next(f for f in self._names.values() if name in (f.logical_id, f.short_name))

    def invoke(self, name: str, event: Any) -> Any:
        from kb_cli.gateway import FunctionError

        fn = self.resolve(name)
        path = self._functions[fn.logical_id][0] / "app.py"
        answer = self._runner.ask({"function": fn.logical_id, "path": str(path), "event": event})
        if "error" in answer:
            raise FunctionError(answer["error"], answer.get("message", ""))
        return answer["ok"]


def _python_env(extra: dict[str, str]) -> dict[str, str]:
    """A bare environment: no PYTHONPATH, no KB_ setting of this test run, the given ones."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    return (
        keep
        | {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "POWERTOOLS_METRICS_NAMESPACE": "Parity",
            "PYTHONWARNINGS": "ignore",
        }
        | extra
    )


def _runtime_boto3(tmp: Path) -> list[str]:
    """The Lambda runtime's boto3 (in no layer): a folder holding only this environment's boto3 and
    s3transfer (botocore comes from the core layer)."""
    import boto3
    import s3transfer

    folder = tmp / "lambda-runtime"
    folder.mkdir()
    for package in (boto3.__file__, s3transfer.__file__):
        (folder / Path(package).parent.name).symlink_to(Path(package).parent)
    return [str(folder)]


class Door:
    """Requests through a gateway as kb serve answers them: admin (operator) and search (bearer)."""

    def __init__(self, send: Any) -> None:
        self._send = send

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = self._send(method, path, body, {"x-kb-operator": "op"})
        assert status < 300, (method, path, status, payload)
        return payload

    def search(self, token: str, query: str) -> Any:
        status, payload = self._send(
            "POST",
            f"/agent-api/v1/workspaces/{demo.ROUTE}/knowledge/search",
            {"query": query},
            {"authorization": f"Bearer {token}"},
        )
        assert status == 200, (query, status, payload)
        return payload


def _gateway_door(gateway: Any) -> Door:
    def send(method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        raw = json.dumps(body).encode() if body is not None else b""
        base = {"host": "127.0.0.1:3000", "content-type": "application/json"}
        status, _, out = gateway.http(method, path, "", base | headers, raw, "127.0.0.1")
        return status, json.loads(out or b"null")

    return Door(send)


def _http_door(url: str, operator: str) -> Door:
    def send(method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if "x-kb-operator" in headers:
            headers = headers | {"x-kb-operator": operator}
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            url + path, data=data, method=method, headers={"Content-Type": "application/json", **headers}
        )
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    return Door(send)


def _seed(door: Door) -> str:
    """The corpus and the demo's source, agent and workspace through the admin API; a token of the route."""
    door.admin("POST", "/admin/v1/search-indices")
    door.admin("POST", "/admin/v1/sources", demo.SOURCE)
    door.admin("POST", "/admin/v1/agents", demo.AGENT)
    key = f"{demo.SOURCE['id']}@{demo.SOURCE['version']}"
    docs = demo.demo_documents()[:CORPUS_DOCS]
    for d in docs:  # one a write: each embeds its passages well within the admin function's timeout
        one = {"doc_id": d.doc_id, "title": d.title, "body": d.body, "acl": {"tenant": d.acl.tenant}}
        door.admin("POST", f"/admin/v1/sources/{key}/documents", {"documents": [one]})
    door.admin("PUT", f"/admin/v1/workspaces/{demo.ROUTE}", {"agent": "demo-agent@1.0.0"})
    ranking = door.admin("GET", "/admin/v1/search-indices")["ranking"]
    assert ranking["mode"] == "hybrid", ranking
    issued = door.admin("POST", "/admin/v1/tokens", {"routes": [demo.ROUTE], "tenant": demo.DEFAULT_TENANT})
    return str(issued["token"])


def _seeded_ranking(door: Door, side: str) -> dict[str, list[tuple[str, float]]]:
    started = time.monotonic()
    token = _seed(door)
    seeded = time.monotonic()
    ranked = _ranked(door, token)
    took = time.monotonic() - seeded
    print(f"\n{side}: seeded in {seeded - started:.0f} s, {len(QUERIES)} queries in {took:.1f} s")
    return ranked


def _ranked(door: Door, token: str) -> dict[str, list[tuple[str, float]]]:
    out = {}
    for query in QUERIES:
        body = door.search(token, query)
        out[query] = [(h["title"], round(h["score"], 6)) for h in body["hints"]] + [
            ("status", body["status"])
        ]  # type: ignore[list-item]
    return out


@pytest.fixture(scope="module")
def servers() -> dict[str, str]:
    from tests.contract.conftest import real_endpoints_or_skip

    return real_endpoints_or_skip()


@pytest.fixture(scope="module")
def artifacts_ranking(
    build_dir: Path, model_dir: Path, servers: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[tuple[str, float]]]]:
    from kb_cli.gateway import LocalGateway

    tmp = tmp_path_factory.mktemp("artifacts")
    layer, why = _embed_layer(build_dir, tmp)
    print(f"\nembed layer: {why}")
    python = [sys.executable, "-S", "-E", "-c"]  # no site-packages: only the folders named
    embed = subprocess.Popen(
        [*python, _EMBED, json.dumps([str(layer), str(build_dir / "EmbedFunction")])],
        stdout=subprocess.PIPE, text=True, cwd="/",
        env=_python_env({"KB_EMBEDDING_MODEL_DIR": str(model_dir)}),
    )  # fmt: skip
    assert embed.stdout is not None
    port = int(embed.stdout.readline())
    runner = _Lines(
        [
            *python,
            _RUNNER,
            json.dumps([str(build_dir / "KnowledgeCoreLayer" / "python"), *_runtime_boto3(tmp)]),
        ],
        _python_env(
            {
                "KB_STATE_BACKEND": "dynamodb",
                "KB_TABLE_NAME": f"parity-{uuid.uuid4().hex[:8]}",
                "KB_DYNAMODB_ENDPOINT": servers["DYNAMODB_ENDPOINT"],
                "KB_SEARCH_BACKEND": "opensearch",
                "KB_OPENSEARCH_URL": servers["OPENSEARCH_URL"],
                "KB_OPENSEARCH_INDEX_PREFIX": f"par-{uuid.uuid4().hex[:8]}",
                "KB_TOKEN_SECRET": "parity-secret-0123456789abcdef-0123456789",
                "KB_REGISTRY_CACHE_SECONDS": "0",
                "KB_EMBED_FUNCTION": "EmbedFunction",
                "KB_EMBED_ENDPOINT": f"http://127.0.0.1:{port}",
                "KB_LEXICON_DIR": str(model_dir / "zh-en-lexicon"),
            }
        ),
    )
    try:
        door = _gateway_door(LocalGateway(ArtifactFunctions(build_dir, runner), operator="op"))
        yield _seeded_ranking(door, "artifacts")
    finally:
        runner.close()
        embed.kill()
        embed.wait(timeout=10)


@pytest.fixture(scope="module")
def serve_ranking(
    model_dir: Path, servers: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[tuple[str, float]]]]:
    """`kb serve` (this checkout, its embed worker) on the same servers, its own table and index prefix."""
    import socket

    state = tmp_path_factory.mktemp("serve-state")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _python_env(
        {
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("layers/knowledge_core", "src", ".")),
            "KB_TABLE_NAME": f"serve-{uuid.uuid4().hex[:8]}",
            "KB_OPENSEARCH_INDEX_PREFIX": f"srv-{uuid.uuid4().hex[:8]}",
            "KB_LEXICON_DIR": str(model_dir / "zh-en-lexicon"),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "kb_cli.main", "serve", "--state", str(state), "--port", str(port),
         "--no-demo",
         "--search-backend", "opensearch", "--opensearch-url", servers["OPENSEARCH_URL"],
         "--dynamodb-endpoint", servers["DYNAMODB_ENDPOINT"], "--embedding-model", str(model_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        banner = ""
        while "listening on" not in banner and time.monotonic() < deadline:
            banner = proc.stdout.readline()
            assert banner or proc.poll() is None, "kb serve ended"
        assert "hybrid with" in banner and "multilingual" in banner, banner
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
        operator = (state / "operator-credential").read_text().strip()
        door = _http_door(f"http://127.0.0.1:{port}", operator)
        yield _seeded_ranking(door, "kb serve")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_artifacts_rank_exactly_as_kb_serve_K_REL(
    artifacts_ranking: dict[str, list[tuple[str, float]]], serve_ranking: dict[str, list[tuple[str, float]]]
) -> None:
    """The fixed query set: the same hints, in the same order, with the same scores (to 1e-6), and the same
    status, from the built artifacts on the real servers as from kb serve."""
    same = sum(artifacts_ranking[q] == serve_ranking[q] for q in QUERIES)
    print(f"\nparity: {same}/{len(QUERIES)} queries rank exactly alike")
    for query in QUERIES:
        print(f"  {query!r}: {[t for t, _ in serve_ranking[query]]}")
    assert artifacts_ranking == serve_ranking
    assert any(len(r) > 1 for r in serve_ranking.values())  # hints, not only empty answers
