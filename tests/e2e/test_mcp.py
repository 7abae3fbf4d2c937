"""M-MCP with the official SDK's own client: over stdio (`kb mcp` as a subprocess talking to `kb serve`)
and over Streamable HTTP (`POST /mcp` through the local gateway, the template's authorizer included).
Both protocol eras the SDK speaks are driven over HTTP: the 2026-07-28 per-request envelope and the
2025 initialize handshake (what most MCP clients still send)."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from knowledge_core.codec import TokenCodec
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from kb_cli import demo
from tests.conftest import FakeClock
from tests.e2e.conftest import KB, ROOT, KbServer, Response

T = TypeVar("T")
TIMEOUT_S = 90
TRANSPORTS = ["stdio", "http", "http-legacy"]
GATEWAY_TITLE = "网关离线排查指南"
RUNBOOK_TITLE = "On-call Runbook: Metadata Database Failover (PostgreSQL / Patroni)"


def compact_size(obj: object) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def issue_token(server: KbServer, routes: list[str], subject: str = "demo-user") -> str:
    response = server.request(
        "POST",
        "/admin/v1/tokens",
        {"routes": routes, "client_id": "mcp-e2e", "subject": subject, "tenant": "default"},
    )
    assert response.status == 201, response.raw
    return response.json["token"]


def mcp_client(server: KbServer, transport: str, token: str | None = None) -> Client:
    token = token or server.token
    if transport == "stdio":
        params = StdioServerParameters(
            command=KB[0],
            args=[*KB[1:], "mcp", "--endpoint", server.endpoint, "--route", "demo"],
            env={**os.environ, "KB_TOKEN": token, "POWERTOOLS_LOG_LEVEL": "ERROR"},
            cwd=ROOT,
        )
        return Client(params, read_timeout_seconds=60)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(
        streamable_http_client(server.endpoint + "/mcp", http_client=http),
        mode="legacy" if transport == "http-legacy" else "auto",
        read_timeout_seconds=60,
    )


def drive(client: Client, session: Callable[[Client], Awaitable[T]]) -> T:
    """Open the client, run `session` with it, close it; bounded in time."""

    async def main() -> T:
        with anyio.fail_after(TIMEOUT_S):
            connection: AbstractAsyncContextManager[Client] = client
            async with connection as c:
                return await session(c)

    return anyio.run(main)


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[bool, dict]:
    """(is_error, body): the text content is the compact JSON body; structured content is the same."""
    result = await client.call_tool(tool, arguments)
    assert len(result.content) == 1 and result.content[0].type == "text"
    body = json.loads(result.content[0].text)
    if not result.is_error:
        assert result.structured_content == body
    return result.is_error, body


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_m_mcp_lists_read_only_tools_and_the_capabilities_resource(kb_server, transport):
    """M-MCP: two read-only tools with schemas from the wire models (`knowledge_search {query, limit?,
    run_id?, filter?}`, SPEC §6 and F-FILTER); capabilities (A-CAP) as a resource."""

    async def session(c: Client) -> None:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert set(tools) == {"knowledge_search", "knowledge_read"}
        for tool in tools.values():
            assert tool.annotations is not None and tool.annotations.read_only_hint is True
            assert tool.annotations.destructive_hint is False
            assert tool.input_schema["additionalProperties"] is False and tool.output_schema is not None
        search, read = tools["knowledge_search"], tools["knowledge_read"]
        assert set(search.input_schema["properties"]) == {"query", "limit", "run_id", "filter"}
        assert search.input_schema["required"] == ["query"]
        assert search.input_schema["properties"]["limit"]["maximum"] == 3
        assert set(read.input_schema["properties"]) == {"ref", "run_id", "max_bytes", "cursor"}
        assert read.input_schema["properties"]["max_bytes"]["maximum"] == 32768
        assert "next_cursor" in (read.description or "") and "cursor" in (search.description or "")
        resources = (await c.list_resources()).resources
        assert [r.uri for r in resources] == ["knowledge://workspaces/demo/capabilities"]
        contents = (await c.read_resource(resources[0].uri)).contents
        capabilities = json.loads(contents[0].text)  # type: ignore[union-attr]
        assert capabilities["schema"] == "bailing.agent-knowledge-capabilities.v1"
        assert capabilities["route"] == "demo" and capabilities["enabled"] is True
        assert capabilities["limits"]["read_chain_max_bytes"] == 131072

    drive(mcp_client(kb_server, transport), session)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("网关离线怎么排查？", GATEWAY_TITLE),
        ("webhook signature verification", "Verifying Webhook Signatures"),
    ],
)
def test_m_mcp_search_chinese_and_english(kb_server, transport, query, title):
    """M-MCP / A-SEARCH: the result is the §2.3 body, bounded exactly as over HTTP."""

    async def session(c: Client) -> None:
        is_error, body = await call(c, "knowledge_search", {"query": query})
        assert not is_error, body
        assert body["schema"] == "bailing.agent-knowledge-search.v1" and body["route"] == "demo"
        assert body["status"] == "ok" and body["trust"] == "reference_only"
        assert 1 <= len(body["hints"]) <= 3 and compact_size(body) <= 4096
        assert title in [h["title"] for h in body["hints"]]
        assert set(body["hints"][0]) == {"ref", "title", "summary", "revision", "score", "expires_at"}
        is_error, body = await call(c, "knowledge_search", {"query": query, "limit": 1})
        assert not is_error and len(body["hints"]) == 1

    drive(mcp_client(kb_server, transport), session)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_m_mcp_reads_a_long_document_page_by_page_to_the_end(kb_server, transport):
    """M-MCP / A-READ: follow next_cursor to the end; the pages rebuild the body byte for byte within the
    chain limit, and every page stays within max_bytes."""
    document = next(d for d in demo.demo_documents() if d.title == RUNBOOK_TITLE)
    assert len(document.body.encode()) < 131072

    async def session(c: Client) -> int:
        _, found = await call(c, "knowledge_search", {"query": "metadata database failover Patroni"})
        hint = next(h for h in found["hints"] if h["title"] == RUNBOOK_TITLE)
        content, cursor, pages = b"", None, 0
        while True:
            arguments = {"ref": hint["ref"], "max_bytes": 4096} | ({"cursor": cursor} if cursor else {})
            is_error, page = await call(c, "knowledge_read", arguments)
            assert not is_error, page
            assert page["schema"] == "bailing.agent-knowledge-read.v1" and compact_size(page) <= 4096
            assert page["revision"] == hint["revision"] and page["budget_exhausted"] is False
            content += page["content"].encode()
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                assert page["truncated"] is False
                break
        assert content == document.body.encode()
        return pages

    assert drive(mcp_client(kb_server, transport), session) >= 10


def expired_copy(server: KbServer, ref: str) -> str:
    return expired_copy_of(server.state, ref)


def expired_copy_of(state: Path, ref: str) -> str:
    """The same ref as the server would have signed it 400 s ago (its secret is in the state directory)."""
    body = ref.partition(".")[0]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    secret = (state / "token-secret").read_text(encoding="utf-8").strip().encode()
    past = FakeClock()
    past.t = claims["e"] - 300 - 400
    # The source key and doc id travel encrypted: the holder of the secret opens the ref.
    opened = TokenCodec(secret, past).open_ref(ref, identity=claims["i"])
    expired, _ = TokenCodec(secret, past).issue_ref(
        identity=claims["i"],
        scope_revision=claims["s"],
        source_key=opened.source_key,
        doc_id=opened.doc_id,
        revision=claims["r"],
    )
    return expired


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_m_mcp_ref_errors_are_tool_results_naming_the_code(kb_server, transport):
    """M-MCP / A-REF: tampered, expired and foreign refs (and a forged cursor, a schema violation) come
    back as `isError` results whose text names the typed code of §2."""
    other = issue_token(kb_server, ["demo"], subject="someone-else")

    async def foreign_ref(c: Client) -> str:
        _, found = await call(c, "knowledge_search", {"query": "webhook signature verification"})
        return found["hints"][0]["ref"]

    foreign = drive(mcp_client(kb_server, "http", token=other), foreign_ref)

    async def session(c: Client) -> None:
        _, found = await call(c, "knowledge_search", {"query": "webhook signature verification"})
        ref = found["hints"][0]["ref"]
        body, _, mac = ref.partition(".")
        tampered = f"{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{mac}"
        cases = {
            tampered: "knowledge_reference_invalid",
            expired_copy(kb_server, ref): "knowledge_reference_expired",
            foreign: "knowledge_reference_invalid",
        }
        for bad_ref, code in cases.items():
            is_error, error = await call(c, "knowledge_read", {"ref": bad_ref})
            assert is_error and error["error"]["code"] == code, error
        result = await c.call_tool("knowledge_read", {"ref": ref, "cursor": "forged.cursor"})
        assert result.is_error and "knowledge_reference_invalid" in result.content[0].text  # type: ignore[union-attr]
        is_error, error = await call(c, "knowledge_search", {"query": "x", "kb_ids": ["other"]})
        assert is_error and error == {
            "error": {"code": "invalid_request", "message": "kb_ids: unknown field"}
        }
        is_error, error = await call(c, "knowledge_read", {"ref": ref, "max_bytes": "16384"})
        assert (
            is_error
            and error["error"]["code"] == "invalid_request"
            and "max_bytes" in error["error"]["message"]
        )
        is_error, page = await call(c, "knowledge_read", {"ref": ref})
        assert not is_error and page["ref"] == ref

    drive(mcp_client(kb_server, transport), session)


def initialize_body() -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"},
        },
    }


def post_mcp(server: KbServer, token: str | None, query: str = "", method: str = "POST") -> Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(initialize_body()).encode() if method == "POST" else None
    request = urllib.request.Request(
        server.endpoint + "/mcp" + query, data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as exc:
        return Response(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


@pytest.mark.parametrize("token", [None, "kbt_not-a-token", "Basic dXNlcjpwYXNz"])
def test_m_mcp_http_missing_or_invalid_token_is_401(kb_server, token):
    """M-MCP: the same authorizer and bearer tokens as §2; auth failures are HTTP errors, not tool results."""
    response = post_mcp(kb_server, token)
    assert response.status == 401 and response.headers["cache-control"] == "no-store"
    assert response.json == {"error": {"code": "unauthorized", "message": "missing or invalid bearer token"}}


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_m_mcp_http_sdk_client_sees_401(kb_server, mode):
    """M-MCP: with an invalid token the SDK client gets HTTP 401 and fails to connect (no tool result)."""
    statuses: list[int] = []

    async def record(response: Any) -> None:
        statuses.append(response.status_code)

    http = create_mcp_http_client(headers={"Authorization": "Bearer kbt_not-a-token"})
    http.event_hooks["response"].append(record)
    client = Client(streamable_http_client(kb_server.endpoint + "/mcp", http_client=http), mode=mode)
    with pytest.raises(BaseException) as raised:
        drive(client, lambda c: c.list_tools())
    assert statuses and set(statuses) == {401}
    assert any(isinstance(leaf, MCPError) for leaf in leaves(raised.value)), raised.value


def test_m_mcp_http_route_is_one_per_connection(kb_server):
    """M-MCP: the route is the token's only route, or the one the endpoint URL names; never widened."""
    assert post_mcp(kb_server, kb_server.token).status == 200
    assert post_mcp(kb_server, kb_server.token, "?route=demo").status == 200
    forbidden = post_mcp(kb_server, kb_server.token, "?route=other")
    assert forbidden.status == 403 and forbidden.json["error"]["code"] == "forbidden"
    several = issue_token(kb_server, ["demo", "other"])
    ambiguous = post_mcp(kb_server, several)
    assert ambiguous.status == 400 and ambiguous.json["error"]["code"] == "invalid_request"
    assert ambiguous.json["error"]["message"].startswith("route:")
    assert post_mcp(kb_server, several, "?route=demo").status == 200


