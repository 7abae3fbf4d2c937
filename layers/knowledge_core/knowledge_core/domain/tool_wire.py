"""Wire models of the `agent_tools` function (SPEC §3.6): the invocation envelope the agent runtime sends,
the strict model arguments of `knowledge_search` / `startup`, and the result and error shapes.

The runtime fills `invocation` (identity, chain, deadline, trusted context); the model fills only
`arguments`, which accept exactly `query` and optional `sources` — anything else is PROTOCOL_ERROR."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .budget import INVOCATION_ID_PATTERN, MAX_CHAIN_DEPTH
from .errors import ProtocolError, ToolError
from .models import Model, split_key
from .wire import NonBlank, WireModel

QUERY_MAX_CHARS = 2000

InvocationId = Annotated[str, Field(pattern=INVOCATION_ID_PATTERN)]
Name = Annotated[str, Field(min_length=1, max_length=256)]


class _Strict(Model):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _exact_key(value: str) -> str:
    try:
        split_key(value)
    except ValueError:
        raise ValueError("must be an exact id@version key") from None
    return value


ExactKey = Annotated[str, AfterValidator(_exact_key)]


class Ancestor(_Strict):
    invocation_id: InvocationId
    agent: ExactKey


class Invocation(_Strict):
    tenant: Name
    app: Name
    subject: Name
    agent: ExactKey
    invocation_id: InvocationId
    ancestors: Annotated[list[Ancestor], Field(max_length=MAX_CHAIN_DEPTH - 1)] = []
    deadline: str | None = None
    trusted_context: Annotated[dict[str, str], Field(max_length=64)] = {}
    groups: Annotated[list[Name], Field(max_length=64)] = []

    @field_validator("deadline")
    @classmethod
    def _iso(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError("must be an ISO-8601 timestamp") from None
            if parsed.tzinfo is None:
                raise ValueError("must carry a time zone (e.g. Z)")
        return value

    @model_validator(mode="after")
    def _distinct_chain(self) -> Invocation:
        ids = [a.invocation_id for a in self.ancestors] + [self.invocation_id]
        if len(set(ids)) != len(ids):
            raise ValueError("ancestors: an invocation appears twice in the chain")
        return self

    @property
    def deadline_epoch(self) -> float | None:
        if self.deadline is None:
            return None
        return datetime.fromisoformat(self.deadline.replace("Z", "+00:00")).timestamp()

    @property
    def root_id(self) -> str:
        return self.ancestors[0].invocation_id if self.ancestors else self.invocation_id


class SearchArguments(_Strict):
    """The model's arguments: exactly `query` and optional `sources` (exact keys, checked by the router)."""

    query: Annotated[str, Field(max_length=QUERY_MAX_CHARS), NonBlank]
    sources: (
        Annotated[list[Annotated[str, Field(max_length=200)]], Field(min_length=1, max_length=16)] | None
    ) = None


class StartupArguments(_Strict):
    query: Annotated[str, Field(max_length=QUERY_MAX_CHARS), NonBlank]


class _Envelope(_Strict):
    operation: Literal["knowledge_search", "startup"]
    invocation: Invocation
    arguments: dict[str, Any]


class ToolEnvelope(Model):
    model_config = ConfigDict(frozen=True)

    operation: Literal["knowledge_search", "startup"]
    invocation: Invocation
    arguments: SearchArguments | StartupArguments


def _protocol_error(exc: ValidationError, prefix: str) -> ProtocolError:
    error = exc.errors()[0]
    field = ".".join([prefix, *(str(p) for p in error.get("loc", ()))]).strip(".") or "event"
    reason = "unknown field" if error.get("type") == "extra_forbidden" else str(error.get("msg", "invalid"))
    return ProtocolError(f"{field}: {reason}", field=field)


