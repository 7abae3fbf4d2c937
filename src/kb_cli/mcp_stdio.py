"""`kb mcp`: the knowledge tools over MCP stdio, for local MCP clients (M-MCP).

Remote: a running service over HTTP through `knowledge_client` (endpoint + bearer token + route).
Embedded: the embedded default in this process, on the state directory `kb serve` uses."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_core.domain.errors import KnowledgeError
from knowledge_core.domain.wire import ReadRequest, SearchRequest
from knowledge_core.mcp_server import KnowledgeDoor

from knowledge_client import ApiError, KnowledgeClient, KnowledgeClientError

from .local_env import LocalRanking, VectorFill
from .models import ModelError


class RemoteError(KnowledgeError):
    """A typed refusal the service answered over HTTP, carried as is to the MCP client."""

    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


@dataclass
class ClientDoor:
    """The knowledge API of a running service, for one token on one route."""

    client: KnowledgeClient

    @property
    def route(self) -> str:
        return self.client.route

    def _call(self, action: Any, body: dict | None) -> dict:
        try:
            return self.client.api(action, body)
        except ApiError as exc:
            message = str(exc).split(": ", 2)[-1] if exc.code else "the service refused the request"
            raise RemoteError(exc.code or "internal_error", exc.status or 500, message) from None
        except KnowledgeClientError as exc:
            raise RemoteError(
                exc.code or "knowledge_unavailable", 503, "knowledge service unreachable"
            ) from None

    def capabilities(self) -> dict:
        return self._call("capabilities", None)

    def search(self, request: SearchRequest) -> dict:
        return self._call("search", request.model_dump(exclude_none=True))

    def read(self, request: ReadRequest) -> dict:
        return self._call("read", request.model_dump(exclude_none=True))


def embedded_door(
    state: Path, route: str, token: str | None, seed_demo: bool, ranking: LocalRanking | None = None
) -> tuple[KnowledgeDoor, VectorFill | None]:
    """The core services in this process, on the state `kb serve --state` keeps, ranked with the models and
    lexicon `kb serve` would use (one line on stderr says which). With a token, its principal; without one,
    the local operator of the state directory (trusted, as with `kb serve`) as the demo user. `seed_demo`
    seeds the demo workspace only when `route` is the demo's (the default) and it is not there yet: serving
    a route of one's own never writes the demo into that state (one started with `kb serve --no-demo`). The
    seed stores text only (seconds), so every call answers at once; passages waiting for their vectors are
    returned as a `VectorFill` to start once the server runs (BM25 answers until they are in)."""
    from knowledge_core.domain.models import Principal
    from knowledge_core.mcp_server import ServiceDoor

    from . import demo
    from .local_env import local_container

    ranking = ranking or LocalRanking.resolve()
    container = local_container(state, ranking=ranking)
    if seed_demo and route == demo.ROUTE:
        if note := demo.seeding_note(container, embedded=ranking.model_dir is not None):
            print(f"kb mcp --embedded: {note}, while answering", file=sys.stderr, flush=True)
        demo.seed_if_absent(container, vectors_later=True)
    filling = container.backend.vectors_pending()
    print(f"kb mcp --embedded: {ranking.banner(filling=filling)}", file=sys.stderr, flush=True)
    if token is not None:
        principal = container.access.authenticate(f"Bearer {token}")
    else:
        principal = Principal(
            client_id="kb-mcp",
            session_id=str(uuid.uuid4()),
            subject=str(demo.PRINCIPAL["subject"]),
            tenant=str(demo.PRINCIPAL["tenant"]),
            routes=[route],
        )
    door: KnowledgeDoor = ServiceDoor(container.knowledge, principal, route)
    fill = VectorFill(container, say=lambda line: print(f"kb mcp --embedded: {line}", file=sys.stderr))
    return door, fill if filling else None


def run_stdio(door: KnowledgeDoor, started: Callable[[], object] | None = None) -> None:
    """Serve `door` over stdio; `started` runs once the transport holds stdout (a background fill may then
    write to fd 1 without breaking the JSON-RPC stream)."""
    import anyio
    from knowledge_core.mcp_server import build_server
    from mcp.server.stdio import stdio_server

    server = build_server(door)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            if started is not None:
                started()
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """While the server is set up, anything written to fd 1 (a handler's log line) goes to stderr: stdout
    is the JSON-RPC stream. (Once running, the SDK's stdio transport diverts fd 1 itself.)"""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_mcp(args: argparse.Namespace) -> int:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    route = args.route or os.environ.get("KB_ROUTE")
    if args.embedded:
        token = args.token or os.environ.get("KB_TOKEN") or None
        try:
            with _stdout_to_stderr():
                ranking = LocalRanking.resolve(args.embedding_model, args.query_translation)
                door, filling = embedded_door(
                    Path(args.state), route or "demo", token, not args.no_demo, ranking
                )
        except KnowledgeError as exc:
            raise SystemExit(f"kb mcp: {exc.code}: {exc.message}") from None
        except ModelError as exc:
            raise SystemExit(f"kb mcp: {exc}") from None
    else:
        token = args.token or os.environ.get("KB_TOKEN")
        if not token:
            raise SystemExit("kb mcp: --token (or KB_TOKEN) is required unless --embedded")
        if not route:
            raise SystemExit("kb mcp: --route (or KB_ROUTE) is required unless --embedded")
        door, filling = ClientDoor(KnowledgeClient(args.endpoint, route, token)), None
    run_stdio(door, None if filling is None else filling.start)
    return 0


def add_arguments(p: argparse.ArgumentParser, default_endpoint: str, default_state: str) -> None:
    p.add_argument("--endpoint", default=default_endpoint, help="service base URL (env KB_ENDPOINT)")
    p.add_argument("--token", help="bearer token (env KB_TOKEN)")
    p.add_argument("--route", help="workspace route (env KB_ROUTE; --embedded: default demo)")
    p.add_argument("--embedded", action="store_true", help="serve the embedded default in this process")
    p.add_argument("--state", default=default_state, help="--embedded: state directory")
    p.add_argument(
        "--no-demo",
        action="store_true",
        help="--embedded: do not seed the demo workspace (seeded only for route demo, when it is not there)",
    )
    p.add_argument(
        "--embedding-model",
        default="auto",
        help="--embedded: as kb serve's (a model directory, 'none' for BM25, or 'auto', the default)",
    )
    p.add_argument(
        "--query-translation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--embedded: as kb serve's (default: on when the lexicon is there)",
    )
