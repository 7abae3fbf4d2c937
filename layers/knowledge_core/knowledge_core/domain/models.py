"""Domain models: knowledge sources, agents (with knowledgeRouting, R-CFG), workspaces, documents,
principals and runs. Definitions use the camelCase of the definition files; pure pydantic, no I/O."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal
from urllib.parse import quote

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from .filters import ContextFilterField, FilterInvalid, MetadataValue, validate_metadata

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,31}$"
ROUTE_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
DOC_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
MAX_BODY_BYTES = 5 * 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Ident = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Version = Annotated[str, StringConstraints(pattern=VERSION_PATTERN)]


def _whole_number(value: Any) -> Any:
    """JSON Schema's `integer` is any number with a zero fractional part (2020-12 §6.1.1): `2.0` is the
    integer 2 to a client (and to schemathesis), and a strict int would refuse it. Booleans stay refused."""
    return int(value) if type(value) is float and value.is_integer() else value


WHOLE_NUMBER = BeforeValidator(_whole_number)
"""After an int's constraints (`Annotated[int, Field(ge=1), WHOLE_NUMBER]`, so its JSON Schema keeps
`minimum`/`maximum`): a request integer is `2` or `2.0`, never `2.5`, `"2"` or `true`."""


class Model(BaseModel):
    """The base of the core's pydantic models: each builds its validator and serializer on first use, so a
    function builds only the models it uses, and none at import (a Lambda cold start pays for every one)."""

    model_config = ConfigDict(defer_build=True)


class Strict(Model):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


def source_key(id_: str, version: str) -> str:
    return f"{id_}@{version}"


def split_key(key: str) -> tuple[str, str]:
    id_, sep, version = key.partition("@")
    if not sep or not re.match(ID_PATTERN, id_) or not re.match(VERSION_PATTERN, version):
        raise ValueError(f"not an exact id@version key: {key!r}")
    return id_, version


class KnowledgeRef(Strict):
    """An exact `{id, version}` pointer to a knowledge source."""

    id: Ident
    version: Version

    @property
    def key(self) -> str:
        return source_key(self.id, self.version)


# --- knowledge sources --------------------------------------------------------------------------


class SourceDefinition(Strict):
    """The immutable part of a knowledge source version."""

    id: Ident
    version: Version
    description: Annotated[str, StringConstraints(max_length=2000)] = ""
    tags: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=64)]], Field(max_length=16)
    ] = []
    top_k: Annotated[int, Field(ge=1, le=10, alias="topK"), WHOLE_NUMBER] = 5
    min_score: Annotated[float, Field(ge=0, alias="minScore")] = 0.0

    @field_validator("min_score", mode="before")
    @classmethod
    def _int_score(cls, value: Any) -> Any:
        # JSON has one number type: 0 is as much a score as 0.0.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @property
    def key(self) -> str:
        return source_key(self.id, self.version)


class SourceState(Model):
    """The mutable switches of a published source."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["active", "revoked"] = "active"
    enabled: bool = True
    lease_until: str | None = None  # ISO-8601 UTC; None = no lease required


class Source(Model):
    definition: SourceDefinition
    state: SourceState = Field(default_factory=SourceState)

    @property
    def key(self) -> str:
        return self.definition.key


# --- agents and knowledgeRouting (R-CFG) ---------------------------------------------------------


RoutingMode = Literal["EAGER", "AUTO", "ON_DEMAND"]
TOOL_MODES = ("AUTO", "ON_DEMAND")


# `_has_condition` in JSON Schema, so a client (and schemathesis) sees that a rule without one is invalid.
_HAS_CONDITION: dict[str, Any] = {
    "anyOf": [
        {"required": ["queryTerms"], "properties": {"queryTerms": {"minItems": 1}}},
        {"required": ["tags"], "properties": {"tags": {"minItems": 1}}},
        {"required": ["contextEquals"], "properties": {"contextEquals": {"minProperties": 1}}},
        {"required": ["always"], "properties": {"always": {"const": True}}},
    ]
}


def _distinct_terms_schema(schema: dict[str, Any]) -> None:
    """`_distinct_terms` as far as JSON Schema can say it (uniqueness is case-sensitive there)."""
    schema["uniqueItems"] = True
    schema["items"]["pattern"] = r"\S"


