"""M-MCP: every refusal of the MCP endpoint is our typed error (`data: {code, message}`), the SDK's
too (bad params, unknown method, a body that is not JSON-RPC): never the input echoed back, never
pydantic's messages or its errors.pydantic.dev links."""

from __future__ import annotations

import json

import pytest
from knowledge_core.domain.wire import ReadRequest, SearchRequest
from knowledge_core.mcp_server import serve_http

SECRET = "zzz-secret-input"
HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-06-18",
}


class Door:
    route = "demo"

    def capabilities(self) -> dict:
        return {"schema": "caps"}

    def search(self, request: SearchRequest) -> dict:
        return {"hints": []}

    def read(self, request: ReadRequest) -> dict:
        return {"content": ""}


def post(body: str) -> tuple[int, dict | list]:
    answer = serve_http(Door(), method="POST", path="/mcp", query="", headers=HEADERS, body=body.encode())
    return answer.status, json.loads(answer.body)


def call(method: str, params: object) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


REFUSED = [
    ("unknown tool", call("tools/call", {"name": SECRET, "arguments": {}}), "invalid_request"),
    (
        "arguments not an object",
        call("tools/call", {"name": "knowledge_search", "arguments": SECRET}),
        "invalid_request",
    ),
    ("no tool name", call("tools/call", {"nme": SECRET}), "invalid_request"),
    ("unknown method", call(f"nosuch/{SECRET}", {}), "not_found"),
    ("unknown resource", call("resources/read", {"uri": f"{SECRET}://x"}), "invalid_request"),
    ("not JSON", f"{SECRET} not json", "invalid_request"),
    ("not a JSON-RPC message", json.dumps([SECRET, 2]), "invalid_request"),
    ("not a JSON-RPC message", json.dumps({"jsonrpc": "2.0", "id": 1, SECRET: 1}), "invalid_request"),
]


@pytest.mark.parametrize(("what", "body", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_l3_mcp_sdk_refusals_are_typed_and_echo_nothing(what: str, body: str, code: str) -> None:
    status, message = post(body)
    assert status in (200, 400)
    assert isinstance(message, dict)
    error = message["error"]
    assert set(error) == {"code", "message", "data"} and isinstance(error["code"], int)
    assert set(error["data"]) == {"code", "message"} and error["data"]["code"] == code
    text = json.dumps(message)
    assert SECRET not in text and "pydantic" not in text and "http" not in text


def test_l3_mcp_typed_refusals_leave_results_alone() -> None:
    status, message = post(call("tools/list", {}))
    assert status == 200 and isinstance(message, dict) and "result" in message
    _, bad_args = post(
        call("tools/call", {"name": "knowledge_search", "arguments": {"query": "x", "limit": SECRET}})
    )
    assert isinstance(bad_args, dict) and bad_args["result"]["isError"] is True  # a tool result, as before
    assert SECRET not in json.dumps(bad_args)
