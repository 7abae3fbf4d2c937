"""M-AUTH: the MCP endpoint of `kb serve` as an OAuth 2.1 resource server, against a real authorization
server on loopback (mock-oauth2-server, tests/e2e/oauth_server.py) and the official MCP TypeScript SDK's
client (tests/mcp_inspector/oauth_client.mjs): discovery from the 401, a token, a tool call; then each
kind of bad token refused with its 401/403 challenge."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, KbServer, free_port, running_kb_serve
from tests.e2e.oauth_server import (
    EXPIRED_CLIENT,
    FOREIGN_ISSUER_CLIENT,
    OAuthServer,
    claims_of,
    running_oauth_server,
)

CLIENT = ROOT / "tests" / "mcp_inspector" / "oauth_client.mjs"
SDK = ROOT / "tests" / "mcp_inspector" / "node_modules" / "@modelcontextprotocol" / "sdk"
SCOPE = "knowledge/demo"
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "kb-e2e", "version": "1"},
    },
}


class Stack:
    def __init__(self, kb: KbServer, oauth: OAuthServer) -> None:
        self.kb, self.oauth = kb, oauth
        self.resource = f"{kb.endpoint}/mcp"
        self.metadata_url = f"{kb.endpoint}/.well-known/oauth-protected-resource/mcp"

    def token(self, client_id: str = "kb-agent", *, scope: str = SCOPE, resource: str | None = None) -> str:
        return self.oauth.token(client_id, scope=scope, resource=resource or self.resource)

    def mcp(self, token: str | None, query: str = "?route=demo") -> tuple[int, dict[str, str], dict]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = json.dumps(MCP_INIT).encode()
        url = f"{self.kb.endpoint}/mcp{query}"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, got, raw = answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as refused:
            status, got, raw = refused.code, refused.headers, refused.read()
        return status, {k.lower(): v for k, v in got.items()}, json.loads(raw)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state = tmp_path_factory.mktemp("kb-oauth")
    cache = Path(os.environ.get("KB_SERVICES_STATE") or ROOT / ".kb-state")
    with running_oauth_server(cache, state / "oauth-server.log") as oauth:
        port = free_port()
        env = {
            "KB_OAUTH_ISSUER": oauth.issuer,
            "KB_OAUTH_AUDIENCE": f"http://127.0.0.1:{port}/mcp",
            "KB_OAUTH_ROUTES": "demo",
        }
        # Authorization is under test, not ranking: BM25 (no models to load or vectors to fill).
        plain = ("--embedding-model", "none", "--no-query-translation")
        with running_kb_serve(state, port=port, env=env, table_prefix="kb-oauth", args=plain) as kb:
            yield Stack(kb, oauth)


def test_m_auth_protected_resource_metadata_names_the_authorization_server(stack):
    """M-AUTH / RFC 9728: the path-suffixed and the root form, public, naming the issuer and the scopes."""
    for url in (stack.metadata_url, f"{stack.kb.endpoint}/.well-known/oauth-protected-resource"):
        with urllib.request.urlopen(url, timeout=30) as answer:
            document = json.loads(answer.read())
        assert document["resource"] == stack.resource
        assert document["authorization_servers"] == [stack.oauth.issuer]
        assert document["scopes_supported"] == [SCOPE]
        assert document["bearer_methods_supported"] == ["header"]


def test_m_auth_401_without_token_points_to_the_metadata(stack):
    """M-AUTH: no token -> 401 whose challenge names the metadata and the route's scope (no error code)."""
    status, headers, body = stack.mcp(None)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    challenge = headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{stack.metadata_url}"' in challenge
    assert f'scope="{SCOPE}"' in challenge and "error=" not in challenge


