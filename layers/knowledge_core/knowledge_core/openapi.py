"""The OpenAPI 3.1 document of the public agent API and the admin API, generated from the pydantic wire
models (requests in validation mode, responses in serialization mode) and the typed errors: nothing in it
is written by hand, so it cannot drift from what the handlers validate and return.

`python -m knowledge_core.openapi > openapi.json` writes the checked-in copy (a test fails when stale);
`GET /agent-api/v1/openapi.json` serves it."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .domain import admin_wire as aw
from .domain import errors
from .domain.budget import INVOCATION_ID_PATTERN
from .domain.models import (
    DOC_ID_PATTERN,
    ID_PATTERN,
    ROUTE_PATTERN,
    VERSION_PATTERN,
    AgentDefinition,
    SourceDefinition,
)
from .domain.turn_wire import TurnRequest, TurnResponse
from .domain.wire import CapabilitiesResponse, ReadRequest, ReadResponse, SearchRequest, SearchResponse

OPENAPI_PATH = "/agent-api/v1/openapi.json"
ADMIN_ACCESS = (
    "On AWS: IAM, a SigV4-signed request (API Gateway's AWS_IAM authorizer; unsigned or denied: 403 "
    '{"message":"Forbidden"}). Under kb serve: the local operator credential (kbOperator, the other '
    "alternative in each admin operation's security), answered only to loopback clients whose request "
    "names the server itself (Host: 127.0.0.1, localhost or [::1] with its port; otherwise 421 "
    "misdirected_request) and that no other site's browser sent (Origin, Sec-Fetch-Site; otherwise 403 "
    '{"message":"Forbidden"}).'
)
OPERATOR_ACCESS = (
    "Under kb serve (G-LOCAL: loopback is not an identity): the local operator credential kb serve keeps "
    "0600 in --state/operator-credential (the kb CLI reads it; the console gets it from the URL kb serve "
    "prints). Without it, or a wrong one: 401 unauthorized."
)
_REF = "#/components/schemas/{model}"
# The server's own patterns (an `id@version` key is split_key's): nothing the document admits is refused
# as malformed, nothing it refuses is let through.
_PATTERNS = {
    "route": ROUTE_PATTERN,
    "source": ID_PATTERN.removesuffix("$") + "@" + VERSION_PATTERN.removeprefix("^"),
    "doc_id": DOC_ID_PATTERN,
    "run_id": r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    "token_id": aw.TOKEN_ID_PATTERN,
    "root_id": INVOCATION_ID_PATTERN,
    "job_id": r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
}


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    """Every error: a typed code, a message that names the field and never echoes internals."""

    error: ErrorDetail


def _error_statuses() -> dict[int, list[str]]:
    """HTTP status -> the typed error codes answered with it (tool errors are Lambda results, not HTTP)."""
    out: dict[int, set[str]] = {}
    stack: list[type[errors.KnowledgeError]] = [errors.KnowledgeError]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if not issubclass(cls, errors.ToolError):
            out.setdefault(cls.status, set()).add(cls.code)
    return {status: sorted(codes) for status, codes in sorted(out.items())}


# (method, path, operationId, summary, request model, response model, success status, extra error statuses)
_PUBLIC = "agent-api/v1/workspaces/{route}"
_OPERATIONS: list[
    tuple[str, str, str, str, type[BaseModel] | None, type[BaseModel], int, tuple[int, ...]]
] = [
    (
        "get",
        f"/{_PUBLIC}/knowledge/capabilities",
        "capabilities",
        "Protocol negotiation (A-CAP)",
        None,
        CapabilitiesResponse,
        200,
        (401, 403, 404, 503),
    ),
    (
        "post",
        f"/{_PUBLIC}/knowledge/search",
        "search",
        "Bounded, signed hints (A-SEARCH)",
        SearchRequest,
        SearchResponse,
        200,
        (400, 401, 403, 404, 409, 503),
    ),
    (
        "post",
        f"/{_PUBLIC}/knowledge/read",
        "read",
        "Byte-bounded pages by ref (A-READ)",
        ReadRequest,
        ReadResponse,
        200,
        (400, 401, 403, 404, 409, 410, 503),
    ),
    (
        "post",
        f"/{_PUBLIC}/turns",
        "turns",
        "Turn context and knowledge_delivery (A-TURN)",
        TurnRequest,
        TurnResponse,
        200,
        (400, 401, 403, 404, 409, 503),
    ),
    (
        "post",
        "/admin/v1/search-indices",
        "prepareSearchIndices",
        "Create the search indices (deploy time)",
        None,
        aw.PreparedResponse,
        200,
        (503,),
    ),
    (
        "get",
        "/admin/v1/search-indices",
        "listSearchIndices",
        "How the search indices are stored: segments, their target, merging",
        None,
        aw.SearchIndicesResponse,
        200,
        (503,),
    ),
    (
        "post",
        "/admin/v1/search-indices/compact",
        "compactSearchIndices",
        "Merge the passages index's segments in the background",
        None,
        aw.CompactionResponse,
        202,
        (503,),
    ),
    (
        "post",
        "/admin/v1/sources",
        "publishSource",
        "Publish an immutable source version",
        SourceDefinition,
        aw.PublishResponse,
        201,
        (400, 409, 503),
    ),
    (
        "post",
        "/admin/v1/agents",
        "publishAgent",
        "Publish an immutable agent version",
        AgentDefinition,
        aw.PublishResponse,
        201,
        (400, 409, 503),
    ),
    (
        "put",
        "/admin/v1/workspaces/{route}",
        "setWorkspace",
        "Point a workspace at an agent version",
        aw.WorkspaceRequest,
        aw.WorkspaceResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/enable",
        "enableSource",
        "Enable a source",
        None,
        aw.SourceSwitchResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/disable",
        "disableSource",
        "Disable a source",
        None,
        aw.SourceSwitchResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/documents",
        "putDocuments",
        "Create or replace documents",
        aw.BulkDocumentsRequest,
        aw.DocumentsResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/tenant-migration",
        "migrateTenant",
        "List (or with apply, assign a tenant to) documents stored without one",
        aw.TenantMigrationRequest,
        aw.TenantMigrationResponse,
        200,
        (400, 404, 503),
    ),
    (
        "put",
        "/admin/v1/sources/{source}/documents/{doc_id}",
        "putDocument",
        "Create or replace a document",
        aw.DocumentRequest,
        aw.DocumentResponse,
        200,
        (400, 404, 503),
    ),
    (
        "delete",
        "/admin/v1/sources/{source}/documents/{doc_id}",
        "deleteDocument",
        "Delete a document",
        None,
        aw.DocumentDeletedResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/documents/{doc_id}/enable",
        "enableDocument",
        "Enable a document",
        None,
        aw.DocumentStatusResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/documents/{doc_id}/disable",
        "disableDocument",
        "Disable a document",
        None,
        aw.DocumentStatusResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/tokens",
        "issueToken",
        "Issue a bearer token",
        aw.TokenRequest,
        aw.TokenIssuedResponse,
        201,
        (400, 503),
    ),
    (
        "get",
        "/admin/v1/tokens",
        "listTokens",
        "Unexpired tokens, by id (never the token or its hash)",
        None,
        aw.TokenListResponse,
        200,
        (503,),
    ),
    (
        "post",
        "/admin/v1/tokens/{token_id}/revoke",
        "revokeToken",
        "Revoke a token",
        None,
        aw.TokenRevokedResponse,
        200,
        (400, 404, 503),
    ),
    (
        "get",
        "/admin/v1/sources",
        "listSources",
        "Every published source version with its switches",
        None,
        aw.SourceListResponse,
        200,
        (503,),
    ),
    (
        "get",
        "/admin/v1/sources/{source}/documents",
        "listDocuments",
        "The documents of a source (never their bodies)",
        None,
        aw.DocumentListResponse,
        200,
        (400, 404, 503),
    ),
    (
        "get",
        "/admin/v1/agents",
        "listAgents",
        "Every published agent version, its precheck and the routes pointing at it",
        None,
        aw.AgentListResponse,
        200,
        (503,),
    ),
    (
        "get",
        "/admin/v1/workspaces",
        "listWorkspaces",
        "Every workspace route and the agent it points at",
        None,
        aw.WorkspaceListResponse,
        200,
        (503,),
    ),
    (
        "get",
        "/admin/v1/ledgers/{root_id}",
        "getLedger",
        "The budget ledger of a root invocation tree",
        None,
        aw.LedgerResponse,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/ingestion-jobs",
        "submitIngestionJob",
        "Start an ingestion job: documents inline, or a directory the service reads (kb serve)",
        aw.IngestionJobRequest,
        aw.JobAccepted,
        202,
        (400, 404, 503),
    ),
    (
        "get",
        "/admin/v1/sources/{source}/ingestion-jobs",
        "listIngestionJobs",
        "The latest ingestion jobs of a source",
        None,
        aw.JobList,
        200,
        (400, 503),
    ),
    (
        "get",
        "/admin/v1/sources/{source}/ingestion-jobs/{job_id}",
        "getIngestionJob",
        "An ingestion job: state, counts, per-document errors, timestamps",
        None,
        aw.JobStatus,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/sources/{source}/ingestion-jobs/{job_id}/cancel",
        "cancelIngestionJob",
        "Cancel an ingestion job: it stops after its current batch (state cancelled, counts kept)",
        None,
        aw.JobStatus,
        200,
        (400, 404, 503),
    ),
    (
        "post",
        "/admin/v1/runs/{run_id}/end",
        "endRun",
        "Complete, cancel or fail a run",
        aw.RunEndRequest,
        aw.RunEndResponse,
        200,
        (400, 404, 503),
    ),
]


def _parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string", "pattern": _PATTERNS[n]}}
        for n in names
    ]


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    models: list[tuple[type[BaseModel], Any]] = [(ErrorResponse, "serialization")]
    for _, _, _, _, request, response, _, _ in _OPERATIONS:
        if request is not None:
            models.append((request, "validation"))
        models.append((response, "serialization"))
    keys, schemas = models_json_schema(list(dict.fromkeys(models)), ref_template=_REF)
    codes = _error_statuses()
    paths: dict[str, dict[str, Any]] = {}
    for method, path, op_id, summary, request, response, status, error_statuses in _OPERATIONS:
        admin = path.startswith("/admin/")
        responses: dict[str, Any] = {
            str(status): {
                "description": "OK" if status == 200 else "Created",
                "content": {"application/json": {"schema": keys[(response, "serialization")]}},
            }
        }
        if status == 201:  # publishing identical content again is a no-op
            responses["200"] = responses["201"] | {"description": "Already published (identical)"}
        for error in sorted({*error_statuses, 500, *((401,) if admin else ())}):
            responses[str(error)] = {
                "description": "Typed error: " + ", ".join(codes.get(error, ["internal_error"])),
                "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}},
            }
        operation: dict[str, Any] = {
            "operationId": op_id,
            "summary": summary,
            "tags": ["admin" if admin else "agent-knowledge"],
            # Admin: IAM on AWS, or the local operator credential under kb serve.
            "security": [{"awsSigV4": []}, {"kbOperator": []}] if admin else [{"bearer": []}],
            "responses": responses,
        }
        if _parameters(path):
            operation["parameters"] = _parameters(path)
        if request is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": keys[(request, "validation")]}},
            }
        paths.setdefault(path, {})[method] = operation
    paths[OPENAPI_PATH] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "tags": ["agent-knowledge"],
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Knowledge Service",
            "version": "1.0.0",
            "description": "bailing.agent-knowledge.v1 (public, bearer token) and the admin API (IAM on "
            "AWS; loopback only, with the local operator credential, under kb serve).",
        },
        "servers": [{"url": "http://127.0.0.1:3000", "description": "kb serve"}],
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "kbt_… from the admin API"},
                "awsSigV4": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "x-amazon-apigateway-authtype": "awsSigv4",
                    "description": ADMIN_ACCESS,
                },
                "kbOperator": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Kb-Operator",
                    "description": OPERATOR_ACCESS,
                },
            },
        },
    }


def allowed_methods(path: str) -> list[str]:
    """The methods the document gives `path` (its templates matched segment by segment): a request with
    another method on a known path is 405 with `Allow`, not the catch-all's 404 (RFC 9110 §15.5.6)."""
    wanted = path.rstrip("/").split("/")
    found: set[str] = set()
    for template, item in openapi_document()["paths"].items():
        parts = template.split("/")
        if len(parts) == len(wanted) and all(
            p == w or (p.startswith("{") and w) for p, w in zip(parts, wanted, strict=True)
        ):
            found.update(method.upper() for method in item)
    return sorted(found)


def openapi_json() -> str:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


if __name__ == "__main__":
    print(openapi_json(), end="")