def test_m_mcp_http_is_stateless_post_only(kb_server):
    """M-MCP: stateless Streamable HTTP: no session id is issued; GET (SSE) and DELETE answer 405."""
    response = post_mcp(kb_server, kb_server.token)
    assert response.status == 200 and "mcp-session-id" not in response.headers
    assert response.headers["content-type"].startswith("application/json")
    assert response.json["result"]["serverInfo"]["name"] == "agent-knowledge"
    for method in ("GET", "DELETE"):
        refused = post_mcp(kb_server, kb_server.token, method=method)
        assert refused.status == 405 and refused.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(("mode", "revision"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
def test_m_mcp_stdio_negotiates_either_revision(kb_server, mode, revision):
    """M-MCP: over stdio too the protocol revision is the client's choice: the initialize handshake
    (2025-11-25) and the per-request envelope (2026-07-28) both list the tools and answer a search."""
    params = StdioServerParameters(
        command=KB[0],
        args=[*KB[1:], "mcp", "--endpoint", kb_server.endpoint, "--route", "demo"],
        env={**os.environ, "KB_TOKEN": kb_server.token, "POWERTOOLS_LOG_LEVEL": "ERROR"},
        cwd=ROOT,
    )

    async def session(c: Client) -> None:
        assert c.protocol_version == revision
        assert [t.name for t in (await c.list_tools()).tools] == ["knowledge_search", "knowledge_read"]
        is_error, found = await call(c, "knowledge_search", {"query": "网关离线怎么排查？"})
        assert not is_error and found["hints"][0]["title"] == GATEWAY_TITLE

    drive(Client(params, mode=mode, read_timeout_seconds=60), session)


def test_m_mcp_stdio_embedded(tmp_path):
    """M-MCP: `kb mcp --embedded --state DIR` serves the embedded default in-process (demo seeded)."""
    params = StdioServerParameters(
        command=KB[0],
        args=[*KB[1:], "mcp", "--embedded", "--state", str(tmp_path)],
        env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR", "KB_TABLE_NAME": "kb-mcp-embedded"},
        cwd=ROOT,
    )

    async def session(c: Client) -> None:
        is_error, found = await call(c, "knowledge_search", {"query": "网关离线怎么排查？"})
        assert not is_error and found["route"] == "demo" and found["hints"][0]["title"] == GATEWAY_TITLE
        is_error, page = await call(c, "knowledge_read", {"ref": found["hints"][0]["ref"]})
        assert not is_error and page["title"] == GATEWAY_TITLE and page["next_cursor"] is None
        is_error, error = await call(c, "knowledge_read", {"ref": expired_copy_of(tmp_path, page["ref"])})
        assert is_error and error["error"]["code"] == "knowledge_reference_expired"

    drive(Client(params, read_timeout_seconds=60), session)


def test_m_mcp_stdio_embedded_answers_at_once_while_a_model_seeds_the_demo(tmp_path, embedding_model_dir):
    """M-MCP: a first `kb mcp --embedded` with the models (route demo, fresh state) stores the demo's text
    at once and fills its vectors in the background for minutes; the official SDK client is initialized at
    once (well within its read timeout), lists the tools, and a search meanwhile answers, by BM25."""
    params = StdioServerParameters(
        command=KB[0],
        args=[*KB[1:], "mcp", "--embedded", "--state", str(tmp_path)],
        env={**os.environ, "KB_EMBEDDING_MODEL_DIR": embedding_model_dir, "POWERTOOLS_LOG_LEVEL": "ERROR"},
        cwd=ROOT,
    )

    async def session(c: Client) -> None:
        assert {t.name for t in (await c.list_tools()).tools} == {"knowledge_search", "knowledge_read"}
        is_error, body = await call(c, "knowledge_search", {"query": "网关离线怎么排查？"})
        assert not is_error, body
        assert body["hints"]

    drive(Client(params, read_timeout_seconds=20), session)


def test_m_mcp_stdio_auth_failure_is_a_jsonrpc_error(kb_server):
    """M-MCP: over stdio an invalid token is a JSON-RPC error naming `unauthorized`, not a tool result."""

    async def session(c: Client) -> None:
        with pytest.raises(MCPError) as raised:
            await c.call_tool("knowledge_search", {"query": "webhook"})
        assert raised.value.data == {"code": "unauthorized", "message": "missing or invalid bearer token"}

    drive(mcp_client(kb_server, "stdio", token="kbt_not-a-token"), session)