class RoutingRule(Strict):
    model_config = Strict.model_config | ConfigDict(json_schema_extra=_HAS_CONDITION)

    knowledge: KnowledgeRef
    query_terms: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=64)]],
        Field(max_length=16, alias="queryTerms", json_schema_extra=_distinct_terms_schema),
    ] = []
    tags: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=64)]], Field(max_length=16)
    ] = []
    context_equals: Annotated[dict[str, str], Field(max_length=16, alias="contextEquals")] = {}
    always: bool = False
    priority: Annotated[int, Field(ge=0, le=100), WHOLE_NUMBER] = 0

    @field_validator("query_terms")
    @classmethod
    def _distinct_terms(cls, value: list[str]) -> list[str]:
        lowered = [v.lower() for v in value]
        if len(set(lowered)) != len(lowered):
            raise ValueError("queryTerms must be distinct (case-insensitive)")
        if any(not v.strip() for v in value):
            raise ValueError("queryTerms must not be blank")  # a blank term would match almost any query
        return value

    @model_validator(mode="after")
    def _has_condition(self) -> RoutingRule:
        if not (self.query_terms or self.tags or self.context_equals or self.always):
            raise ValueError("a rule needs at least one of queryTerms, tags, contextEquals, always")
        return self


class SourceFilter(Strict):
    """R-CFG's `sourceFilters` entry (SPEC §3.1): the §8 filter the server applies to every retrieval of
    `knowledge` for this agent; a value `{"context": key}` is filled from the runtime's trusted context."""

    knowledge: KnowledgeRef
    filter: ContextFilterField


class KnowledgeRouting(Strict):
    mode: RoutingMode | None = None
    max_sources: Annotated[int, Field(ge=1, le=16, alias="maxSources"), WHOLE_NUMBER] = 4
    top_k: Annotated[int, Field(ge=1, le=50, alias="topK"), WHOLE_NUMBER] = 8
    max_retrievals: Annotated[int, Field(ge=1, le=64, alias="maxRetrievals"), WHOLE_NUMBER] = 8
    max_queries_per_source: Annotated[int, Field(ge=1, le=16, alias="maxQueriesPerSource"), WHOLE_NUMBER] = 3
    source_timeout_seconds: Annotated[int, Field(ge=1, le=60, alias="sourceTimeoutSeconds"), WHOLE_NUMBER] = (
        15
    )
    source_max_chars: Annotated[int, Field(ge=1, le=65536, alias="sourceMaxChars"), WHOLE_NUMBER] = 16000
    max_context_chars: Annotated[int, Field(ge=1, le=65536, alias="maxContextChars"), WHOLE_NUMBER] = 16000
    failure_policy: Annotated[Literal["FAIL_FAST", "SKIP_TRANSIENT"], Field(alias="failurePolicy")] = (
        "FAIL_FAST"
    )
    rerank: Literal["NONE", "LEXICAL"] = "NONE"
    rules: Annotated[list[RoutingRule], Field(max_length=64)] = []
    source_filters: Annotated[list[SourceFilter], Field(max_length=64, alias="sourceFilters")] = []

    @model_serializer(mode="wrap")
    def _without_empty_source_filters(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An agent without sourceFilters dumps as before they existed: its knowledge_scope_revision (a
        digest of this dump) and its listings stay what they were."""
        dumped: dict[str, Any] = handler(self)
        for name in ("sourceFilters", "source_filters"):
            if dumped.get(name) == []:
                del dumped[name]
        return dumped

    @field_validator("source_filters")
    @classmethod
    def _one_filter_per_source(cls, filters: list[SourceFilter]) -> list[SourceFilter]:
        keys = [f.knowledge.key for f in filters]
        if len(set(keys)) != len(keys):
            raise ValueError("each knowledge source may have at most one sourceFilter (combine with andAll)")
        return filters

    @field_validator("rules")
    @classmethod
    def _unique_rule_keys(cls, rules: list[RoutingRule]) -> list[RoutingRule]:
        keys = [r.knowledge.key for r in rules]
        if len(set(keys)) != len(keys):
            raise ValueError("each knowledge source may have at most one rule")
        return rules


@cache
def _default_routing() -> KnowledgeRouting:
    """An agent without knowledgeRouting's routing (frozen: shared safely)."""
    return KnowledgeRouting()


class ModelCandidate(Model):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True, populate_by_name=True)

    model: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    tool_calling: Annotated[bool | None, Field(alias="toolCalling")] = None


class ModelProfile(Strict):
    candidates: Annotated[list[ModelCandidate], Field(min_length=1, max_length=16)]


