"""Wire models of the turn endpoint (A-TURN, SPEC §2.2): the strict request, its idempotency hash, and
the `bailing.agent-turn.v1` response with the optional `knowledge_delivery` echo."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from .models import Model
from .wire import PROTOCOL, NonBlank, RunId, SearchStatus, StrictRequest, WireModel

TURN_SCHEMA = "bailing.agent-turn.v1"
DELIVERY_SCHEMA = "bailing.agent-knowledge-delivery.v1"
TURN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
MESSAGE_MAX_CHARS = 32768

DeliveryMode = Literal["inline", "on_demand"]


class TurnRequest(StrictRequest):
    """`knowledge_delivery` absent = inline (legacy hosts); `"on_demand"` for hosts that negotiated it.
    `"inline"` (advertised in capabilities `delivery_modes`) is accepted as the explicit spelling."""

    turn_id: Annotated[str, StringConstraints(pattern=TURN_ID_PATTERN)]
    message: Annotated[str, Field(max_length=MESSAGE_MAX_CHARS), NonBlank]
    run_id: RunId = None
    knowledge_delivery: DeliveryMode | None = None

    @property
    def mode(self) -> DeliveryMode:
        return self.knowledge_delivery or "inline"

    def request_hash(self) -> str:
        """SHA-256 of the canonical JSON of the whole request, the delivery mode included (absent and
        `"inline"` mean the same request, so they hash alike)."""
        doc = {
            "turn_id": self.turn_id,
            "message": self.message,
            "run_id": self.run_id,
            "knowledge_delivery": self.mode,
        }
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class KnowledgeItem(Model):
    ref: str
    title: str
    content: str
    revision: str


class TurnContext(Model):
    instructions: str
    knowledge: list[KnowledgeItem]
    knowledge_refs: list[str]
    # Memory and tool schemas are separate from knowledge delivery and never depend on the mode.
    memory: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    knowledge_status: SearchStatus = "ok"


class KnowledgeDelivery(Model):
    schema_version: str = DELIVERY_SCHEMA
    mode: Literal["on_demand"] = "on_demand"
    protocol: str = PROTOCOL
    knowledge_scope_revision: str
    status: SearchStatus
    hints: list[dict[str, Any]] = []


class TurnResponse(WireModel):
    schema_: Annotated[str, Field(alias="schema")] = TURN_SCHEMA
    turn_id: str
    run_id: str
    run_state: Literal["context_ready"] = "context_ready"
    context: TurnContext
    knowledge_delivery: KnowledgeDelivery | None = None

    def wire(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        if data["knowledge_delivery"] is None:
            del data["knowledge_delivery"]
        return data