def test_m_auth_sdk_client_discovers_gets_token_and_searches(stack):
    """M-AUTH: the official SDK client alone: 401 -> metadata -> authorization server metadata -> token
    (client credentials with the RFC 8707 resource and the challenge's scope) -> knowledge_search."""
    if not SDK.exists():
        message = "the MCP SDK is not installed: run scripts/mcp_inspector.sh"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [
            "node",
            str(CLIENT),
            f"{stack.resource}?route=demo",
            "kb-agent",
            "secret",
            SCOPE,
            stack.oauth.issuer,
            "webhook signature verification",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "error" not in out, out
    steps = out["transcript"]
    first = steps[0]
    assert first["status"] == 401 and f'resource_metadata="{stack.metadata_url}"' in first["www_authenticate"]
    prm = next(s for s in steps if s["url"] == stack.metadata_url)
    assert prm["status"] == 200 and prm["document"]["authorization_servers"] == [stack.oauth.issuer]
    token_request = next(s for s in steps if "token_request" in s)
    assert token_request["url"] == f"{stack.oauth.issuer}/token" and token_request["status"] == 200
    assert token_request["token_request"]["grant_type"] == "client_credentials"
    assert token_request["token_request"]["resource"] == stack.resource
    assert token_request["token_request"]["scope"] == SCOPE
    mcp_calls = [s for s in steps if s["url"].startswith(stack.resource)]
    # After the 401: initialize, initialized, the GET a stateless server answers 405, the calls.
    assert mcp_calls[0]["status"] == 401
    assert all(s["status"] in (200, 202) or (s["method"], s["status"]) == ("GET", 405) for s in mcp_calls[1:])
    assert out["tools"] == ["knowledge_search", "knowledge_read"]
    body = out["call"]["structuredContent"]
    assert body["status"] == "ok" and "Verifying Webhook Signatures" in [h["title"] for h in body["hints"]]


def _bad_signature(stack: Stack) -> str:
    """A token whose signature is another token's: header and claims intact, signature not theirs."""
    mine, other = stack.token(), stack.token("kb-other")
    return mine.rsplit(".", 1)[0] + "." + other.rsplit(".", 1)[1]


BAD_TOKENS = {
    "wrong_audience": lambda s: s.token(resource="http://127.0.0.1:9/mcp"),
    "expired": lambda s: s.token(EXPIRED_CLIENT),
    "bad_signature": _bad_signature,
    "wrong_issuer": lambda s: s.token(FOREIGN_ISSUER_CLIENT),
    "not_a_jwt": lambda s: "kbt_" + "x" * 43,
}


@pytest.mark.parametrize("case", BAD_TOKENS)
def test_m_auth_invalid_tokens_get_401_invalid_token(stack, case):
    """M-AUTH: another audience (RFC 8707), an expired token, a signature that is not the issuer's, another
    issuer: each a typed 401 whose challenge says invalid_token and where the metadata is."""
    token = BAD_TOKENS[case](stack)
    if case == "wrong_audience":
        assert claims_of(token)["aud"] == "http://127.0.0.1:9/mcp"
    if case == "expired":
        assert claims_of(token)["exp"] == 946684800
    status, headers, body = stack.mcp(token)
    assert status == 401 and body["error"]["code"] == "unauthorized", body
    challenge = headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge and f'resource_metadata="{stack.metadata_url}"' in challenge
    assert ("expired" in body["error"]["message"]) == (case == "expired")
    assert token not in json.dumps(body) and token not in challenge


@pytest.mark.parametrize("scope", ["openid", "knowledge/other"])
def test_m_auth_missing_scope_gets_403_insufficient_scope(stack, scope):
    """M-AUTH: a valid token whose scopes grant no offered route -> 403 insufficient_scope naming the scope
    this route needs (the client can ask for it: incremental consent)."""
    status, headers, body = stack.mcp(stack.token(scope=scope))
    assert status == 403 and body["error"]["code"] == "forbidden", body
    challenge = headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and f'scope="{SCOPE}"' in challenge
    assert f'resource_metadata="{stack.metadata_url}"' in challenge


def test_m_auth_service_tokens_still_work_and_oauth_tokens_stay_on_mcp(stack):
    """M-AUTH: the service's own bearer token still opens /mcp; an OAuth access token opens only /mcp
    (its audience), not the HTTP API."""
    status, _, body = stack.mcp(stack.kb.token)
    assert status == 200 and body["result"]["serverInfo"]["name"] == "agent-knowledge"
    status, _, body = stack.mcp(stack.token())
    assert status == 200 and body["result"]["serverInfo"]["name"] == "agent-knowledge"
    refused = stack.kb.knowledge("demo", "search", {"query": "webhook"}, token=stack.token())
    assert refused.status == 401
