"""What a new user of the `kb` CLI and of `kb serve` meets first: flags, routes, tokens and error bodies
that say what went wrong and what to do (unit tests on embedded state; no network)."""

from __future__ import annotations

import argparse
import json
import time

import pytest

from kb_cli.main import build_parser, parse


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _parsers(sub)
    return found


def test_g_local_no_kb_parser_accepts_an_abbreviated_flag():
    """G-LOCAL: every parser and sub-parser of `kb` takes flags only as spelled (`--rout` is refused)."""
    parsers = _parsers(build_parser())
    assert len(parsers) > 30
    assert [p.prog for p in parsers if p.allow_abbrev] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--rout", "demo", "query"],
        ["search", "--ruote", "demo", "query"],
        ["token", "issue", "--rout", "demo"],
    ],
)
def test_g_local_a_misspelled_flag_is_named_as_unrecognized(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("--"))
    assert f"unrecognized arguments: {flag}" in err
    assert "did you mean --route?" in err


def test_g_local_kb_models_refuses_an_abbreviated_flag(capsys):
    from kb_cli import models

    with pytest.raises(SystemExit):
        models.main(["fetch", "--lex"])
    assert "unrecognized arguments: --lex" in capsys.readouterr().err


def test_a_search_kb_search_json_with_no_hint_carries_the_reasons(capsys):
    """A-SEARCH: `kb search --json` with an empty answer carries the reasons the plain output prints
    (here: the route points at no agent), next to the search API's own fields."""
    answer = {"status": "ok", "hints": [], "truncated": False}

    def call(endpoint, method, path, body=None, headers=None):
        return {"workspaces": []} if path == "/admin/v1/workspaces" else answer

    plain = build_parser().parse_args(["search", "--route", "plant", "--token", "t", "pump"])
    assert plain.func(plain, call) == 0
    printed = [line.strip("- ").strip() for line in capsys.readouterr().out.splitlines()[1:]]
    as_json = build_parser().parse_args(["search", "--route", "plant", "--token", "t", "--json", "pump"])
    assert as_json.func(as_json, call) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {**answer, "no_hints": printed}
    assert "plant" in out["no_hints"][0]


def test_a_search_an_unknown_route_is_named_in_the_404(demo_container):
    """A-SEARCH: a search of a route no workspace has is a 404 `not_found` that names the route and says
    where the routes are listed."""
    from knowledge_core.domain.errors import NotFound
    from knowledge_core.domain.models import Principal
    from knowledge_core.domain.wire import SearchRequest

    principal = Principal(client_id="c", session_id="s", subject="u", tenant="default", routes=["compnay"])
    with pytest.raises(NotFound) as refused:
        demo_container.knowledge.search(principal, "compnay", SearchRequest(query="pump"))
    assert refused.value.status == 404 and refused.value.field == "route"
    assert refused.value.body()["error"]["code"] == "not_found"
    message = refused.value.body()["error"]["message"]
    assert "'compnay'" in message and "kb workspace list" in message


def _admin(workspaces: list[str], issued: list[dict]):
    def call(endpoint, method, path, body=None, headers=None):
        if path == "/admin/v1/workspaces":
            return {"workspaces": [{"route": r, "agent": "a@1"} for r in workspaces]}
        issued.append(body)
        return {"token": "kbt_new"}

    return call


def test_r_admin_kb_token_issue_refuses_a_route_no_workspace_has(capsys):
    """R-ADMIN: `kb token issue --route compnay` issues nothing and says which routes there are, unless
    --route-set-later says the workspace comes later."""
    issued: list[dict] = []
    args = build_parser().parse_args(["token", "issue", "--route", "compnay"])
    with pytest.raises(SystemExit) as refused:
        args.func(args, _admin(["company", "demo"], issued))
    assert "--route 'compnay' is not a workspace route" in str(refused.value.code)
    assert "company, demo" in str(refused.value.code) and issued == []
    args = build_parser().parse_args(["token", "issue", "--route", "demo"])
    assert args.func(args, _admin(["company", "demo"], issued)) == 0
    args = build_parser().parse_args(["token", "issue", "--route", "later", "--route-set-later"])
    assert args.func(args, _admin(["demo"], issued)) == 0
    assert [b["routes"] for b in issued] == [["demo"], ["later"]]
    assert capsys.readouterr().out.split() == ["kbt_new", "kbt_new"]


@pytest.mark.parametrize(
    ("ttl", "said"), [("1", "at least 60 seconds"), ("9999999", "at most 2592000 seconds")]
)
def test_r_admin_kb_token_issue_names_the_ttl_flag_when_it_refuses_it(ttl, said):
    """R-ADMIN: a --ttl out of the API's bounds is refused before any call, in the CLI's words."""
    issued: list[dict] = []
    args = build_parser().parse_args(["token", "issue", "--route", "demo", "--ttl", ttl])
    with pytest.raises(SystemExit) as refused:
        args.func(args, _admin(["demo"], issued))
    assert refused.value.code == f"kb token issue: --ttl: must be {said}"
    assert issued == []


