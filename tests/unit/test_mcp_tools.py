"""M-MCP in process: tool schemas generated from the wire models, the tool-call mapping (results exactly the
§2 bodies, refusals as coded `isError` results, auth as JSON-RPC errors), the route of a connection, the
`mcp` function driven by its events, and a read chain cut at the chain limit through the SDK's client."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import jsonschema
import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.errors import Forbidden, InvalidRequest
from knowledge_core.domain.models import Document, DocumentAcl, Principal
from knowledge_core.domain.wire import ReadRequest, SearchRequest
from knowledge_core.mcp_server import (
    TOOLS,
    AuthRefused,
    ServiceDoor,
    build_server,
    call_tool,
    connection_route,
)

from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import FakeClock, installed_demo

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
PRINCIPAL = Principal(
    client_id="demo-client", session_id="demo-session", subject="demo-user", tenant="default", routes=["demo"]
)
SOURCE = "demo-docs@1.0.0"
LONG_DOC = "long-manual"
_PARAGRAPH = "Zebrafinch calibration appendix: 校准附录，逐行记录。 " * 40 + "\n\n"
LONG_BODY = "".join(f"## Section {i}\n\n{_PARAGRAPH}" for i in range(120))  # ~ 300 KB, past the chain limit


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Container]:
    with installed_demo(tmp_path_factory, clock, "mcp") as container:
        container.admin.put_documents(
            [
                Document(
                    source_key=SOURCE,
                    doc_id=LONG_DOC,
                    title="Long manual",
                    body=LONG_BODY,
                    # the demo principal's tenant (a document always names one)
                    acl=DocumentAcl(tenant="default"),
                )
            ]
        )
        yield container


@pytest.fixture
def door(container: Container) -> ServiceDoor:
    return ServiceDoor(container.knowledge, PRINCIPAL, "demo")


def test_m_mcp_input_schemas_are_the_wire_models():
    """M-MCP: every field of the request models, their bounds, no extra fields, no unresolved $ref."""
    for spec, model in ((TOOLS["knowledge_search"], SearchRequest), (TOOLS["knowledge_read"], ReadRequest)):
        schema = spec.input_schema
        assert set(schema["properties"]) == set(model.model_fields)
        assert schema["additionalProperties"] is False and schema["type"] == "object"
        assert all(p.get("description") for p in schema["properties"].values())
        assert "$ref" not in json.dumps(schema) and "$ref" not in json.dumps(spec.output_schema)
        jsonschema.Draft202012Validator.check_schema(schema)
    search = TOOLS["knowledge_search"].input_schema["properties"]
    assert search["limit"]["minimum"] == 1 and search["limit"]["maximum"] == 3
    assert search["query"]["maxLength"] == 2000
    read = TOOLS["knowledge_read"].input_schema["properties"]
    assert (read["max_bytes"]["minimum"], read["max_bytes"]["maximum"], read["max_bytes"]["default"]) == (
        4096,
        32768,
        16384,
    )


def test_m_mcp_results_are_the_section_2_bodies_and_match_the_output_schemas(door, container):
    """M-MCP / A-SEARCH / A-READ: the tool result is the service's body, valid against the output schema."""
    found = call_tool(door, "knowledge_search", {"query": "网关离线怎么排查？", "limit": 2})
    assert not found.is_error
    assert found.body["hints"] and found.body == {**found.body, "schema": "bailing.agent-knowledge-search.v1"}
    jsonschema.validate(found.body, TOOLS["knowledge_search"].output_schema)
    ref = found.body["hints"][0]["ref"]
    page = call_tool(door, "knowledge_read", {"ref": ref, "max_bytes": 4096})
    assert not page.is_error and page.body["ref"] == ref
    jsonschema.validate(page.body, TOOLS["knowledge_read"].output_schema)
    direct = container.knowledge.read(PRINCIPAL, "demo", ReadRequest(ref=ref, max_bytes=4096)).wire()
    assert page.body == direct


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "field"),
    [
        ("knowledge_search", {"query": "x", "kb_ids": ["other"]}, "invalid_request", "kb_ids"),
        ("knowledge_search", {"query": "   "}, "invalid_request", "query"),
        ("knowledge_search", {"query": "x", "limit": "3"}, "invalid_request", "limit"),
        ("knowledge_search", {"query": "x", "limit": 4}, "invalid_request", "limit"),
        ("knowledge_search", None, "invalid_request", "query"),
        ("knowledge_read", {"ref": "x", "doc_id": "y"}, "invalid_request", "doc_id"),
        ("knowledge_read", {"ref": "x", "max_bytes": 1024}, "invalid_request", "max_bytes"),
        ("knowledge_read", {"ref": "not.a-ref"}, "knowledge_reference_invalid", None),
    ],
)
def test_m_mcp_refusals_are_coded_error_results(door, tool, arguments, code, field):
    """M-MCP: validation exactly as the HTTP API (strict types, unknown fields) and typed codes."""
    outcome = call_tool(door, tool, arguments)
    assert outcome.is_error and set(outcome.body) == {"error"}
    assert outcome.body["error"]["code"] == code
    if field:
        assert outcome.body["error"]["message"].startswith(f"{field}:")


def test_m_mcp_auth_refusals_are_not_tool_results(container):
    """M-MCP: a route the principal may not use is an auth failure (JSON-RPC error), not a tool result."""
    door = ServiceDoor(container.knowledge, PRINCIPAL, "other")
    with pytest.raises(AuthRefused) as raised:
        call_tool(door, "knowledge_search", {"query": "x"})
    assert raised.value.error.code == "forbidden"