class AgentDefinition(Strict):
    id: Ident
    version: Version
    system_prompt: Annotated[str, Field(alias="systemPrompt", max_length=65536)] = ""
    model_profile: Annotated[ModelProfile, Field(alias="modelProfile")]
    allowed_knowledge: Annotated[list[KnowledgeRef], Field(alias="allowedKnowledge", max_length=64)] = []
    knowledge_routing: Annotated[KnowledgeRouting | None, Field(alias="knowledgeRouting")] = None

    @field_validator("knowledge_routing")
    @classmethod
    def _source_filters_allowed(cls, routing: KnowledgeRouting | None, info: ValidationInfo) -> Any:
        """A sourceFilter's knowledge must be in allowedKnowledge (named by its path, as a filter's error)."""
        allowed = {k.key for k in info.data.get("allowed_knowledge", [])}
        for i, entry in enumerate(routing.source_filters if routing else []):
            if entry.knowledge.key not in allowed:
                reason = f"{entry.knowledge.key} is not in allowedKnowledge"
                raise FilterInvalid(f".sourceFilters[{i}].knowledge", reason).pydantic()
        return routing

    @property
    def key(self) -> str:
        return source_key(self.id, self.version)

    @property
    def allowed_keys(self) -> list[str]:
        return [k.key for k in self.allowed_knowledge]

    @property
    def routing(self) -> KnowledgeRouting:
        return self.knowledge_routing or _default_routing()

    @model_validator(mode="after")
    def _precheck(self) -> AgentDefinition:
        """The publish-time compatibility precheck of R-CFG."""
        keys = self.allowed_keys
        if len(set(keys)) != len(keys):
            raise ValueError("allowedKnowledge has duplicate sources")
        routing = self.knowledge_routing
        if routing is None:
            return self
        for rule in routing.rules:
            if rule.knowledge.key not in keys:
                raise ValueError(f"rule knowledge {rule.knowledge.key} is not in allowedKnowledge")
        if routing.mode in TOOL_MODES:
            for candidate in self.model_profile.candidates:
                if candidate.tool_calling is not True:
                    raise ValueError(
                        f"mode {routing.mode} needs toolCalling: true on every model candidate "
                        f"({candidate.model} declares {candidate.tool_calling})"
                    )
        return self


class Workspace(Model):
    route: Annotated[str, StringConstraints(pattern=ROUTE_PATTERN)]
    agent: str  # exact id@version


# --- documents --------------------------------------------------------------------------------


TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
Tenant = Annotated[str, StringConstraints(pattern=TENANT_PATTERN)]


class DocumentAcl(Model):
    """Who may see a document: its tenant (and the tenants it is explicitly shared with), then, within
    them, the named subjects/groups; empty subjects and groups = the whole tenant (SPEC §1).

    A document always names its tenant. `tenant=None` exists only to read documents stored before that
    rule: they are visible to no one until `kb tenant migrate` assigns one (never "every tenant")."""

    model_config = ConfigDict(extra="forbid")

    tenant: str | None = None
    shared_tenants: Annotated[list[Tenant], Field(max_length=64)] = []
    subjects: list[str] = []
    groups: list[str] = []

    @property
    def tenants(self) -> list[str]:
        """Every tenant that may see the document, its own first; empty for an unmigrated document."""
        return [self.tenant, *(t for t in self.shared_tenants if t != self.tenant)] if self.tenant else []

    def visible_to(self, viewer: Viewer) -> bool:
        if viewer.tenant not in self.tenants:
            return False
        if not self.subjects and not self.groups:
            return True
        return viewer.subject in self.subjects or bool(set(self.groups) & set(viewer.groups))


DocStatus = Literal["ready", "processing", "disabled", "deleted"]


def _metadata(metadata: dict[str, Any] | None) -> dict[str, MetadataValue] | None:
    """§8's limits on a document's metadata; the error names the key (`metadata.region`)."""
    if not metadata:
        return None  # {} is no metadata: stored equal to none (the unchanged rule, §1)
    try:
        return validate_metadata(metadata)
    except FilterInvalid as exc:
        raise exc.pydantic() from None


Metadata = Annotated[dict[str, Any] | None, AfterValidator(_metadata)]
"""A document's optional metadata (SPEC §8): ≤ 32 keys, each a string ≤ 256 chars, a finite number, a
boolean or a list of ≤ 32 strings."""


def document_revision(title: str, body: str) -> str:
    return "sha256:" + hashlib.sha256((title + "\n\0" + body).encode("utf-8")).hexdigest()


class Document(Model):
    source_key: str
    doc_id: Annotated[str, StringConstraints(pattern=DOC_ID_PATTERN)]
    title: Annotated[str, StringConstraints(max_length=4096)]
    body: str
    structured_source: dict[str, Any] | None = None
    acl: DocumentAcl = Field(default_factory=DocumentAcl)
    status: DocStatus = "ready"
    metadata: Metadata = None

    @field_validator("structured_source")
    @classmethod
    def _uri_without_controls(cls, source: dict[str, Any] | None) -> dict[str, Any] | None:
        """I1: a `uri` reaches agents, logs and terminals: its control characters (C0, DEL, C1) are
        percent-encoded on the way in (and on the way out of a store written before this rule)."""
        uri = source.get("uri") if source else None
        if source is None or not isinstance(uri, str) or not _CONTROL.search(uri):
            return source
        return {**source, "uri": _CONTROL.sub(lambda m: quote(m.group(), safe=""), uri)}

    @field_validator("body")
    @classmethod
    def _body_size(cls, body: str) -> str:
        if len(body.encode("utf-8")) > MAX_BODY_BYTES:
            raise ValueError("body exceeds 5 MiB")
        return body

    @property
    def revision(self) -> str:
        return document_revision(self.title, self.body)

    @property
    def version(self) -> str:
        """`stored_version` of this document (what a ref binds beside the revision)."""
        return stored_version(self.revision, self.acl, self.structured_source, self.metadata)

    @property
    def record_version(self) -> str:
        """`record_version` of this document: its stored version before its metadata is folded in."""
        return record_version(self.revision, self.acl, self.structured_source)


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def record_version(revision: str, acl: DocumentAcl, structured_source: dict[str, Any] | None) -> str:
    """A digest of a document's revision, ACL and structured source: its stored version without metadata
    (what a search index row may keep beside the metadata it also holds; `with_metadata` completes it)."""
    return _digest({"r": revision, "a": acl.model_dump(mode="json"), "s": structured_source})


