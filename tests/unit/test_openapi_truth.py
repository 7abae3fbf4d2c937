"""The OpenAPI document tells the whole truth, so schemathesis `--checks all` finds nothing —
the admin security as it is (IAM on AWS, no credentials on loopback under kb serve), path parameter
patterns equal to the server's checks, JSON Schema's integer semantics (`2.0` is an integer), and the
cross-field rules of request bodies that JSON Schema can state."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import InvalidRequest
from knowledge_core.domain.models import AgentDefinition, RoutingRule, split_key
from knowledge_core.domain.wire import ReadRequest, SearchRequest, parse_request
from knowledge_core.openapi import allowed_methods, openapi_document
from pydantic import ValidationError

ADMIN = [
    op
    for path, item in openapi_document()["paths"].items()
    if path.startswith("/admin/")
    for op in item.values()
]


def test_openapi_admin_security_is_iam_on_aws_or_the_operator_credential_under_kb_serve() -> None:
    """ST401/ST203, G-LOCAL: kb serve checks no Authorization header on the admin API but the local
    operator credential (X-Kb-Operator, 401 without it): SigV4 (AWS) or that header (kb serve)."""
    assert ADMIN and all(op["security"] == [{"awsSigV4": []}, {"kbOperator": []}] for op in ADMIN)
    assert all("401" in op["responses"] for op in ADMIN)
    schemes = openapi_document()["components"]["securitySchemes"]
    assert schemes["awsSigV4"]["x-amazon-apigateway-authtype"] == "awsSigv4"
    assert "loopback" in schemes["awsSigV4"]["description"] and "IAM" in schemes["awsSigV4"]["description"]
    assert schemes["kbOperator"] == {
        "type": "apiKey",
        "in": "header",
        "name": "X-Kb-Operator",
        "description": schemes["kbOperator"]["description"],
    }


def parameter_patterns() -> dict[str, str]:
    return {
        p["name"]: p["schema"]["pattern"]
        for item in openapi_document()["paths"].values()
        for op in item.values()
        for p in op.get("parameters", [])
    }


def accepts_key(key: str) -> bool:
    try:
        split_key(key)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize(
    "key",
    [
        "0@0",
        "demo-docs@1.0.0",
        "a.b_c-d@V+1_x.2",
        "a@" + "v" * 32,
        "x" * 64 + "@1",
        "0@0@0",
        "A@1",
        "a@",
        "@1",
        "a@-1",
        "a@" + "v" * 33,
        "x" * 65 + "@1",
        "a b@1",
        "a@1\n",
    ],
)
def test_openapi_source_pattern_is_split_keys(key: str) -> None:
    """ST202: `0@0` matched the document and was refused; the pattern and split_key now agree."""
    assert bool(re.search(parameter_patterns()["source"], key)) is accepts_key(key)


def test_openapi_doc_id_and_route_patterns_are_the_servers() -> None:
    from knowledge_core.domain.models import DOC_ID_PATTERN, ROUTE_PATTERN

    assert parameter_patterns()["doc_id"] == DOC_ID_PATTERN
    assert parameter_patterns()["route"] == ROUTE_PATTERN


@pytest.mark.parametrize(
    ("model", "body"),
    [(SearchRequest, '{"query": "q", "limit": 2.0}'), (ReadRequest, '{"ref": "r", "max_bytes": 4096.0}')],
)
def test_openapi_integral_float_is_an_integer(model: type, body: str) -> None:
    """ST202: JSON Schema 2020-12 counts `2.0` as an integer (schemathesis sends it): it is accepted as 2."""
    parsed = parse_request(model, body)
    assert type(parsed.limit if model is SearchRequest else parsed.max_bytes) is int


@pytest.mark.parametrize("limit", ["2.5", "true", '"2"', "1e300", "NaN"])
def test_openapi_integer_still_refuses_fractions_strings_and_booleans(limit: str) -> None:
    with pytest.raises(InvalidRequest, match=r"^(limit|body):"):
        parse_request(SearchRequest, '{"query": "q", "limit": ' + limit + "}")


def test_openapi_integer_schema_keeps_its_bounds() -> None:
    limit = openapi_document()["components"]["schemas"]["SearchRequest"]["properties"]["limit"]
    assert limit["type"] == "integer" and (limit["minimum"], limit["maximum"]) == (1, 3)
    assert "ge" not in limit and "le" not in limit


def schema_of(model: type) -> Draft202012Validator:
    """The model's schema as the document states it, its `$ref`s resolved within the document."""
    schemas = openapi_document()["components"]["schemas"]
    text = json.dumps({**schemas[model.__name__], "$defs": schemas}).replace(
        "#/components/schemas/", "#/$defs/"
    )
    return Draft202012Validator(json.loads(text))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"documents": [{"doc_id": "a", "title": "t", "body": "b"}], "directory": "/tmp"},
        {"documents": [{"doc_id": "a", "title": "t", "body": "b"}], "sync": True},
        {"directory": "/tmp"},
        {"directory": "/tmp", "acl": None},
    ],
)
def test_openapi_ingestion_job_one_origin_is_in_the_schema(body: dict) -> None:
    """ST202: `{}` was schema-valid and refused ("give exactly one of documents or directory")."""
    assert not schema_of(IngestionJobRequest).is_valid(body)
    with pytest.raises(ValidationError):
        IngestionJobRequest.model_validate(body)


def test_openapi_ingestion_job_valid_bodies_match_the_schema() -> None:
    for body in (
        {"documents": [{"doc_id": "a", "title": "t", "body": "b", "acl": {"tenant": "t"}}]},
        {"directory": "/tmp/x", "acl": {"tenant": "t"}, "sync": True, "doc_id_prefix": "p"},
    ):
        assert schema_of(IngestionJobRequest).is_valid(body), body
        IngestionJobRequest.model_validate(body)


def test_openapi_routing_rule_needs_a_condition_in_the_schema() -> None:
    """ST202: a rule with no condition was schema-valid and refused."""
    rule = {"knowledge": {"id": "a", "version": "1"}}
    assert not schema_of(RoutingRule).is_valid(rule)
    assert not schema_of(RoutingRule).is_valid({**rule, "always": False, "queryTerms": [], "tags": []})
    assert not schema_of(RoutingRule).is_valid({**rule, "queryTerms": ["x", "x"]})
    assert not schema_of(RoutingRule).is_valid({**rule, "queryTerms": ["  "]})
    assert schema_of(RoutingRule).is_valid({**rule, "tags": ["t"]})
    with pytest.raises(ValidationError):
        RoutingRule.model_validate(rule)
    assert AgentDefinition  # the agent's schema embeds the rule's


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/agent-api/v1/openapi.json", ["GET"]),
        ("/agent-api/v1/workspaces/demo/knowledge/search", ["POST"]),
        ("/admin/v1/sources/demo-docs@1.0.0/documents/x", ["DELETE", "PUT"]),
        ("/nowhere", []),
        ("/agent-api/v1/workspaces//knowledge/search", []),
    ],
)
def test_openapi_allowed_methods_of_a_path(path: str, allowed: list[str]) -> None:
    """ST204: a known path with another method is 405 with these methods in `Allow`."""
    assert allowed_methods(path) == allowed
