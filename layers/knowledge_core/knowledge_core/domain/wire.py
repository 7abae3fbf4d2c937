"""Wire models of bailing.agent-knowledge.v1 (SPEC §2): strict requests, typed responses, fixed limits."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from .errors import InvalidRequest
from .filters import FILTER_SCHEMA, MAX_CONDITIONS, MAX_DEPTH, OPERATORS, FilterField
from .models import WHOLE_NUMBER, Model

PROTOCOL = "bailing.agent-knowledge.v1"
TRUST = "reference_only"
M = TypeVar("M", bound=BaseModel)


class Limits(BaseModel):
    search_max_results: int = 3
    search_max_bytes: int = 4096
    read_default_bytes: int = 16384
    read_max_bytes: int = 32768
    reference_ttl_seconds: int = 300
    read_chain_max_bytes: int = 131072


LIMITS = Limits()
READ_MIN_BYTES = 4096  # a read page's smallest `max_bytes` (§2.4): advertised as extensions.read.min_bytes


class StrictRequest(Model):
    """Unknown fields and wrong JSON types are errors: a client cannot widen its scope with `kb_ids`."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _run_id(value: str | None) -> str | None:
    if value is not None:
        try:
            if str(uuid.UUID(value)) != value:  # canonical form only: lower-case, hyphenated
                raise ValueError
        except ValueError:
            raise ValueError("must be a run UUID") from None
    return value


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


class _NonBlank:
    """Text that is not empty after trimming (queries, messages); the JSON Schema says so with a pattern."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(_non_blank, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "pattern": r"\S"}


NonBlank = _NonBlank()
RUN_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
RunId = Annotated[str | None, AfterValidator(_run_id), Field(json_schema_extra={"pattern": RUN_ID_PATTERN})]
"""An optional run UUID in canonical form."""


class SearchRequest(StrictRequest):
    query: Annotated[str, Field(max_length=2000), NonBlank]
    limit: Annotated[int, Field(ge=1, le=LIMITS.search_max_results), WHOLE_NUMBER] = LIMITS.search_max_results
    run_id: RunId = None
    filter: FilterField | None = None  # §8: narrows every source's candidates, before ranking


class ReadRequest(StrictRequest):
    ref: Annotated[str, Field(min_length=1, max_length=4096)]
    run_id: RunId = None
    max_bytes: Annotated[int, Field(ge=READ_MIN_BYTES, le=LIMITS.read_max_bytes), WHOLE_NUMBER] = (
        LIMITS.read_default_bytes
    )
    cursor: Annotated[str | None, Field(min_length=1, max_length=4096)] = None


def parse_request(model: type[M], raw: str | bytes | None) -> M:
    """Validate a JSON body; the first problem becomes a 400 that names its field and echoes no input."""
    try:
        return model.model_validate_json(raw or b"")
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "invalid_at_path":  # a filter or metadata: its own exact path (§8)
            # List indexes as the path inside spells them: `sourceFilters[0].filter.andAll[1]`.
            field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
            field += err.get("ctx", {}).get("path", "")
        if err["type"] == "extra_forbidden":
            # An unknown name is the client's own input: echo a bounded prefix, never all of it.
            field = field if len(field) <= 64 else field[:64] + "…"
            raise InvalidRequest(f"{field}: unknown field", field=field) from None
        if err["type"].startswith("json") or err["type"] == "model_type":
            raise InvalidRequest("body: must be a JSON object", field="body") from None
        raise InvalidRequest(f"{field}: {_said(err)}", field=field) from None


# Why a bound is where it is, for the fields whose refusal a client should understand without the spec.
_BOUND_REASONS = {
    ("max_bytes", "greater_than_equal"): f"the minimum page size, {READ_MIN_BYTES} bytes "
    "(capabilities: extensions.read.min_bytes)",
    ("max_bytes", "less_than_equal"): f"the maximum page size, {LIMITS.read_max_bytes} bytes "
    "(capabilities: limits.read_max_bytes)",
}


def _said(err: Any) -> str:
    """A validation problem in the service's words: a number's bound as `must be at least N` (and why,
    where a reason is known); anything else as pydantic states it."""
    bound = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le")}.get(err["type"])
    if bound is None:
        return str(err["msg"])
    words, key = bound
    reason = _BOUND_REASONS.get((str(err["loc"][-1]) if err["loc"] else "", err["type"]))
    return f"must be {words} {err['ctx'][key]}" + (f": {reason}" if reason else "")


class WireModel(Model):
    """A response body: services return it typed, the edge serialises it (`wire()`)."""

    def wire(self) -> dict[str, Any]:
        return to_wire(self)


class Hint(Model):
    ref: str
    title: str
    summary: str
    revision: str
    score: float
    expires_at: str


SearchStatus = Literal["ok", "disabled", "unavailable", "partial"]


class SearchResponse(WireModel):
    schema_: Annotated[str, Field(alias="schema")] = "bailing.agent-knowledge-search.v1"
    route: str
    run_id: str | None = None
    knowledge_scope_revision: str
    trust: str = TRUST
    status: SearchStatus
    hints: list[Hint]
    truncated: bool


class ReadResponse(WireModel):
    schema_: Annotated[str, Field(alias="schema")] = "bailing.agent-knowledge-read.v1"
    route: str
    run_id: str | None = None
    knowledge_scope_revision: str
    ref: str
    revision: str
    title: str
    content: str
    trust: str = TRUST
    next_cursor: str | None
    truncated: bool
    budget_exhausted: bool
    total_content_bytes: int
    read_chain_max_bytes: int = LIMITS.read_chain_max_bytes


class FilterExtension(Model):
    """What a search's `filter` may hold (§8)."""

    schema_: Annotated[str, Field(alias="schema")] = FILTER_SCHEMA
    operators: list[str] = list(OPERATORS)
    max_conditions: int = MAX_CONDITIONS
    max_depth: int = MAX_DEPTH


class ReadExtension(Model):
    """What a read's `max_bytes` may be at least (§2.4): a page is never smaller than this."""

    min_bytes: int = READ_MIN_BYTES


class RankingExtension(Model):
    """How searches rank now: `hybrid` (BM25 and vectors fused) once every passage has its vectors; `bm25`
    without a model, or while stored passages wait for theirs (`vectors`: `filling`, then `ready`)."""

    mode: Literal["bm25", "hybrid"] = "bm25"
    vectors: Literal["none", "filling", "ready"] = "none"


class Extensions(Model):
    """Extensions beyond the seed protocol (§2.1): a host that ignores them keeps working unchanged."""

    filter: FilterExtension = FilterExtension()
    read: ReadExtension = ReadExtension()
    ranking: RankingExtension = RankingExtension()


class CapabilitiesResponse(WireModel):
    schema_: Annotated[str, Field(alias="schema")] = "bailing.agent-knowledge-capabilities.v1"
    protocol: str = PROTOCOL
    supported: bool = True
    route: str
    enabled: bool
    knowledge_scope_revision: str
    delivery_modes: list[str] = ["inline", "on_demand"]
    limits: Limits = LIMITS
    extensions: Extensions = Extensions()


def to_wire(model: BaseModel) -> dict[str, Any]:
    """Response model -> JSON dict: `schema` by alias; `run_id` only when given."""
    data = model.model_dump(mode="json", by_alias=True)
    if "run_id" in data and data["run_id"] is None:
        del data["run_id"]
    return data
