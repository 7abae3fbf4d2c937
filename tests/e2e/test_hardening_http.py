"""The security review's findings through `kb serve`: the OpenAPI document is served without a token; a
revoked token is refused; another tenant's token sees none of the demo tenant's documents."""

from __future__ import annotations

import json

from knowledge_core.openapi import openapi_document

from kb_cli.http import call
from tests.e2e.conftest import KbServer


def test_openapi_served_at_agent_api_v1(kb_server: KbServer) -> None:
    response = kb_server.request("GET", "/agent-api/v1/openapi.json")
    assert response.status == 200 and response.headers["cache-control"] == "no-store"
    assert response.json == openapi_document()


def test_S7_revoked_token_is_refused_over_http(kb_server: KbServer) -> None:
    issued = call(
        kb_server.endpoint,
        "POST",
        "/admin/v1/tokens",
        {"routes": ["demo"], "client_id": "e2e-revoke", "subject": "u", "tenant": "default"},
        state=kb_server.state,
    )
    assert kb_server.knowledge("demo", "search", {"query": "网关"}, token=issued["token"]).status == 200
    assert kb_server.kb("token", "revoke", issued["token_id"]).returncode == 0
    listed = kb_server.kb("token", "list", "--json")
    assert issued["token"] not in listed.stdout
    assert [t["revoked"] for t in json.loads(listed.stdout) if t["token_id"] == issued["token_id"]] == [True]
    refused = kb_server.knowledge("demo", "search", {"query": "网关"}, token=issued["token"])
    assert refused.status == 401 and refused.headers["cache-control"] == "no-store"


def test_S3_another_tenant_sees_nothing_over_http(kb_server: KbServer) -> None:
    other = call(
        kb_server.endpoint,
        "POST",
        "/admin/v1/tokens",
        {"routes": ["demo"], "client_id": "e2e-tenant", "subject": "u", "tenant": "tenant-b"},
        state=kb_server.state,
    )["token"]
    mine = kb_server.knowledge("demo", "search", {"query": "网关离线"}).json
    assert mine["hints"]
    theirs = kb_server.knowledge("demo", "search", {"query": "网关离线"}, token=other)
    assert theirs.status == 200 and theirs.json["hints"] == []
    read = kb_server.knowledge("demo", "read", {"ref": mine["hints"][0]["ref"]}, token=other)
    assert read.status == 400 and read.json["error"]["code"] == "knowledge_reference_invalid"
