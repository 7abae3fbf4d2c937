"""One retrieval behind every door, through the real transports (SPEC §3.9 K-PIPE, M-MCP): `kb serve` with
the default ranking (hybrid + zh<->en translation where the models and lexicon are fetched), and on the same
state `kb mcp --embedded`; the same question gets the same documents in the same order from the HTTP
search, MCP over Streamable HTTP, MCP over stdio to the server (`kb mcp --endpoint`) and MCP over stdio
embedded — in Chinese, in English and across the two languages."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import KB, ROOT, KbServer, running_kb_serve
from tests.e2e.test_mcp import call, drive, mcp_client

QUESTIONS = [
    "网关离线怎么排查？",  # zh -> zh
    "database failover runbook",  # en -> en
    "how do I verify a webhook signature?",  # en
    "退款政策",  # zh, answered in both languages
    "firmware upgrade failed",  # en -> zh and en documents
]


def _ranking_env() -> dict[str, str]:
    """The default ranking: the test models and, beside them, the compiled lexicon (when fetched)."""
    models = os.environ.get("KB_TEST_EMBEDDING_MODEL_DIR")
    if not models:
        return {}
    env = {"KB_EMBEDDING_MODEL_DIR": models}
    lexicon = Path(models) / "zh-en-lexicon"
    if (lexicon / "lexicon.json").is_file():
        env["KB_LEXICON_DIR"] = str(lexicon)
    return env


@pytest.fixture(scope="module")
def ranked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbServer]:
    with running_kb_serve(tmp_path_factory.mktemp("doors"), env=_ranking_env(), vectors=True) as server:
        yield server


def _titles(body: dict) -> list[str]:
    return [h["title"] for h in body["hints"]]


def _mcp_titles(client: Client) -> list[list[str]]:
    async def session(c: Client) -> list[list[str]]:
        found = []
        for question in QUESTIONS:
            is_error, body = await call(c, "knowledge_search", {"query": question})
            assert not is_error, body
            found.append(_titles(body))
        return found

    return drive(client, session)


def test_k_pipe_http_search_and_every_mcp_transport_agree(ranked_server: KbServer) -> None:
    server = ranked_server
    http = []
    for question in QUESTIONS:
        response = server.request(
            "POST", "/agent-api/v1/workspaces/demo/knowledge/search", {"query": question}, token=server.token
        )
        assert response.status == 200, response.raw
        http.append(_titles(response.json))
    assert all(http), http  # every question has an answer in the demo corpus
    embedded = StdioServerParameters(
        command=KB[0],
        args=[*KB[1:], "mcp", "--embedded", "--state", str(server.state)],
        env={**os.environ, **_ranking_env(), "POWERTOOLS_LOG_LEVEL": "ERROR"},
        cwd=ROOT,
    )
    doors = {
        "mcp http": _mcp_titles(mcp_client(server, "http")),
        "mcp stdio": _mcp_titles(mcp_client(server, "stdio")),
        "mcp stdio --embedded": _mcp_titles(Client(embedded, read_timeout_seconds=60)),
    }
    for door, titles in doors.items():
        assert titles == http, door


HOSTILE = {
    "fdfa": "\ufdfa" * 100,
    "surrogates": "\ud800 gateway \udfff",
    "nul": "gateway\x00offline\x00" * 20,
    "emoji": "\U0001f600" * 100_000,
}


def test_k_rel_hostile_text_is_answered_normally_through_every_door(
    ranked_server: KbServer, tmp_path: Path
) -> None:
    """K-REL / G-LOCAL: text that once overflowed the multilingual engine's buffer (U+FDFA floods), lone
    surrogates, NUL and 100k emoji are ordinary input at every door — HTTP search, turns, the agent tool,
    MCP — each answered by a typed 200 or 400, never a crash; the same text inside a document is ingested
    and the server keeps answering."""
    server = ranked_server
    invoke = "/2015-03-31/functions/AgentToolsFunction/invocations"
    for name, text in HOSTILE.items():
        # Sent as a client would: JSON with ASCII escapes (a lone surrogate is valid JSON, not UTF-8).
        search = server.request(
            "POST",
            "/agent-api/v1/workspaces/demo/knowledge/search",
            token=server.token,
            raw_body=json.dumps({"query": text}).encode(),
        )
        assert search.status in (200, 400), (name, search.raw[:300])
        turn = server.request(
            "POST",
            "/agent-api/v1/workspaces/demo/turns",
            token=server.token,
            raw_body=json.dumps({"turn_id": f"hostile-{name}", "message": text[:8000]}).encode(),
        )
        assert turn.status in (200, 400), (name, turn.raw[:300])
        envelope = {
            "operation": "knowledge_search",
            "arguments": {"query": text[:4000]},
            "invocation": {
                "tenant": "default",
                "app": "a1",
                "subject": "u1",
                "agent": "demo-agent@1.0.0",
                "invocation_id": f"hostile-{name}",
                "ancestors": [],
                "deadline": "2099-01-01T00:00:00Z",
                "trusted_context": {},
            },
        }
        tool = server.request("POST", invoke, raw_body=json.dumps(envelope).encode())
        assert tool.status == 200 and "x-amz-function-error" not in tool.headers, (name, tool.raw[:300])

    async def mcp_session(c: Client) -> list[bool]:
        # The SDK client cannot encode a lone surrogate; the other texts go through it as they are.
        texts = [t for name, t in HOSTILE.items() if name != "surrogates"]
        return [(await call(c, "knowledge_search", {"query": t[:4000]}))[0] in (True, False) for t in texts]

    assert all(drive(mcp_client(server, "http"), mcp_session))
    document = tmp_path / "hostile.md"
    document.write_text("# Hostile note\n\n" + "\ufdfa" * 2000 + "\n\nThe gateway relay needs a reboot.\n")
    done = server.kb("ingest", "--tenant", "default", "--source", "demo-docs@1.0.0", str(document))
    assert done.returncode == 0, done.stderr[-500:]
    answer = server.request(
        "POST",
        "/agent-api/v1/workspaces/demo/knowledge/search",
        {"query": "网关离线怎么排查？"},
        token=server.token,
    )
    assert answer.status == 200 and answer.json["hints"], answer.raw[:300]
