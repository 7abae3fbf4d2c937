"""Wire models of the admin API (IAM-authenticated; loopback-only under `kb serve`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from .models import DOC_ID_PATTERN, ROUTE_PATTERN, DocumentAcl
from .wire import StrictRequest

Route = Annotated[str, StringConstraints(pattern=ROUTE_PATTERN)]


class TokenRequest(StrictRequest):
    routes: Annotated[list[Route], Field(min_length=1, max_length=32)]
    client_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] = "cli"
    session_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    subject: Annotated[str, StringConstraints(min_length=1, max_length=256)] = "user"
    on_behalf_of: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    tenant: Annotated[str, StringConstraints(min_length=1, max_length=128)] = "default"
    groups: Annotated[list[str], Field(max_length=64)] = Field(default_factory=list)
    ttl_seconds: Annotated[int, Field(ge=60, le=30 * 86400)] = 3600


class DocumentRequest(StrictRequest):
    title: Annotated[str, StringConstraints(max_length=4096)]
    body: str
    structured_source: dict[str, Any] | None = None
    acl: DocumentAcl = DocumentAcl()
    status: Literal["ready", "processing", "disabled"] = "ready"


class BulkDocument(DocumentRequest):
    doc_id: Annotated[str, StringConstraints(pattern=DOC_ID_PATTERN)]


class BulkDocumentsRequest(StrictRequest):
    documents: Annotated[list[BulkDocument], Field(min_length=1, max_length=500)]


class WorkspaceRequest(StrictRequest):
    agent: Annotated[str, StringConstraints(min_length=3, max_length=200)]


class RunEndRequest(StrictRequest):
    state: Literal["completed", "cancelled", "failed"]