def test_a_search_an_expired_token_is_told_apart_from_an_unknown_or_revoked_one(container, clock):
    """A-SEARCH: authenticating a token past its expiry raises `TokenExpired` (a 401 `unauthorized` whose
    message says `token_expired`); an unknown or a revoked one stays the plain 401."""
    from knowledge_core.domain.errors import TokenExpired, Unauthorized

    expiring, _ = container.access.issue_token(
        routes=["demo"], client_id="c", subject="u", tenant="default", ttl_seconds=60
    )
    revoked, _ = container.access.issue_token(
        routes=["demo"], client_id="c", subject="u", tenant="default", ttl_seconds=600
    )
    container.access.revoke_token(container.access.list_tokens()[-1].token_id)
    clock.advance(60)
    with pytest.raises(TokenExpired) as expired:
        container.access.authenticate(f"Bearer {expiring}")
    assert expired.value.status == 401
    assert expired.value.body() == {
        "error": {
            "code": "unauthorized",
            "message": "token_expired: the bearer token has expired; issue a new one",
        }
    }
    for token in (revoked, "kbt_unknown"):
        with pytest.raises(Unauthorized) as refused:
            container.access.authenticate(f"Bearer {token}")
        assert not isinstance(refused.value, TokenExpired)
        assert "token_expired" not in refused.value.message


def test_a_read_a_page_below_the_minimum_size_is_refused_with_why_and_the_minimum_is_advertised(
    demo_container,
):
    """A-READ, A-CAP: `max_bytes` below 4096 is a 400 naming the field, its bound and why (the minimum page
    size), in the service's words; capabilities advertise that minimum as `extensions.read.min_bytes`."""
    from knowledge_core.domain.errors import InvalidRequest
    from knowledge_core.domain.models import Principal
    from knowledge_core.domain.wire import ReadRequest, parse_request

    with pytest.raises(InvalidRequest) as refused:
        parse_request(ReadRequest, json.dumps({"ref": "r", "max_bytes": 1024}))
    assert refused.value.field == "max_bytes"
    assert refused.value.message.startswith("max_bytes: must be at least 4096: the minimum page size")
    assert "Input should" not in refused.value.message
    principal = Principal(client_id="c", session_id="s", subject="u", tenant="default", routes=["demo"])
    wire = demo_container.knowledge.capabilities(principal, "demo").wire()
    assert wire["extensions"]["read"] == {"min_bytes": 4096}
    parse_request(ReadRequest, json.dumps({"ref": "r", "max_bytes": wire["extensions"]["read"]["min_bytes"]}))


class _Crashing:
    """A function runner whose authorizer lets every request through and whose functions all crash."""

    def __init__(self) -> None:
        from kb_cli.gateway import Handlers

        self.functions = Handlers().functions

    def resolve(self, name: str):
        return next(fn for fn in self.functions.values() if name in (fn.logical_id, fn.short_name))

    def invoke(self, name: str, event):
        from kb_cli.gateway import FunctionError

        if self.resolve(name).short_name == "authorizer":
            return {"isAuthorized": True, "context": {}}
        raise FunctionError("Runtime.ExitError", "the function's process exited at /tmp/secret.py")


def test_g_local_a_crashed_function_answers_the_typed_500_body():
    """G-LOCAL: under `kb serve`, a function whose worker crashed answers the service's typed error body
    (`internal_error`, no-store), never a bare message, and nothing of what failed."""
    from kb_cli.gateway import LocalGateway

    status, headers, raw = LocalGateway(_Crashing()).http(
        "POST",
        "/agent-api/v1/workspaces/demo/knowledge/search",
        "",
        {"authorization": "Bearer kbt_x", "content-type": "application/json"},
        b'{"query": "pump"}',
        "127.0.0.1",
    )
    assert status == 500
    assert headers["Content-Type"] == "application/json" and headers["Cache-Control"] == "no-store"
    assert json.loads(raw) == {"error": {"code": "internal_error", "message": "internal error"}}


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_m_mcp_a_post_that_is_not_json_gets_a_typed_json_rpc_415(content_type):
    """M-MCP: `POST /mcp` with curl's default form content type (or none) is answered 415 with a JSON-RPC
    error whose message and typed `data` say the content type must be application/json."""
    from knowledge_core.mcp_server import serve_http

    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    if content_type:
        headers["content-type"] = content_type
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    answer = serve_http(_McpDoor(), method="POST", path="/mcp", query="", headers=headers, body=body)
    assert answer.status == 415 and answer.headers["content-type"] == "application/json"
    error = json.loads(answer.body)["error"]
    assert error["code"] == -32600 and "application/json" in error["message"]
    assert error["data"] == {"code": "invalid_request", "message": "content-type: must be application/json"}
    headers["content-type"] = "application/json; charset=utf-8"
    answer = serve_http(_McpDoor(), method="POST", path="/mcp", query="", headers=headers, body=body)
    assert answer.status == 200 and "result" in json.loads(answer.body)