def parse_envelope(event: Any) -> ToolEnvelope:
    """The envelope, or ProtocolError naming the first offending field (never echoing its value)."""
    if not isinstance(event, dict):
        raise ProtocolError("event: must be a JSON object")
    try:
        outer = _Envelope.model_validate(event)
    except ValidationError as exc:
        raise _protocol_error(exc, "") from None
    model = StartupArguments if outer.operation == "startup" else SearchArguments
    try:
        arguments = model.model_validate(outer.arguments)
    except ValidationError as exc:
        raise _protocol_error(exc, "arguments") from None
    return ToolEnvelope(operation=outer.operation, invocation=outer.invocation, arguments=arguments)


class KnowledgeId(Model):
    id: str
    version: str


class _Camel(Model):
    """Wire models of the tool's result: camelCase on the wire (the seed's), snake_case in code."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)


class ReferenceSource(_Camel):
    """Where a cited passage comes from: its document (and the document's structured source)."""

    title: str
    doc_id: str = Field(alias="docId")
    revision: str
    structured: dict[str, Any] | None = None


class Reference(_Camel):
    """One cited passage: untrusted tool data for the model's next step."""

    citation_id: str = Field(alias="citationId")
    knowledge: KnowledgeId
    content: str
    source: ReferenceSource | None = None
    fusion_score: float = Field(alias="fusionScore")
    score: float


# --- events (R-EVENT): every call returns and logs them, in order ------------------------------------------
class _Event(_Camel):
    at: str  # ISO-8601 UTC, milliseconds
    invocation_id: str = Field(alias="invocationId")


class PlannedSourceRef(_Camel):
    knowledge: str  # id@version
    reason: Literal["rule", "always", "match", "explicit", "eager", "legacy"]


class KnowledgePlanned(_Event):
    type: Literal["knowledge.planned"] = "knowledge.planned"
    sources: list[PlannedSourceRef]


class KnowledgeRetrieved(_Event):
    """One per source request: `status` is OK, EMPTY or the source's error code."""

    type: Literal["knowledge.retrieved"] = "knowledge.retrieved"
    retrieval_id: str = Field(alias="retrievalId")
    knowledge: str
    status: str
    count: int
    ms: float


class KnowledgeFused(_Event):
    """This invocation's own ledger after the call."""

    type: Literal["knowledge.fused"] = "knowledge.fused"
    count: int
    rerank: str
    retrievals_used: int = Field(alias="retrievalsUsed")
    retrievals_remaining: int = Field(alias="retrievalsRemaining")
    chars_used: int = Field(alias="charsUsed")
    chars_remaining: int = Field(alias="charsRemaining")


class CitationCreated(_Event):
    type: Literal["citation.created"] = "citation.created"
    citation_id: str = Field(alias="citationId")
    retrieval_id: str = Field(alias="retrievalId")
    knowledge_version: str = Field(alias="knowledgeVersion")
    fusion_score: float = Field(alias="fusionScore")


ToolEvent = Annotated[
    KnowledgePlanned | KnowledgeRetrieved | KnowledgeFused | CitationCreated, Field(discriminator="type")
]


def event_wire(event: ToolEvent) -> dict[str, Any]:
    """An event as the runtime receives (and the logs record) it: camelCase, `type` first."""
    body = event.model_dump(by_alias=True)
    return {"type": body.pop("type"), **body}


class ToolFailure(Model):
    code: str
    message: str


class ToolResult(WireModel):
    """What one tool call returns to the agent runtime: references or a typed error, and its events."""

    references: list[Reference] = Field(default_factory=list)
    error: ToolFailure | None = None
    events: list[ToolEvent] = Field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        events = [event_wire(e) for e in self.events]
        if self.error is not None:
            return {"error": self.error.model_dump(), "events": events}
        return {
            "references": [r.model_dump(by_alias=True, exclude_none=True) for r in self.references],
            "events": events,
        }


def success(references: list[Reference], events: list[ToolEvent]) -> ToolResult:
    return ToolResult(references=references, events=events)


def failure(error: ToolError, events: list[ToolEvent]) -> ToolResult:
    return ToolResult(error=ToolFailure(code=error.code, message=error.message), events=events)
