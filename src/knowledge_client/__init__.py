"""Host-side client of bailing.agent-knowledge.v1: negotiate, start turns, and give a model the
`search_knowledge` / `read_knowledge` tools (OpenAI and Anthropic formats)."""

from .client import (
    ApiError,
    Capabilities,
    KnowledgeClient,
    KnowledgeClientError,
    NegotiationError,
    NoActiveTurn,
    ProtocolError,
    StaleResponse,
    Turn,
)
from .tools import READ_TOOL, SEARCH_TOOL, tool_definitions
from .transport import HttpResponse, Transport, TransportError, UrllibTransport

__all__ = [
    "READ_TOOL",
    "SEARCH_TOOL",
    "ApiError",
    "Capabilities",
    "HttpResponse",
    "KnowledgeClient",
    "KnowledgeClientError",
    "NegotiationError",
    "NoActiveTurn",
    "ProtocolError",
    "StaleResponse",
    "Transport",
    "TransportError",
    "Turn",
    "UrllibTransport",
    "tool_definitions",
]
