"""Through `kb serve`: what the OpenAPI document admits is what the server accepts — a source key
in a path segment percent-encoded as schemathesis (and any URL builder) sends it, `limit: 2.0`, and a
method the document does not give a known path is 405 with `Allow` (schemathesis ST202, ST204)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import KbServer


@pytest.mark.parametrize("key", ["demo-docs%401.0.0", "demo-docs@1.0.0"])
def test_openapi_percent_encoded_source_key_is_the_key(kb_server: KbServer, key: str) -> None:
    """ST202: `%40` is `@` in a path segment; the admin API refused it ("must be an exact id@version key")."""
    listed = kb_server.request("GET", f"/admin/v1/sources/{key}/documents")
    assert listed.status == 200 and listed.json["source"] == "demo-docs@1.0.0"


def test_openapi_integral_float_limit_is_accepted_over_http(kb_server: KbServer) -> None:
    found = kb_server.knowledge("demo", "search", {"query": "webhook signature verification", "limit": 1.0})
    assert found.status == 200 and len(found.json["hints"]) == 1
    refused = kb_server.knowledge("demo", "search", {"query": "webhook", "limit": 1.5})
    assert refused.status == 400 and refused.json["error"]["message"].startswith("limit:")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("TRACE", "/agent-api/v1/openapi.json", "GET"),
        ("DELETE", "/agent-api/v1/workspaces/demo/knowledge/search", "POST"),
        ("PATCH", "/admin/v1/sources/demo-docs%401.0.0/documents/x", "DELETE, PUT"),
    ],
)
def test_openapi_undeclared_method_is_405_with_allow(
    kb_server: KbServer, method: str, path: str, allow: str
) -> None:
    """ST204: a known path with a method it does not have is 405 naming the allowed ones, not a 404."""
    response = kb_server.request(method, path)
    assert response.status == 405 and response.headers["allow"] == allow
    assert response.headers["cache-control"] == "no-store"
    assert response.json["error"]["code"] == "method_not_allowed"
    assert kb_server.request("GET", "/nowhere").status == 404
