"""Admin API (IAM auth on AWS; loopback only under `kb serve`): publish, workspaces, documents, ingestion
jobs, tokens, runs."""

import re
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from knowledge_core import bootstrap
from knowledge_core.domain.admin_wire import (
    TOKEN_ID_PATTERN,
    BulkDocumentsRequest,
    DocumentDeletedResponse,
    DocumentRequest,
    DocumentResponse,
    DocumentRevision,
    DocumentsResponse,
    DocumentStatusResponse,
    IngestionJobRequest,
    PreparedResponse,
    PublishResponse,
    RunEndRequest,
    RunEndResponse,
    SourceSwitchResponse,
    TenantMigrationRequest,
    TenantMigrationResponse,
    TokenIssuedResponse,
    TokenListResponse,
    TokenRequest,
    TokenRevokedResponse,
    WorkspaceRequest,
    WorkspaceResponse,
)
from knowledge_core.domain.budget import INVOCATION_ID_PATTERN
from knowledge_core.domain.errors import InvalidRequest
from knowledge_core.domain.models import (
    DOC_ID_PATTERN,
    AgentDefinition,
    Document,
    SourceDefinition,
    split_key,
    token_id_of,
)
from knowledge_core.domain.wire import parse_request
from knowledge_core.edge import body_of, json_response, make_resolver
from knowledge_core.observability import logger, tracer
from knowledge_core.services.access import token_hash

app = make_resolver()


def _key(source: str) -> str:
    try:
        split_key(source)
    except ValueError:
        raise InvalidRequest("source: must be an exact id@version key", field="source") from None
    return source


def _doc_id(doc_id: str) -> str:
    """The path's document id, checked before it reaches a model or a store (L1: it was a 500)."""
    if not re.fullmatch(DOC_ID_PATTERN, doc_id):
        raise InvalidRequest(
            "doc_id: must start with a letter or digit and hold at most 200 of A-Z a-z 0-9 . _ : -",
            field="doc_id",
        )
    return doc_id


@app.post("/admin/v1/sources")
def publish_source() -> Response[str]:
    created = bootstrap.container().admin.publish_source(parse_request(SourceDefinition, body_of(app)))
    return json_response(PublishResponse(created=created).model_dump(), 201 if created else 200)


@app.post("/admin/v1/search-indices")
def prepare_search_indices() -> Response[str]:
    """Deploy time (after `sam deploy`; ingestion also does it): the read path never writes schema."""
    bootstrap.container().admin.prepare_search()
    return json_response(PreparedResponse(prepared=True).model_dump())


@app.get("/admin/v1/search-indices")
def search_indices() -> Response[str]:
    """How the passages index is stored: segments, what a compaction leaves, whether one runs."""
    return json_response(bootstrap.container().admin.search_indices().model_dump())


@app.post("/admin/v1/search-indices/compact")
def compact_search_indices() -> Response[str]:
    """Merge the passages index's segments in the background (an operator, after a bulk load): 202."""
    return json_response(bootstrap.container().admin.compact_search().model_dump(), 202)


@app.post("/admin/v1/agents")
def publish_agent() -> Response[str]:
    created = bootstrap.container().admin.publish_agent(parse_request(AgentDefinition, body_of(app)))
    return json_response(PublishResponse(created=created).model_dump(), 201 if created else 200)


@app.put("/admin/v1/workspaces/<route>")
def set_workspace(route: str) -> Response[str]:
    request = parse_request(WorkspaceRequest, body_of(app))
    bootstrap.container().admin.set_workspace(route, request.agent)
    return json_response(WorkspaceResponse(route=route, agent=request.agent).model_dump())


@app.post("/admin/v1/sources/<source>/enable")
def enable_source(source: str) -> Response[str]:
    bootstrap.container().admin.set_source_enabled(_key(source), True)
    return json_response(SourceSwitchResponse(source=source, enabled=True).model_dump())


@app.post("/admin/v1/sources/<source>/disable")
def disable_source(source: str) -> Response[str]:
    bootstrap.container().admin.set_source_enabled(_key(source), False)
    return json_response(SourceSwitchResponse(source=source, enabled=False).model_dump())


@app.put("/admin/v1/sources/<source>/documents/<doc_id>")
def put_document(source: str, doc_id: str) -> Response[str]:
    key, doc_id = _key(source), _doc_id(doc_id)  # the path before the body: its errors name the path
    request = parse_request(DocumentRequest, body_of(app))
    doc = Document(source_key=key, doc_id=doc_id, **request.model_dump())
    bootstrap.container().admin.put_documents([doc])
    return json_response(DocumentResponse(source=source, doc_id=doc_id, revision=doc.revision).model_dump())


@app.post("/admin/v1/sources/<source>/documents")
def put_documents(source: str) -> Response[str]:
    request = parse_request(BulkDocumentsRequest, body_of(app))
    docs = [Document(source_key=_key(source), **d.model_dump()) for d in request.documents]
    bootstrap.container().admin.put_documents(docs)
    revisions = [DocumentRevision(doc_id=d.doc_id, revision=d.revision) for d in docs]
    return json_response(DocumentsResponse(source=source, documents=revisions).model_dump())


