"""The `embed` function's wire (SPEC §0, §3.10): what the other functions and the ingestion worker send it
and what it answers, as a Lambda result (never HTTP).

Requests, told apart by `op`: `describe` (the models, their dimensions and which models embed a text of each
script: the metadata an `Embedder` needs without running a model), `query` (one query: its vector by the
model for its script and, with `across`, the multilingual model's pair) and `passages` (a batch of passage
texts, each embedded by the models `Embedder.models_for` names, limited to `models` when given). Vectors
travel as base64 of their int8 bytes. A refused request answers `{"error": {"code", "message"}}`, the
message naming the field, never the text."""

from __future__ import annotations

import base64
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from ..ports import Vector

MAX_QUERY_CHARS = 32_768  # a query longer than any model's window (cut there by the model anyway)
MAX_PASSAGE_CHARS = 65_536
MAX_BATCH = 256  # passages per request
MAX_BATCH_CHARS = 2_000_000  # under Lambda's 6 MB synchronous payload, base64 vectors back included


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WireVector(_Wire):
    model: str = Field(min_length=1, max_length=120)
    data: str = Field(max_length=16_384)  # base64 of int8 bytes (4,096 dimensions at most)

    @classmethod
    def of(cls, vector: Vector) -> WireVector:
        return cls(model=vector.model, data=base64.b64encode(vector.data).decode("ascii"))

    def vector(self) -> Vector:
        return Vector(self.model, base64.b64decode(self.data))


class DescribeRequest(_Wire):
    op: Literal["describe"]


class QueryRequest(_Wire):
    op: Literal["query"]
    text: str = Field(max_length=MAX_QUERY_CHARS)
    across: bool = False  # also the multilingual model's pair (Embedder.embed_across)


class PassagesRequest(_Wire):
    op: Literal["passages"]
    texts: list[Annotated[str, Field(max_length=MAX_PASSAGE_CHARS)]] = Field(max_length=MAX_BATCH)
    models: list[Annotated[str, Field(min_length=1, max_length=120)]] | None = Field(None, max_length=16)

    @model_validator(mode="after")
    def _bounded(self) -> PassagesRequest:
        if sum(len(t) for t in self.texts) > MAX_BATCH_CHARS:
            raise ValueError(f"texts: more than {MAX_BATCH_CHARS} characters in one request")
        return self


EmbedRequest = Annotated[DescribeRequest | QueryRequest | PassagesRequest, Field(discriminator="op")]
_REQUEST: TypeAdapter[DescribeRequest | QueryRequest | PassagesRequest] = TypeAdapter(EmbedRequest)


class Description(_Wire):
    models: list[str]
    model_id: str
    dimensions: dict[str, int]
    # Which models embed a passage of each script (`Embedder.models_for`: it depends on the script alone).
    cjk: list[str]
    latin: list[str]
    across: bool  # a multilingual model answers `query` with `across`


class QueryAnswer(_Wire):
    vector: WireVector | None = None
    across: tuple[WireVector, WireVector] | None = None


class PassagesAnswer(_Wire):
    vectors: list[list[WireVector]]


class EmbedError(_Wire):
    code: Literal["invalid_request", "model_unavailable"]
    message: str


class ErrorAnswer(_Wire):
    error: EmbedError


class InvalidEmbedRequest(ValueError):
    """A request the wire refuses; the message names the field (never the text)."""


def parse_embed_request(event: object) -> DescribeRequest | QueryRequest | PassagesRequest:
    try:
        return _REQUEST.validate_python(event)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        raise InvalidEmbedRequest(f"{where}: {first['msg']}") from None
