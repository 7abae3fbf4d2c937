"""e2e over real HTTP through `kb serve`: capabilities, search, a full read chain with cursors, the
401/403/404 edges with `Cache-Control: no-store`, the loopback-only admin API, and the Lambda Invoke
API through a boto3 lambda client (A-CAP, A-SEARCH, A-READ, §5)."""

from __future__ import annotations

import json

import pytest

from kb_cli import demo
from kb_cli.events import load_event
from kb_cli.gateway import LocalGateway, is_loopback
from tests.e2e.conftest import KbServer

EVENT_PRINCIPAL = {
    "client_id": "e2e-client",
    "session_id": "e2e-session",
    "subject": "demo-user",
    "on_behalf_of": None,
    "tenant": "default",
    "routes": ["demo"],
    "groups": [],
}


def compact_size(obj: object) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def issue_token(server: KbServer, route: str) -> str:
    response = server.request(
        "POST",
        "/admin/v1/tokens",
        {"routes": [route], "client_id": "e2e", "subject": "demo-user", "tenant": "default"},
    )
    assert response.status == 201, response.raw
    return response.json["token"]


def test_a_cap_capabilities(kb_server):
    response = kb_server.knowledge("demo", "capabilities")
    assert response.status == 200 and response.headers["cache-control"] == "no-store"
    body = response.json
    assert body["schema"] == "bailing.agent-knowledge-capabilities.v1" and body["supported"] is True
    assert body["enabled"] is True and body["route"] == "demo" and len(body["knowledge_scope_revision"]) == 64
    assert body["limits"]["read_chain_max_bytes"] == 131072


@pytest.mark.parametrize("query", ["网关离线怎么排查？", "webhook signature verification"])
def test_a_search_over_http(kb_server, query):
    response = kb_server.knowledge("demo", "search", {"query": query})
    assert response.status == 200 and response.headers["cache-control"] == "no-store"
    assert len(response.raw) <= 4096
    body = response.json
    assert body["status"] == "ok" and 1 <= len(body["hints"]) <= 3


def test_a_read_full_chain_with_cursors(kb_server):
    hints = kb_server.knowledge("demo", "search", {"query": "metadata database failover Patroni"}).json[
        "hints"
    ]
    hint = next(h for h in hints if h["title"].startswith("On-call Runbook"))
    document = next(d for d in demo.demo_documents() if d.title == hint["title"])
    content, cursor, pages = b"", None, 0
    while True:
        request = {"ref": hint["ref"], "max_bytes": 4096} | ({"cursor": cursor} if cursor else {})
        response = kb_server.knowledge("demo", "read", request)
        assert response.status == 200, response.raw
        assert response.headers["cache-control"] == "no-store" and len(response.raw) <= 4096
        page = response.json
        assert page["revision"] == hint["revision"] and page["total_content_bytes"] == len(
            document.body.encode()
        )
        content += page["content"].encode()
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert content == document.body.encode() and pages >= 10
    assert (page["truncated"], page["budget_exhausted"]) == (False, False)
    # A cursor replayed against another ref is refused.
    other = kb_server.knowledge("demo", "search", {"query": "网关离线"}).json["hints"][0]["ref"]
    first = kb_server.knowledge("demo", "read", {"ref": hint["ref"], "max_bytes": 4096}).json
    refused = kb_server.knowledge("demo", "read", {"ref": other, "cursor": first["next_cursor"]})
    assert refused.status == 400 and refused.json["error"]["code"] == "knowledge_reference_invalid"


@pytest.mark.parametrize("token", ["", "kbt_not-a-real-token", "garbage"])
@pytest.mark.parametrize("action", ["capabilities", "search", "read"])
def test_edge_401_without_or_with_a_bad_token(kb_server, token, action):
    body = None if action == "capabilities" else {"query": "x"} if action == "search" else {"ref": "x"}
    if token == "":
        response = kb_server.request(
            "GET" if action == "capabilities" else "POST",
            f"/agent-api/v1/workspaces/demo/knowledge/{action}",
            body,
        )
    else:
        response = kb_server.knowledge("demo", action, body, token=token)
    assert response.status == 401 and response.headers["cache-control"] == "no-store"
    assert response.json["error"]["code"] == "unauthorized"


def test_edge_403_for_another_route(kb_server):
    response = kb_server.knowledge("other", "search", {"query": "网关"})
    assert response.status == 403 and response.headers["cache-control"] == "no-store"
    assert response.json["error"]["code"] == "forbidden"