class _McpDoor:
    route = "demo"

    def capabilities(self) -> dict:
        return {}

    def search(self, request) -> dict:
        return {"hints": []}

    def read(self, request) -> dict:
        return {"content": ""}


class _Service:
    """The admin and search APIs as `kb search` calls them: counts the tokens it issues; a revoked one is
    a 401."""

    def __init__(self) -> None:
        self.issued: list[dict] = []
        self.revoked: set[str] = set()
        self.expires_in = 3600

    def __call__(self, endpoint, method, path, body=None, headers=None):
        from kb_cli.http import ApiError

        if path == "/admin/v1/tokens":
            self.issued.append(body)
            token = f"kbt_{len(self.issued)}"
            return {
                "token": token,
                "token_id": "tok",
                "session_id": "s",
                "expires_at": time.time() + self.expires_in,
            }
        if headers["Authorization"].removeprefix("Bearer ") in self.revoked:
            raise ApiError(
                401, {"error": {"code": "unauthorized", "message": "missing or invalid bearer token"}}
            )
        return {"status": "ok", "hints": [{"title": "t", "score": 1.0, "summary": "s"}]}


def _kb_search(service: _Service, state, route: str = "demo") -> None:
    args = build_parser().parse_args(["search", "--route", route, "--state", str(state), "pump"])
    assert args.func(args, service) == 0


def test_g_local_kb_search_reuses_one_kept_token_per_route(tmp_path, monkeypatch, capsys):
    """G-LOCAL: `kb search` issues one token per route and reuses it (kept 0600 in the state directory)
    until it expires or is revoked, rather than one per search."""
    monkeypatch.delenv("KB_TOKEN", raising=False)
    service, state = _Service(), tmp_path / "state"
    for _ in range(3):
        _kb_search(service, state)
    assert len(service.issued) == 1 and service.issued[0]["routes"] == ["demo"]
    assert (state / "cli-tokens.json").stat().st_mode & 0o777 == 0o600
    _kb_search(service, state, route="plant")
    _kb_search(service, state)
    assert [b["routes"] for b in service.issued] == [["demo"], ["plant"]]
    service.revoked.add("kbt_1")  # revoked: the search is retried once with a new token, kept in turn
    _kb_search(service, state)
    _kb_search(service, state)
    assert [b["routes"] for b in service.issued] == [["demo"], ["plant"], ["demo"]]
    service.expires_in = 10  # one that is about to expire is replaced before it is sent
    _kb_search(service, state, route="lab")
    _kb_search(service, state, route="lab")
    assert [b["routes"] for b in service.issued][3:] == [["lab"], ["lab"]]


def test_g_local_kb_invoke_without_an_endpoint_uses_the_kb_serve_on_the_default_port(monkeypatch, capsys):
    """G-LOCAL: `kb invoke` with no --endpoint and no KB_ENDPOINT sends the event to the kb serve that
    answers on the default port (the user's own state), and says so."""
    from kb_cli.commands import invoke

    monkeypatch.delenv("KB_ENDPOINT", raising=False)
    probed: list[str] = []
    monkeypatch.setattr(invoke, "listening", lambda endpoint: probed.append(endpoint) or True)
    sent: list[tuple] = []
    args = build_parser().parse_args(["invoke", "search", "-e", "events/search/search.json"])
    assert args.func(args, lambda *a, **k: sent.append(a[:3]) or {"statusCode": 200}) == 0
    assert probed == ["http://127.0.0.1:3000"]
    assert sent == [("http://127.0.0.1:3000", "POST", "/2015-03-31/functions/search/invocations")]
    assert "sending to the kb serve at http://127.0.0.1:3000" in capsys.readouterr().err


class _SlowWorkStarted(Exception):
    pass


@pytest.mark.parametrize("flag", [[], ["--in-process"]])
def test_g_local_kb_invoke_says_it_runs_on_a_fresh_state_before_any_slow_work(flag, monkeypatch, capsys):
    """G-LOCAL: with no kb serve answering (or --in-process), `kb invoke` says before it builds anything that
    it runs in-process on a fresh state holding only the demo, and how to point it at a server."""
    from kb_cli.commands import invoke

    monkeypatch.delenv("KB_ENDPOINT", raising=False)
    monkeypatch.setattr(invoke, "listening", lambda endpoint: pytest.fail("probed") if flag else False)

    def slow(*args, **kwargs):
        said.append(capsys.readouterr().err)
        raise _SlowWorkStarted

    said: list[str] = []
    monkeypatch.setattr(invoke, "local_container", slow)
    args = build_parser().parse_args(["invoke", "search", "-e", "events/search/search.json", *flag])
    with pytest.raises(_SlowWorkStarted):
        args.func(args, lambda *a, **k: pytest.fail("sent"))
    assert "in-process on a fresh embedded state that holds only the demo workspace" in said[0]
    assert "--endpoint URL (or KB_ENDPOINT)" in said[0] and "kb serve" in said[0]


def test_g_local_nothing_listening_means_no_kb_serve():
    from kb_cli.commands.invoke import listening

    assert listening("http://127.0.0.1:9") is False  # unit tests refuse every connection