def with_metadata(record: str, metadata: Mapping[str, Any] | None) -> str:
    """`record` (a `record_version`) with the document's metadata folded in; unchanged without metadata,
    so a document that has none keeps the version (and its refs) it had before metadata was bound."""
    return _digest({"v": record, "m": dict(metadata)}) if metadata else record


def stored_version(
    revision: str,
    acl: DocumentAcl,
    structured_source: dict[str, Any] | None,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """A digest of what is stored about a document beyond its revision (SPEC §1: any change of what is
    stored is an update — its ACL, structured source and metadata as well as its title and body): refs bind
    it, so an old ref answers 409 after any such change, never the newer state under the old ref."""
    return with_metadata(record_version(revision, acl, structured_source), metadata)


@dataclass(frozen=True)
class DocumentState:
    """What the live check of a hit needs of its stored document (no body): its source, status, ACL,
    revision and metadata, read for every hit of a retrieval in one batch (K-PIPE)."""

    source_key: str
    doc_id: str
    status: str
    acl: DocumentAcl
    revision: str
    structured_source: dict[str, Any] | None = None
    metadata: Mapping[str, Any] | None = None

    @property
    def version(self) -> str:
        return stored_version(self.revision, self.acl, self.structured_source, self.metadata)


def citable(doc: Document | DocumentState | None, source_key: str, revision: str, viewer: Viewer) -> bool:
    """A document may still be quoted under a hit or ref: it exists in that very source, is ready, the
    viewer may see it, and it is the revision the hit or ref was made from (never a newer body)."""
    return (
        doc is not None
        and doc.source_key == source_key
        and doc.status == "ready"
        and doc.acl.visible_to(viewer)
        and doc.revision == revision
    )


# --- identity and runs -------------------------------------------------------------------------


class Viewer(Model):
    """Whose eyes a retrieval is for: the end user when an agent acts on behalf of one."""

    tenant: str
    subject: str
    groups: list[str] = []


class Principal(Model):
    """What the authorizer established about the caller of the public API."""

    client_id: str
    session_id: str
    subject: str
    on_behalf_of: str | None = None
    tenant: str
    routes: list[str]
    groups: list[str] = []

    @property
    def viewer(self) -> Viewer:
        return Viewer(tenant=self.tenant, subject=self.on_behalf_of or self.subject, groups=self.groups)


class Session(Principal):
    expires_at: int  # epoch seconds
    revoked: bool = False


def token_id_of(token_hash: str) -> str:
    """The public handle of a token for listing and revoking: derived from its SHA-256, never the hash
    itself (which is the lookup key of the bearer token)."""
    return "tok_" + hashlib.sha256(b"bailing.token-id\0" + token_hash.encode("ascii")).hexdigest()[:32]


class TokenSummary(Model):
    """What an administrator sees of an issued token: who and what it is for, never the token or its hash."""

    token_id: str
    client_id: str
    session_id: str
    subject: str
    on_behalf_of: str | None = None
    tenant: str
    routes: list[str]
    expires_at: int
    revoked: bool = False

    @classmethod
    def of(cls, token_id: str, session: Session) -> TokenSummary:
        return cls(token_id=token_id, **session.model_dump(exclude={"groups"}))


RunState = Literal["preparing", "context_ready", "completed", "failed", "cancelled"]


class Run(Model):
    run_id: str
    session_id: str
    client_id: str
    route: str
    state: RunState
    turn_id: str | None = None
    tenant: str | None = None  # None only on runs stored before tenants were compared: nobody's run


def owns_run(run: Run, principal: Principal, route: str) -> bool:
    """A run belongs to the tenant, session and client that created it, on the route it was created on; a
    run stored before runs carried a tenant is nobody's."""
    return run.tenant is not None and (run.tenant, run.session_id, run.client_id, run.route) == (
        principal.tenant,
        principal.session_id,
        principal.client_id,
        route,
    )