def test_edge_404_for_an_unknown_route(kb_server):
    response = kb_server.request("GET", "/agent-api/v1/workspaces/demo/nothing-here", token=kb_server.token)
    assert response.status == 404
    # A workspace route the token allows but that does not exist.
    response = kb_server.knowledge("nowhere", "capabilities", token=issue_token(kb_server, "nowhere"))
    assert response.status == 404 and response.headers["cache-control"] == "no-store"
    assert response.json["error"]["code"] == "not_found"


def test_edge_invalid_request_over_http(kb_server):
    response = kb_server.knowledge("demo", "search", {"query": "退款", "kb_ids": ["other@1"]})
    assert response.status == 400 and response.json["error"]["message"].startswith("kb_ids:")
    response = kb_server.knowledge("demo", "read", {"ref": "x", "max_bytes": "16384"})
    assert response.status == 400 and response.json["error"]["message"].startswith("max_bytes:")
    raw = kb_server.request(
        "POST",
        "/agent-api/v1/workspaces/demo/knowledge/search",
        token=kb_server.token,
        raw_body=b"\xff\xfe not utf-8",
    )
    assert raw.status == 400 and raw.headers["cache-control"] == "no-store"


# --- admin: loopback only ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("10.0.0.5", False),
        ("192.168.1.10", False),
        ("0.0.0.0", False),
        ("::", False),
        ("8.8.8.8", False),
        ("fe80::1", False),
        ("localhost", False),
        ("", False),
        ("127.0.0.1.evil", False),
        ("not an ip", False),
    ],
)
def test_is_loopback(address, loopback):
    assert is_loopback(address) is loopback


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/admin/v1/sources"),
        ("POST", "/admin/v1/tokens"),
        ("DELETE", "/admin/v1/sources/demo-docs@1.0.0/documents/x"),
    ],
)
def test_r_admin_refuses_non_loopback_callers(method, path):
    gateway = LocalGateway()
    status, _, raw = gateway.http(method, path, "", {"content-type": "application/json"}, b"{}", "10.1.2.3")
    assert status == 403 and json.loads(raw) == {"message": "Forbidden"}


def test_r_admin_answers_loopback(kb_server):
    definition = json.loads(load_event("admin/publish-source.json")["body"])
    response = kb_server.request("POST", "/admin/v1/sources", definition)
    assert response.status in (200, 201) and response.headers["cache-control"] == "no-store"
    assert kb_server.request("POST", "/admin/v1/sources", definition).json == {"created": False}


# --- Lambda Invoke API -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lambda_client(kb_server):
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "lambda",
        endpoint_url=kb_server.endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}, read_timeout=60),
    )

    # The Invoke API of kb serve needs the local operator credential (G-LOCAL), as the kb CLI sends it.
    def with_operator(request, **_):
        for name, value in kb_server.operator_headers.items():
            request.headers[name] = value

    client.meta.events.register("before-sign.lambda.*", with_operator)
    return client


def test_lambda_invoke_search_function(lambda_client):
    event = load_event("search/search.json")
    event["requestContext"]["authorizer"] = {"lambda": {"principal": json.dumps(EVENT_PRINCIPAL)}}
    response = lambda_client.invoke(FunctionName="SearchFunction", Payload=json.dumps(event).encode())
    assert response["StatusCode"] == 200 and "FunctionError" not in response
    result = json.loads(response["Payload"].read())
    assert result["statusCode"] == 200 and result["headers"]["Cache-Control"] == "no-store"
    body = json.loads(result["body"])
    assert body["schema"] == "bailing.agent-knowledge-search.v1" and body["status"] == "ok" and body["hints"]
    assert compact_size(body) <= 4096


def test_lambda_invoke_authorizer_and_unknown_function(lambda_client, kb_server):
    event = load_event("authorizer/request.json")
    event["headers"]["authorization"] = f"Bearer {kb_server.token}"
    response = lambda_client.invoke(FunctionName="AuthorizerFunction", Payload=json.dumps(event).encode())
    result = json.loads(response["Payload"].read())
    assert result["isAuthorized"] is True and json.loads(result["context"]["principal"])["routes"] == ["demo"]
    with pytest.raises(lambda_client.exceptions.ResourceNotFoundException):
        lambda_client.invoke(FunctionName="NoSuchFunction", Payload=b"{}")
