"""OpenAPI 3.1 generated from the wire models — current, valid, complete, served."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from knowledge_core.openapi import OPENAPI_PATH, openapi_document, openapi_json
from openapi_spec_validator import validate

from kb_cli.events import load_event
from kb_cli.template import load_template, routes

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def test_openapi_json_is_current():
    checked_in = (ROOT / "openapi.json").read_text(encoding="utf-8")
    assert checked_in == openapi_json(), (
        "openapi.json is stale: .venv/bin/python -m knowledge_core.openapi > openapi.json"
    )


def test_openapi_is_valid_3_1():
    document = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_openapi_documents_every_http_route_of_the_template():
    documented = {
        (method.upper(), path) for path, item in openapi_document()["paths"].items() for method in item
    }
    # /mcp is JSON-RPC (the MCP protocol describes it), not a REST operation of either API; its Protected
    # Resource Metadata is RFC 9728's document (docs/mcp-authorization.md).
    mcp = (
        "$default",
        "/mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    )
    in_template = {(r.method, r.path) for r in routes(load_template()) if r.path not in mcp}
    assert in_template == documented


def test_openapi_every_error_response_is_the_typed_error_shape():
    for item in openapi_document()["paths"].values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorResponse"
                    }


def test_openapi_is_served_without_a_token(tmp_path):
    from knowledge_core import bootstrap

    from kb_cli.gateway import Handlers
    from tests.conftest import FakeClock, embedded_container

    bootstrap.reset(embedded_container(tmp_path, FakeClock()))
    try:
        event = load_event("capabilities/get.json")
        event.update(rawPath=OPENAPI_PATH, routeKey=f"GET {OPENAPI_PATH}", pathParameters=None)
        event["requestContext"]["http"]["path"] = OPENAPI_PATH
        event["requestContext"].pop("authorizer", None)
        result = Handlers().invoke("CapabilitiesFunction", event)
    finally:
        bootstrap.reset(None)
    assert result["statusCode"] == 200 and result["headers"]["Cache-Control"] == "no-store"
    assert json.loads(result["body"]) == openapi_document()
