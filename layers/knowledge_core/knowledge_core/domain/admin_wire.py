"""Wire models of the admin API (IAM-authenticated; loopback-only under `kb serve`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .filters import KEY_PATTERN, MAX_KEYS, MAX_LIST, MAX_STRING
from .models import (
    DOC_ID_PATTERN,
    ROUTE_PATTERN,
    WHOLE_NUMBER,
    DocumentAcl,
    Metadata,
    Model,
    Tenant,
    TokenSummary,
)
from .wire import RankingExtension, StrictRequest, WireModel

Route = Annotated[str, StringConstraints(pattern=ROUTE_PATTERN)]

# SPEC §8's metadata rule as JSON Schema states it, so a client (and schemathesis) sees which keys and values
# are valid; `Metadata` (the Document's rule) checks the same on the way in.
_METADATA_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "maxProperties": MAX_KEYS,
            "propertyNames": {"pattern": KEY_PATTERN},
            "additionalProperties": {
                "anyOf": [
                    {"type": "string", "maxLength": MAX_STRING},
                    {"type": "number"},
                    {"type": "boolean"},
                    {
                        "type": "array",
                        "maxItems": MAX_LIST,
                        "items": {"type": "string", "maxLength": MAX_STRING},
                    },
                ]
            },
            "description": "Document metadata (SPEC §8): filterable attributes, like Amazon Bedrock's "
            "metadataAttributes",
        },
        {"type": "null"},
    ]
}
WireMetadata = Annotated[Metadata, WithJsonSchema(_METADATA_SCHEMA)]

# The magic numbers of files a text route must not store as a body.
_BINARY_MAGIC = {b"%PDF-": "a PDF file", b"PK\x03\x04": "a ZIP/DOCX file", b"\xd0\xcf\x11\xe0": "an OLE file"}


def not_text(body: str) -> str | None:
    """Why a document body is a file's bytes rather than text (NUL bytes, a PDF/ZIP magic number), or
    None: such a body must go through an ingestion job, which extracts it."""
    if "\x00" in body:
        return "it contains NUL bytes"
    head = body[:8].lstrip("\ufeff").encode("utf-8", "replace")
    return next((f"it is {what}" for magic, what in _BINARY_MAGIC.items() if head.startswith(magic)), None)


def _text_body(body: str) -> str:
    reason = not_text(body)
    if reason is not None:
        raise PydanticCustomError(
            "not_text",
            "not text ({reason}): send the file as an ingestion job (filename + content_base64)",
            {"reason": reason},
        )
    return body


# The schema states the NUL rule (a pattern); the magic numbers are in its description (a file's first bytes).
TextBody = Annotated[
    str,
    AfterValidator(_text_body),
    Field(
        json_schema_extra={
            "pattern": "^[^\\u0000]*$",
            "description": "UTF-8 text: no NUL character, and not a file's bytes (a PDF, ZIP/DOCX or OLE "
            "file's magic number); send files as an ingestion job (filename + content_base64)",
        }
    ),
]


class TokenRequest(StrictRequest):
    routes: Annotated[list[Route], Field(min_length=1, max_length=32)]
    client_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] = "cli"
    session_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    subject: Annotated[str, StringConstraints(min_length=1, max_length=256)] = "user"
    on_behalf_of: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    tenant: Tenant = "default"
    groups: Annotated[list[str], Field(max_length=64)] = Field(default_factory=list)
    ttl_seconds: Annotated[int, Field(ge=60, le=30 * 86400), WHOLE_NUMBER] = 3600


class DocumentAclRequest(StrictRequest):
    """A document's ACL as an administrator sends it: the tenant is required (SPEC §1, S3); sharing with
    other tenants is the explicit `shared_tenants` list."""

    tenant: Tenant
    shared_tenants: Annotated[list[Tenant], Field(max_length=64)] = Field(default_factory=list)
    subjects: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=256)]], Field(max_length=256)
    ] = Field(default_factory=list)
    groups: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=256)]], Field(max_length=256)
    ] = Field(default_factory=list)

    def to_acl(self) -> DocumentAcl:
        return DocumentAcl.model_validate(self.model_dump())


class DocumentRequest(StrictRequest):
    title: Annotated[str, StringConstraints(max_length=4096)]
    body: TextBody
    structured_source: dict[str, Any] | None = None
    acl: DocumentAclRequest
    status: Literal["ready", "processing", "disabled"] = "ready"
    metadata: WireMetadata = None  # SPEC §8: filterable attributes


class BulkDocument(DocumentRequest):
    doc_id: Annotated[str, StringConstraints(pattern=DOC_ID_PATTERN)]


class BulkDocumentsRequest(StrictRequest):
    documents: Annotated[list[BulkDocument], Field(min_length=1, max_length=500)]


class WorkspaceRequest(StrictRequest):
    agent: Annotated[str, StringConstraints(min_length=3, max_length=200)]


class RunEndRequest(StrictRequest):
    state: Literal["completed", "cancelled", "failed"]


class TenantMigrationRequest(StrictRequest):
    """Assign a tenant to the documents of a source stored without one; `apply: false` only lists them."""

    tenant: Tenant
    apply: bool = False


TOKEN_ID_PATTERN = r"^tok_[0-9a-f]{32}$"
TokenId = Annotated[str, StringConstraints(pattern=TOKEN_ID_PATTERN)]


# --- responses (the admin function builds each from these; openapi.json is generated from them) ---------


class PublishResponse(Model):
    created: bool


class PreparedResponse(Model):
    prepared: bool


class SearchIndexSummary(Model):
    """How one full-text index is stored: segments over its primary shards, what a compaction leaves."""

    index: str
    shards: int
    segments: int
    target_segments: int
    size_bytes: int
    fragmented: bool  # the compaction rule says merge (an ingestion job's end starts it)
    merging: bool  # a merge runs now, or a compaction is pending


class SearchIndicesResponse(Model):
    indices: list[SearchIndexSummary]  # none for a backend that keeps no index an operator can act on
    ranking: RankingExtension = RankingExtension()  # how searches rank now (capabilities' extension)


class CompactionResponse(Model):
    started: bool  # a merge was started (in the background: `GET /admin/v1/search-indices` shows it end)
    indices: list[SearchIndexSummary]  # as they were when it started


class WorkspaceResponse(Model):
    route: str
    agent: str


class SourceSwitchResponse(Model):
    source: str
    enabled: bool


class DocumentRevision(Model):
    doc_id: str
    revision: str


class DocumentResponse(DocumentRevision):
    source: str


class DocumentsResponse(Model):
    source: str
    documents: list[DocumentRevision]


class DocumentDeletedResponse(Model):
    source: str
    doc_id: str
    deleted: bool


class DocumentStatusResponse(Model):
    source: str
    doc_id: str
    status: Literal["ready", "disabled"]


class TenantMigrationResponse(Model):
    source: str
    tenant: str
    applied: bool
    documents: list[str]


class TokenIssuedResponse(Model):
    token: str
    token_id: str
    session_id: str
    expires_at: int


class TokenListResponse(Model):
    tokens: list[TokenSummary]


class TokenRevokedResponse(Model):
    token_id: str
    revoked: bool


class RunEndResponse(Model):
    run_id: str
    state: Literal["completed", "cancelled", "failed"]


# --- listings (operators and the console) --------------------------------------------------------------


class SourceSummary(Model):
    key: str
    id: str
    version: str
    description: str
    tags: list[str]
    top_k: int
    min_score: float
    status: str
    enabled: bool
    lease_until: str | None
    searchable: bool  # active and enabled (a lease is checked when a source is selected)


class SourceListResponse(Model):
    sources: list[SourceSummary]


class DocumentSummary(Model):
    doc_id: str
    title: str
    revision: str
    status: str
    chars: int
    updated_at: str  # ISO-8601 UTC
    tenant: str | None = None  # its own tenant (None: stored before documents named one)
    metadata: dict[str, Any] = Field(default_factory=dict)  # SPEC §8 attributes ({} = none)


class DocumentListResponse(Model):
    source: str
    documents: list[DocumentSummary]
    truncated: bool  # more documents than listed


class ModelCheck(Model):
    """R-CFG's publish precheck for one model candidate: a tool mode needs `toolCalling: true`."""

    model: str
    tool_calling: bool | None
    compatible: bool