def test_m_mcp_connection_route():
    """M-MCP: one route per connection: the endpoint's, else the token's only route; never widened."""
    assert connection_route(PRINCIPAL, None) == "demo"
    assert connection_route(PRINCIPAL, "demo") == "demo"
    with pytest.raises(Forbidden):
        connection_route(PRINCIPAL, "other")
    several = PRINCIPAL.model_copy(update={"routes": ["demo", "other"]})
    with pytest.raises(InvalidRequest) as raised:
        connection_route(several, None)
    assert raised.value.field == "route"
    assert connection_route(several, "other") == "other"


def test_m_mcp_chain_limit_through_the_sdk_client(door):
    """M-MCP / A-READ: a document past 131072 bytes, paged through the SDK client to the chain limit."""
    from mcp import Client

    async def session() -> list[dict]:
        pages: list[dict] = []
        with anyio.fail_after(60):
            async with Client(build_server(door)) as client:
                found = await client.call_tool(
                    "knowledge_search", {"query": "zebrafinch calibration appendix"}
                )
                hint = next(h for h in found.structured_content["hints"] if h["title"] == "Long manual")
                cursor = None
                while True:
                    arguments = {"ref": hint["ref"], "max_bytes": 32768} | (
                        {"cursor": cursor} if cursor else {}
                    )
                    result = await client.call_tool("knowledge_read", arguments)
                    assert not result.is_error, result.content
                    pages.append(result.structured_content)
                    cursor = result.structured_content["next_cursor"]
                    if cursor is None:
                        return pages

    pages = anyio.run(session)
    delivered = "".join(p["content"] for p in pages).encode()
    assert pages[0]["total_content_bytes"] == len(LONG_BODY.encode()) > 131072
    # Never past the chain limit, never inside a code point: up to 3 bytes short of it with CJK text.
    assert 131072 - 4 < len(delivered) <= 131072 and LONG_BODY.encode().startswith(delivered)
    assert pages[-1]["budget_exhausted"] is True and pages[-1]["truncated"] is True
    assert all(not p["budget_exhausted"] for p in pages[:-1])


# --- the mcp function, driven by its events ---------------------------------------------------------------


@pytest.fixture(scope="module")
def handlers(container: Container) -> Handlers:
    return Handlers()


def invoke(handlers: Handlers, event: dict) -> tuple[int, dict, dict]:
    result = handlers.invoke("McpFunction", event)
    assert result["headers"]["Cache-Control"] == "no-store", result
    return result["statusCode"], result["headers"], json.loads(result["body"])


def test_m_mcp_function_events(handlers):
    """M-MCP: events/mcp/*.json through the handler: initialize, tools/list, a search tools/call."""
    status, headers, body = invoke(handlers, load_event("mcp/initialize.json"))
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert body["result"]["serverInfo"]["name"] == "agent-knowledge"
    assert body["result"]["protocolVersion"] == "2025-06-18"
    status, _, body = invoke(handlers, load_event("mcp/tools-list.json"))
    assert status == 200 and [t["name"] for t in body["result"]["tools"]] == [
        "knowledge_search",
        "knowledge_read",
    ]
    status, _, body = invoke(handlers, load_event("mcp/search.json"))
    result = body["result"]
    assert status == 200 and result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert result["structuredContent"]["status"] == "ok" and result["structuredContent"]["hints"]


def test_m_mcp_function_discover_event_at_2026_07_28(handlers):
    """M-MCP: events/mcp/discover.json, a stateless 2026-07-28 request, through the Lambda handler: the
    server's versions, tools and resources, and its identity in the result's `_meta`."""
    status, headers, body = invoke(handlers, load_event("mcp/discover.json"))
    assert status == 200 and headers["Content-Type"] == "application/json" and "mcp-session-id" not in headers
    result = body["result"]
    assert "2026-07-28" in result["supportedVersions"]
    assert set(result["capabilities"]) >= {"tools", "resources"}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agent-knowledge"


def test_m_mcp_function_without_principal_is_401(handlers):
    """M-MCP: no principal from the authorizer -> the typed 401, before any MCP processing."""
    event = load_event("mcp/search.json")
    event["requestContext"]["authorizer"] = {"lambda": {}}
    status, _, body = invoke(handlers, event)
    assert status == 401 and body == {
        "error": {"code": "unauthorized", "message": "missing or invalid bearer token"}
    }


def test_m_mcp_function_route_and_method_edges(handlers):
    """M-MCP: ?route= outside the token is 403; several routes and none named is 400 naming `route`;
    GET (no SSE stream in stateless mode) is 405."""
    event = load_event("mcp/search.json")
    event["rawQueryString"], event["queryStringParameters"] = "route=other", {"route": "other"}
    status, _, body = invoke(handlers, event)
    assert status == 403 and body["error"]["code"] == "forbidden"
    event = load_event("mcp/search.json")
    several = PRINCIPAL.model_copy(update={"routes": ["demo", "other"]})
    event["requestContext"]["authorizer"] = {"lambda": {"principal": several.model_dump_json()}}
    status, _, body = invoke(handlers, event)
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert body["error"]["message"].startswith("route:")
    event = load_event("mcp/tools-list.json")
    event["requestContext"]["http"]["method"], event["body"] = "GET", None
    status, headers, body = invoke(handlers, event)
    assert status == 405 and headers["allow"] == "POST" and body["error"]["code"] == -32600
