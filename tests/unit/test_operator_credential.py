"""G-LOCAL (SPEC §9): loopback is not an identity. The admin API, the Invoke API and the console's admin
actions of `kb serve` need the local operator credential kept 0600 in `--state`; the kb CLI reads and
sends it; directory jobs read only under the roots the operator named (`kb serve --ingest-root`)."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import Forbidden
from knowledge_core.domain.models import SourceDefinition
from knowledge_core.domain.wire import parse_request

from kb_cli import gateway, main
from kb_cli.http import OPERATOR_HEADER
from kb_cli.local_env import OPERATOR_FILE, LocalRanking, local_settings, operator_credential
from tests.conftest import FakeClock, embedded_container

SECRET = "operator-credential-for-tests"
ENDPOINT = "http://127.0.0.1:3000"


class _Answering:
    """Every function answers a fixed body (the gateway's door is the subject, not the handlers)."""

    def __init__(self) -> None:
        self.functions = gateway.Handlers().functions
        self.events: list[Any] = []

    def resolve(self, name: str) -> Any:
        return next(fn for fn in self.functions.values() if name in (fn.logical_id, fn.short_name))

    def invoke(self, name: str, event: Any) -> Any:
        self.events.append(event)
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": '{"tokens": []}'}


def _admin(gw: gateway.LocalGateway, headers: dict[str, str]) -> tuple[int, dict[str, str], dict]:
    status, out, raw = gw.http("GET", "/admin/v1/tokens", "", headers, b"", "127.0.0.1")
    return status, out, json.loads(raw)


def _assert_typed_401(status: int, headers: dict[str, str], body: dict) -> None:
    assert status == 401 and headers["Cache-Control"] == "no-store"
    assert body["error"]["code"] == "unauthorized" and "X-Kb-Operator" in body["error"]["message"]
    assert SECRET not in json.dumps(body)


@pytest.mark.parametrize("given", [None, "", "wrong-credential", SECRET + "x", SECRET[:-1]])
def test_g_local_admin_api_without_the_operator_credential_is_a_typed_401(given: str | None) -> None:
    """G-LOCAL: a loopback request to the admin API without the operator credential, or with a wrong one,
    is refused 401 with the service's typed body, and no function runs."""
    runner = _Answering()
    gw = gateway.LocalGateway(runner, operator=SECRET)
    headers = {} if given is None else {"x-kb-operator": given}
    _assert_typed_401(*_admin(gw, headers))
    assert runner.events == []


def test_g_local_admin_api_with_the_operator_credential_answers() -> None:
    """G-LOCAL: with the credential the admin API answers as before (loopback and same-site still needed)."""
    gw = gateway.LocalGateway(_Answering(), operator=SECRET)
    status, _, body = _admin(gw, {"x-kb-operator": SECRET})
    assert status == 200 and body == {"tokens": []}
    cross = {"x-kb-operator": SECRET, "origin": "http://evil.example", "host": "127.0.0.1:3000"}
    assert gw.http("GET", "/admin/v1/tokens", "", cross, b"", "127.0.0.1")[0] == 403


def test_g_local_a_gateway_given_no_credential_opens_its_admin_api_to_nobody() -> None:
    """G-LOCAL: a gateway built without a credential keeps a random one: no header value opens it."""
    gw = gateway.LocalGateway(_Answering())
    for given in ("", "None", SECRET):
        assert _admin(gw, {"x-kb-operator": given})[0] == 401


def test_g_local_agent_api_keeps_its_bearer_authorizer_without_the_operator_credential() -> None:
    """G-LOCAL: the agent-facing API is not the operator's door: it needs no operator credential."""

    class _Authorizing(_Answering):
        def invoke(self, name: str, event: Any) -> Any:
            if self.resolve(name).short_name == "authorizer":
                return {"isAuthorized": True, "context": {}}
            return super().invoke(name, event)

    gw = gateway.LocalGateway(_Authorizing(), operator=SECRET)
    status, _, _ = gw.http(
        "POST",
        "/agent-api/v1/workspaces/demo/knowledge/search",
        "",
        {"authorization": "Bearer kbt_x", "content-type": "application/json"},
        b'{"query": "pump"}',
        "127.0.0.1",
    )
    assert status == 200


@pytest.mark.parametrize("given", [None, "wrong-credential"])
def test_g_local_invoke_api_without_the_operator_credential_is_a_typed_401(given: str | None) -> None:
    """G-LOCAL: the Lambda Invoke API of kb serve (which takes any tenant and trusted context) refuses a
    loopback caller without the operator credential, or with a wrong one: 401 typed, nothing invoked."""
    runner = _Answering()
    gw = gateway.LocalGateway(runner, operator=SECRET)
    headers = {} if given is None else {"x-kb-operator": given}
    status, out, raw = gw.invoke_api("SearchFunction", b"{}", headers, "127.0.0.1")
    _assert_typed_401(status, out, json.loads(raw))
    assert runner.events == []


def test_g_local_invoke_api_with_the_operator_credential_invokes() -> None:
    runner = _Answering()
    gw = gateway.LocalGateway(runner, operator=SECRET)
    assert gw.invoke_api("SearchFunction", b"{}", {"x-kb-operator": SECRET}, "127.0.0.1")[0] == 200
    assert len(runner.events) == 1
    assert gw.invoke_api("SearchFunction", b"{}", {"x-kb-operator": SECRET}, "10.1.2.3")[0] == 403


def test_g_local_the_operator_credential_is_created_once_0600_in_a_0700_state(tmp_path: Path) -> None:
    """G-LOCAL: kb serve's operator credential is random, kept 0600 in the 0700 state directory, and the
    same across restarts; one an older kb left wider is narrowed."""
    state = tmp_path / "state"
    first = operator_credential(state)
    path = state / OPERATOR_FILE
    assert len(first) >= 32 and path.read_text().strip() == first
    assert path.stat().st_mode & 0o777 == 0o600 and state.stat().st_mode & 0o777 == 0o700
    path.chmod(0o644)
    assert operator_credential(state) == first and path.stat().st_mode & 0o777 == 0o600
    assert operator_credential(tmp_path / "other") != first


class _Sent:
    """urllib's urlopen as kb serve answers: 401 without the operator credential SECRET, else
    `{"tokens": [], "sources": []}`; the requests are recorded."""

    def __init__(self) -> None:
        self.requests: list[urllib.request.Request] = []

    def __call__(self, request: urllib.request.Request, timeout: float = 0) -> Any:
        self.requests.append(request)
        if request.get_header(OPERATOR_HEADER.capitalize()) != SECRET:
            body = io.BytesIO(b'{"error": {"code": "unauthorized", "message": "operator credential"}}')
            raise urllib.error.HTTPError(request.full_url, 401, "Unauthorized", Message(), body)
        return io.BytesIO(b'{"tokens": [], "sources": []}')


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> _Sent:
    recorder = _Sent()
    monkeypatch.setattr(urllib.request, "urlopen", recorder)
    return recorder


def test_g_local_kb_cli_sends_the_operator_credential_of_its_state(
    sent: _Sent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """G-LOCAL: a kb command on the admin API of a loopback kb serve reads the operator credential from
    --state and sends it; with none there, refused, it says so in one line (exit 1)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / OPERATOR_FILE).write_text(SECRET + "\n")
    assert main.main(["token", "list", "--state", str(state), "--endpoint", ENDPOINT]) == 0
    assert sent.requests[-1].get_header(OPERATOR_HEADER.capitalize()) == SECRET
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)  # the default state, ./.kb-state, holds no credential here
    monkeypatch.setattr("kb_cli.http.DEFAULT_STATE", Path(".kb-state"))
    assert main.main(["token", "list", "--endpoint", ENDPOINT]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no operator credential at .kb-state" in err and "--state" in err


def test_g_local_kb_cli_sends_the_operator_credential_to_no_remote_endpoint(
    sent: _Sent, tmp_path: Path
) -> None:
    """G-LOCAL: the local credential is for a kb serve on this machine: a remote endpoint never gets it."""
    state = tmp_path / "state"
    state.mkdir()
    (state / OPERATOR_FILE).write_text(SECRET)
    assert main.main(["token", "list", "--state", str(state), "--endpoint", "https://kb.example"]) == 1
    assert sent.requests[-1].get_header(OPERATOR_HEADER.capitalize()) is None


def test_g_local_kb_cli_says_in_one_line_when_another_users_credential_is_unreadable(
    sent: _Sent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """G-LOCAL: the credential of a kb serve another user started cannot be read (0600): refused, one line
    says why."""
    state = tmp_path / "state"
    state.mkdir()
    (state / OPERATOR_FILE).write_text(SECRET)
    real_read = Path.read_text

    def denied(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name == OPERATOR_FILE:
            raise PermissionError(13, "Permission denied")
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    assert main.main(["source", "list", "--state", str(state), "--endpoint", ENDPOINT]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the operator credential" in err
    assert "Permission denied" in err and "only the user who started kb serve" in err and SECRET not in err


# --- directory jobs only under the operator's roots -----------------------------------------------------


@pytest.fixture
def rooted(tmp_path: Path) -> tuple[Container, Path]:
    """A container whose directory jobs may read under `tmp_path/allowed` only."""
    allowed = tmp_path / "allowed"
    (allowed / "docs").mkdir(parents=True)
    (allowed / "docs" / "a.md").write_text("# A\nallowed text", encoding="utf-8")
    container = embedded_container(tmp_path, FakeClock(), ingest_directories=True, ingest_roots=str(allowed))
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container, allowed


def _directory_job(directory: Path) -> IngestionJobRequest:
    body = {"directory": str(directory), "acl": {"tenant": "acme"}}
    return parse_request(IngestionJobRequest, json.dumps(body))


def test_g_local_i_ingest_a_directory_outside_the_ingest_roots_is_refused(
    rooted: tuple[Container, Path], tmp_path: Path
) -> None:
    """G-LOCAL, I-INGEST: a directory job naming a path outside the roots kb serve was given (directly, by
    `..`, or through a link inside a root) is refused 403 naming `directory`, and no job is made."""
    container, allowed = rooted
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "s.md").write_text("# S\nroot only", encoding="utf-8")
    (allowed / "link").symlink_to(secret, target_is_directory=True)
    for outside in (secret, allowed / ".." / "secret", allowed / "link"):
        with pytest.raises(Forbidden) as refused:
            container.ingestion.submit("manuals@1.0.0", _directory_job(outside))
        assert refused.value.field == "directory" and refused.value.status == 403
        assert str(secret) not in refused.value.message
    assert container.ingestion.submit("manuals@1.0.0", _directory_job(allowed / "docs")).total == 1


def test_g_local_kb_serve_reads_no_directory_unless_given_ingest_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """G-LOCAL: kb serve's settings name no directory root by default; `--ingest-root DIR` (repeatable)
    names them, resolved."""
    monkeypatch.delenv("KB_INGEST_ROOTS", raising=False)
    none = local_settings(tmp_path / "a", ranking=LocalRanking())
    assert none.directory_roots() == ()
    (tmp_path / "r1").mkdir()
    given = local_settings(
        tmp_path / "b", ranking=LocalRanking(), ingest_roots=[str(tmp_path / "r1"), str(tmp_path / "r2")]
    )
    assert given.directory_roots() == (str((tmp_path / "r1").resolve()), str((tmp_path / "r2").resolve()))
