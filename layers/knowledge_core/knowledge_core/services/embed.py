"""The `embed` function's work (SPEC §0): the one place that turns text into vectors for every door and the
ingestion worker. It answers the wire of domain/embed_wire with the models of this process (the
container's `models`, loaded on first use and kept for the instance's life)."""

from __future__ import annotations

import logging
from typing import Any

from ..domain.embed_wire import (
    DescribeRequest,
    Description,
    EmbedError,
    ErrorAnswer,
    InvalidEmbedRequest,
    PassagesAnswer,
    PassagesRequest,
    QueryAnswer,
    WireVector,
    parse_embed_request,
)
from ..ports import Embedder

logger = logging.getLogger(__name__)


class EmbedService:
    """`models`: the models this instance runs (None: none configured, or unusable: `why` says which)."""

    def __init__(self, models: Embedder | None, why: str | None = None) -> None:
        self._models = models
        self._why = why

    def answer(self, event: Any) -> dict[str, Any]:
        """One request's answer (a Lambda result): the description, a query's vectors, or a batch's; a
        refused or failed request as `{"error": …}`."""
        try:
            request = parse_embed_request(event)
        except InvalidEmbedRequest as exc:
            return _error("invalid_request", str(exc))
        models = self._models
        if models is None:
            logger.warning("embed: no usable model: %s", self._why or "none configured")
            return _error("model_unavailable", "no embedding model is configured or usable here")
        if isinstance(request, DescribeRequest):
            return describe(models).model_dump()
        if isinstance(request, PassagesRequest) and request.models is not None:
            unknown = [m for m in request.models if m not in models.models]
            if unknown:
                return _error("invalid_request", f"models: not a model of this function: {unknown[0]}")
        try:
            if isinstance(request, PassagesRequest):
                rows = models.embed_passages(request.texts, request.models)
                return PassagesAnswer(vectors=[[WireVector.of(v) for v in row] for row in rows]).model_dump()
            vector = models.embed_query(request.text)
            pair = models.embed_across(request.text) if request.across else None
        except Exception as exc:  # a model that fails to load or run: the reason is logged, not returned
            logger.warning("embed: model failed (%s): %s", type(exc).__name__, _reason(exc))
            return _error("model_unavailable", "the embedding models failed on this request")
        return QueryAnswer(
            vector=WireVector.of(vector) if vector is not None else None,
            across=(WireVector.of(pair[0]), WireVector.of(pair[1])) if pair is not None else None,
        ).model_dump()


def describe(models: Embedder) -> Description:
    """What a client needs to route texts without running a model: the models a passage of each script
    gets (`models_for` depends on the script alone), their dimensions, whether a multilingual model is in."""
    return Description(
        models=list(models.models),
        model_id=models.model_id,
        dimensions={m: models.dimensions(m) for m in models.models},
        cjk=list(models.models_for("中")),
        latin=list(models.models_for("a")),
        across=_has_across(models),
    )


def _has_across(models: Embedder) -> bool:
    """Whether a multilingual model answers `embed_across` (OnnxEmbedder says so; another is asked)."""
    known = getattr(models, "has_across", None)
    return bool(known) if known is not None else models.embed_across("a") is not None


def _reason(exc: Exception) -> str:
    from ..adapters.embedding import ModelError

    return str(exc) if isinstance(exc, ModelError) else "-"


def _error(code: str, message: str) -> dict[str, Any]:
    return ErrorAnswer(error=EmbedError.model_validate({"code": code, "message": message})).model_dump()