@app.post("/admin/v1/sources/<source>/tenant-migration")
def migrate_tenant(source: str) -> Response[str]:
    request = parse_request(TenantMigrationRequest, body_of(app))
    doc_ids = bootstrap.container().admin.migrate_tenant(_key(source), request.tenant, request.apply)
    migration = TenantMigrationResponse(
        source=source, tenant=request.tenant, applied=request.apply, documents=doc_ids
    )
    return json_response(migration.model_dump())


@app.delete("/admin/v1/sources/<source>/documents/<doc_id>")
def delete_document(source: str, doc_id: str) -> Response[str]:
    bootstrap.container().admin.delete_document(_key(source), _doc_id(doc_id))
    return json_response(DocumentDeletedResponse(source=source, doc_id=doc_id, deleted=True).model_dump())


@app.post("/admin/v1/sources/<source>/documents/<doc_id>/enable")
def enable_document(source: str, doc_id: str) -> Response[str]:
    bootstrap.container().admin.set_document_status(_key(source), _doc_id(doc_id), "ready")
    return json_response(DocumentStatusResponse(source=source, doc_id=doc_id, status="ready").model_dump())


@app.post("/admin/v1/sources/<source>/documents/<doc_id>/disable")
def disable_document(source: str, doc_id: str) -> Response[str]:
    bootstrap.container().admin.set_document_status(_key(source), _doc_id(doc_id), "disabled")
    return json_response(DocumentStatusResponse(source=source, doc_id=doc_id, status="disabled").model_dump())


@app.post("/admin/v1/sources/<source>/ingestion-jobs")
def submit_ingestion_job(source: str) -> Response[str]:
    request = parse_request(IngestionJobRequest, body_of(app))
    return json_response(bootstrap.container().ingestion.submit(_key(source), request), 202)


@app.get("/admin/v1/sources/<source>/ingestion-jobs")
def list_ingestion_jobs(source: str) -> Response[str]:
    return json_response(bootstrap.container().ingestion.list_jobs(_key(source)))


@app.get("/admin/v1/sources/<source>/ingestion-jobs/<job_id>")
def get_ingestion_job(source: str, job_id: str) -> Response[str]:
    return json_response(bootstrap.container().ingestion.status(_key(source), job_id))


@app.post("/admin/v1/sources/<source>/ingestion-jobs/<job_id>/cancel")
def cancel_ingestion_job(source: str, job_id: str) -> Response[str]:
    return json_response(bootstrap.container().ingestion.cancel(_key(source), job_id))


@app.post("/admin/v1/tokens")
def issue_token() -> Response[str]:
    request = parse_request(TokenRequest, body_of(app))
    token, session = bootstrap.container().access.issue_token(**request.model_dump())
    issued = TokenIssuedResponse(
        token=token,
        token_id=token_id_of(token_hash(token)),
        session_id=session.session_id,
        expires_at=session.expires_at,
    )
    return json_response(issued.model_dump(), 201)


@app.get("/admin/v1/tokens")
def list_tokens() -> Response[str]:
    tokens = bootstrap.container().access.list_tokens()
    return json_response(TokenListResponse(tokens=tokens).model_dump())


@app.post("/admin/v1/tokens/<token_id>/revoke")
def revoke_token(token_id: str) -> Response[str]:
    if not re.fullmatch(TOKEN_ID_PATTERN, token_id):
        raise InvalidRequest("token_id: must be a token id (tok_ and 32 hex digits)", field="token_id")
    revoked = bootstrap.container().access.revoke_token(token_id)
    return json_response(TokenRevokedResponse(token_id=revoked.token_id, revoked=True).model_dump())


# --- listings (operators and the console) --------------------------------------------------------------


@app.get("/admin/v1/sources")
def list_sources() -> Response[str]:
    return json_response(bootstrap.container().admin.list_sources().model_dump())


@app.get("/admin/v1/sources/<source>/documents")
def list_documents(source: str) -> Response[str]:
    return json_response(bootstrap.container().admin.list_documents(_key(source)).model_dump())


@app.get("/admin/v1/agents")
def list_agents() -> Response[str]:
    return json_response(bootstrap.container().admin.list_agents().model_dump())


@app.get("/admin/v1/workspaces")
def list_workspaces() -> Response[str]:
    return json_response(bootstrap.container().admin.list_workspaces().model_dump())


@app.get("/admin/v1/ledgers/<root_id>")
def ledger(root_id: str) -> Response[str]:
    if not re.fullmatch(INVOCATION_ID_PATTERN, root_id):
        raise InvalidRequest("root_id: must be an invocation id", field="root_id")
    return json_response(bootstrap.container().admin.ledger(root_id).model_dump())


@app.post("/admin/v1/runs/<run_id>/end")
def end_run(run_id: str) -> Response[str]:
    request = parse_request(RunEndRequest, body_of(app))
    bootstrap.container().admin.end_run(run_id, request.state)
    return json_response(RunEndResponse(run_id=run_id, state=request.state).model_dump())


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True, log_event=False
)
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