class AgentSummary(Model):
    key: str
    definition: dict[str, Any]  # as published (definition-file spelling)
    mode: str | None
    tool_mode: bool
    models: list[ModelCheck]
    routes: list[str]  # workspace routes pointing at this version


class AgentListResponse(Model):
    agents: list[AgentSummary]


class WorkspaceSummary(Model):
    route: str
    agent: str


class WorkspaceListResponse(Model):
    workspaces: list[WorkspaceSummary]


class LedgerEntryView(Model):
    invocation_id: str
    agent: str
    parent: str | None
    max_retrievals: int
    retrievals: int
    retrievals_remaining: int
    max_queries_per_source: int
    per_source: dict[str, int]
    max_context_chars: int
    chars: int
    chars_remaining: int


class LedgerResponse(Model):
    root_id: str
    entries: list[LedgerEntryView]


# --- ingestion jobs (I-INGEST) ---------------------------------------------------------------------------

MAX_JOB_DOCUMENTS = 500
DocIdPrefix = Annotated[str, StringConstraints(pattern=r"^(|[A-Za-z0-9][A-Za-z0-9._:-]{0,99})$")]


class JobDocumentRequest(StrictRequest):
    """A document of a job: text (`body`, as the bulk documents route takes it) or a file to extract
    (`filename` + `content_base64`: PDF, HTML, DOCX, Markdown, text). A file's `doc_id` may be left out:
    it is then the id its filename gives, under the job's `doc_id_prefix`, as `kb ingest` names a file
    (`阀门检修.pdf` -> `FaMenJianXiu-…`), so every door gives one file one id."""

    doc_id: Annotated[str, StringConstraints(pattern=DOC_ID_PATTERN)] | None = None
    title: Annotated[str, StringConstraints(max_length=4096)] | None = None
    body: TextBody | None = None
    filename: Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^/\\]+$")] | None = (
        None
    )
    content_base64: str | None = None
    structured_source: dict[str, Any] | None = None
    acl: DocumentAclRequest
    status: Literal["ready", "processing", "disabled"] = "ready"
    metadata: WireMetadata = None  # SPEC §8; a file's sidecar is combined by `kb ingest`
    # False: a stored document of this doc_id that came from another file (its `structured_source.uri`
    # names another file, or none) is kept, and this one fails `doc_id_taken` (`kb ingest FILE` without
    # `--replace`); the same file again is an update either way.
    replace: bool = True

    @model_validator(mode="after")
    def _one_content(self) -> JobDocumentRequest:
        if (self.body is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of body or content_base64")
        if self.content_base64 is not None and self.filename is None:
            raise ValueError("filename: required with content_base64")
        if self.doc_id is None and self.filename is None:
            raise ValueError("doc_id: required with body (a file's may be left out)")
        if self.body is not None and self.title is None:
            raise ValueError("title: required with body")
        return self


# `_one_origin` below, in JSON Schema: a client (or schemathesis) sees which bodies are valid.
_ONE_ORIGIN: dict[str, Any] = {
    "oneOf": [
        {
            "title": "documents",
            "required": ["documents"],
            "properties": {
                "documents": {"type": "array"},
                "directory": {"type": "null"},
                "sync": {"const": False},
                "acl": {"type": "null"},
                "metadata": {"type": "null"},
            },
        },
        {
            "title": "directory",
            "required": ["directory", "acl"],
            "properties": {
                "directory": {"type": "string"},
                "documents": {"type": "null"},
                "acl": {"type": "object"},
            },
        },
    ]
}


class IngestionJobRequest(StrictRequest):
    """Inline documents, a directory the service reads, or an S3 prefix (`s3_uri`, `s3://bucket/prefix/`)
    it lists and reads; with `sync`, a directory or prefix is mirrored under `doc_id_prefix`. With
    `documents`, `doc_id_prefix` names the files sent without a `doc_id` (their filenames' ids under it)."""

    model_config = StrictRequest.model_config | ConfigDict(json_schema_extra=_ONE_ORIGIN)

    documents: (
        Annotated[list[JobDocumentRequest], Field(min_length=1, max_length=MAX_JOB_DOCUMENTS)] | None
    ) = None
    directory: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = None
    s3_uri: Annotated[str, StringConstraints(min_length=6, max_length=1100, pattern=r"^s3://")] | None = None
    doc_id_prefix: DocIdPrefix = ""
    sync: bool = False
    acl: DocumentAclRequest | None = None  # a directory's documents' ACL (SPEC §1: the tenant is required)
    # A directory's or prefix's documents' metadata, combined with each file's sidecar (this wins per key).
    metadata: WireMetadata = None

    @property
    def origin_field(self) -> str:
        return "documents" if self.documents is not None else "s3_uri" if self.s3_uri else "directory"

    @model_validator(mode="after")
    def _one_origin(self) -> IngestionJobRequest:
        if sum(x is not None for x in (self.documents, self.directory, self.s3_uri)) != 1:
            raise ValueError("give exactly one of documents, directory or s3_uri")
        if self.documents is not None and (self.sync or self.acl or self.metadata):
            raise ValueError("sync, acl and metadata apply to a directory or s3_uri only")
        if self.documents is not None and self.doc_id_prefix and all(d.doc_id for d in self.documents):
            raise ValueError(
                "doc_id_prefix: names the files sent without a doc_id, and every document has one"
            )
        if self.documents is None and self.acl is None:
            raise ValueError(f"acl: required with {self.origin_field} (the documents' tenant)")
        return self


class JobAccepted(WireModel):
    job_id: str
    source: str
    state: str
    total: int


class JobDocumentError(Model):
    doc_id: str
    code: str
    uri: str | None = None  # where it came from: `s3://bucket/key`, a path inside the directory


class JobCounts(Model):
    queued: int
    done: int
    unchanged: int
    failed: int
    deleted: int


class JobStatus(WireModel):
    job_id: str
    source: str
    state: str
    total: int
    counts: JobCounts
    passages: int
    errors: list[JobDocumentError]
    errors_truncated: bool
    sync: bool
    cancel_requested: bool = False  # asked to stop: it does after the batch it is on (state `cancelled`)
    created_at: str
    started_at: str | None
    updated_at: str | None
    finished_at: str | None


class JobList(WireModel):
    source: str
    jobs: list[JobStatus]


class JobMessage(StrictRequest):
    """The ingestion queue's message: the job to work on."""

    job_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
