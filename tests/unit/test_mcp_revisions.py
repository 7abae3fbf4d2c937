"""M-MCP protocol revisions on the stateless HTTP door: 2025-11-25 (initialize handshake) and 2026-07-28
(per-request `_meta` envelope, `server/discover`, Mcp-* header checks, cache hints) negotiated per request on
the same endpoint, with the refusals the 2026-07-28 revision defines answered by their own codes."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from knowledge_core.mcp_server import TOOLS, serve_http

from tests.unit.test_mcp_refusals import Door

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def post(method: str, params: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict]:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    answer = serve_http(Door(), method="POST", path="/mcp", query="", headers={**base, **headers}, body=body)
    return answer.status, json.loads(answer.body)


def modern(method: str, params: dict[str, Any] | None = None, **headers: str) -> tuple[int, dict]:
    """A 2026-07-28 request: envelope in `_meta`, version and method (and name) also in headers."""
    given = {"mcp-protocol-version": MODERN, "mcp-method": method}
    for key in ("name", "uri"):  # tools/call names a tool, resources/read a resource: Mcp-Name carries it
        if params and key in params:
            given["mcp-name"] = params[key]
    given.update({k.replace("_", "-"): v for k, v in headers.items()})
    return post(method, {**(params or {}), "_meta": META}, given)


def test_m_mcp_both_revisions_are_answered_on_one_endpoint() -> None:
    """M-MCP: an initialize at 2025-11-25 and a server/discover at 2026-07-28 reach the same server."""
    status, init = post(
        "initialize",
        {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        {"mcp-protocol-version": HANDSHAKE},
    )
    assert status == 200 and init["result"]["protocolVersion"] == HANDSHAKE
    status, discover = modern("server/discover")
    assert status == 200 and MODERN in discover["result"]["supportedVersions"]
    assert set(discover["result"]["capabilities"]) >= {"tools", "resources"}
    status, listed = modern("tools/list")
    assert status == 200 and [t["name"] for t in listed["result"]["tools"]] == list(TOOLS)


def test_m_mcp_header_mismatch_is_refused_with_its_own_code() -> None:
    """M-MCP: an Mcp-Method header that contradicts the body is HTTP 400 with JSON-RPC -32020
    (HeaderMismatch), its data our typed error; the header's value is not echoed."""
    status, answer = modern("tools/list", mcp_method="prompts/list")
    assert status == 400 and answer["id"] == 7
    error = answer["error"]
    assert error["code"] == -32020
    assert error["data"]["code"] == "invalid_request" and error["data"]["message"].startswith("headers:")
    assert "prompts/list" not in json.dumps(answer)


def test_m_mcp_unsupported_version_names_the_supported_ones() -> None:
    """M-MCP: a protocol version the server does not serve is HTTP 400, -32022, whose data lists versions
    that server/discover also lists and echoes the requested one (bounded), beside our typed error."""
    _, discover = modern("server/discover")
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "v999.0.0"}
    headers = {"mcp-protocol-version": "v999.0.0", "mcp-method": "server/discover"}
    status, answer = post("server/discover", {"_meta": meta}, headers)
    assert status == 400 and answer["error"]["code"] == -32022
    data = answer["error"]["data"]
    assert data["supported"] and set(data["supported"]) <= set(discover["result"]["supportedVersions"])
    assert data["requested"] == "v999.0.0" and data["code"] == "invalid_request"
    long = "v" + "9" * 5000
    meta = {**META, "io.modelcontextprotocol/protocolVersion": long}
    _, answer = post("server/discover", {"_meta": meta}, {**headers, "mcp-protocol-version": long})
    assert answer["error"]["code"] == -32022 and len(answer["error"]["data"]["requested"]) < 100


@pytest.mark.parametrize("value", ["  knowledge_search  ", "\tknowledge_search", "knowledge_search "])
def test_m_mcp_header_values_are_read_without_surrounding_whitespace(value: str) -> None:
    """M-MCP: optional whitespace around a header value is not part of it (RFC 9110 §5.5): Mcp-Name with
    spaces or tabs around the tool's name matches the body and the call is answered."""
    status, answer = modern(
        "tools/call", {"name": "knowledge_search", "arguments": {"query": "x"}}, mcp_name=value
    )
    assert status == 200 and answer["result"]["isError"] is False


def test_m_mcp_list_and_read_results_carry_cache_hints_by_scope() -> None:
    """M-MCP: at 2026-07-28 every list and read result says how long it stays fresh and who may share it:
    what names the connection's route is private; the tool list, the same for every caller, may be shared
    and reused for a while. At 2025-11-25 the results carry no hints."""
    results = {
        method: modern(method, params)[1]["result"]
        for method, params in [
            ("tools/list", None),
            ("resources/list", None),
            ("resources/templates/list", None),
            ("resources/read", {"uri": "knowledge://workspaces/demo/capabilities"}),
        ]
    }
    for result in results.values():
        assert result["ttlMs"] >= 0 and result["cacheScope"] in ("public", "private")
    assert results["tools/list"]["cacheScope"] == "public" and results["tools/list"]["ttlMs"] > 0
    for method in ("resources/list", "resources/templates/list", "resources/read"):
        assert results[method]["cacheScope"] == "private"
    _, old = post("tools/list", {}, {"mcp-protocol-version": HANDSHAKE})
    assert "ttlMs" not in old["result"] and "cacheScope" not in old["result"]


def test_m_mcp_tool_schemas_declare_json_schema_2020_12() -> None:
    """M-MCP: each tool's input and output schema names the 2020-12 dialect and is a valid 2020-12 schema,
    on the wire of both revisions; tools/list answers in one fixed order."""
    for answer in (modern("tools/list")[1], post("tools/list", {}, {"mcp-protocol-version": HANDSHAKE})[1]):
        for tool in answer["result"]["tools"]:
            for schema in (tool["inputSchema"], tool["outputSchema"]):
                assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
                jsonschema.Draft202012Validator.check_schema(schema)
    orders = {tuple(t["name"] for t in modern("tools/list")[1]["result"]["tools"]) for _ in range(3)}
    assert orders == {tuple(TOOLS)}
