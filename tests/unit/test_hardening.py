"""Issue 14, the security review's findings: one test (or a few) per finding, named after it."""

from __future__ import annotations

import argparse
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from knowledge_core import bootstrap
from knowledge_core.bootstrap import Container
from knowledge_core.domain.models import Principal

from kb_cli import demo
from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import FakeClock, embedded_container

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
PRINCIPAL = Principal(
    client_id="demo-client", session_id="demo-session", subject="demo-user", tenant="demo", routes=["demo"]
)


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Container]:
    container = embedded_container(tmp_path_factory.mktemp("hardening"), clock)
    demo.seed(container, with_token=False)
    bootstrap.reset(container)
    try:
        yield container
    finally:
        bootstrap.reset(None)


@pytest.fixture(scope="module")
def handlers(container: Container) -> Handlers:
    return Handlers()


def run(handlers: Handlers, function: str, event: dict) -> tuple[int, dict]:
    result = handlers.invoke(function, event)
    assert result["headers"]["Cache-Control"] == "no-store", result
    return result["statusCode"], json.loads(result["body"])


def event_for(name: str, principal: Principal | None = PRINCIPAL, route: str | None = None) -> dict:
    event = load_event(name)
    context = {"principal": principal.model_dump_json()} if principal else {}
    event["requestContext"]["authorizer"] = {"lambda": context}
    if route is not None:
        event["pathParameters"]["route"] = route
        event["rawPath"] = event["rawPath"].replace("/demo/", f"/{route}/")
        event["requestContext"]["http"]["path"] = event["rawPath"]
    return event


def code(body: dict) -> str:
    return body["error"]["code"]


# --- S6: a non-ASCII route name is the typed 403, not a 500 ----------------------------------------------


@pytest.mark.parametrize("route", ["démo", "路由", "demo\u00a0", "\U0001f600"])
@pytest.mark.parametrize(
    ("function", "name"),
    [
        ("capabilities", "capabilities/get.json"),
        ("search", "search/search.json"),
        ("turns", "turns/inline.json"),
    ],
)
def test_S6_non_ascii_route_is_typed_403(handlers, function, name, route):
    status, body = run(handlers, function, event_for(name, route=route))
    assert (status, code(body)) in {(403, "forbidden"), (404, "not_found")}


# --- Smaller: upper-case run_id, ingest paths, private files ----------------------------------------------


def test_smaller_upper_case_run_id_is_400(handlers):
    event = event_for("search/search.json")
    event["body"] = json.dumps({"query": "gateway", "run_id": "0F8FAD5B-D9CB-469F-A165-70867728950E"})
    status, body = run(handlers, "search", event)
    assert status == 400 and code(body) == "invalid_request" and "run_id" in body["error"]["message"]


def test_smaller_ingest_stores_no_absolute_path(tmp_path, monkeypatch):
    from kb_cli import main

    docs = tmp_path / "corpus"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text("# Setup\nbody", encoding="utf-8")
    (docs / "faq.md").write_text("# FAQ\nbody", encoding="utf-8")
    sent: list[dict] = []
    monkeypatch.setattr(
        main, "call", lambda endpoint, method, path, body=None: sent.append(json.loads(json.dumps(body)))
    )
    args = argparse.Namespace(file=str(docs), doc_id=None, title=None, source="s@1", endpoint="http://x")
    main.cmd_ingest(args)
    uris = sorted(d["structured_source"]["uri"] for d in sent[0]["documents"])
    assert uris == ["faq.md", "guides/setup.md"]
    monkeypatch.chdir(tmp_path)
    sent.clear()
    args = argparse.Namespace(
        file="corpus/faq.md", doc_id="faq", title=None, source="s@1", endpoint="http://x"
    )
    main.cmd_ingest(args)
    assert sent[0]["documents"][0]["structured_source"] == {"uri": "corpus/faq.md"}
    assert str(tmp_path) not in json.dumps(sent)


def test_smaller_secret_and_token_files_are_created_0600(tmp_path, monkeypatch):
    from kb_cli import main

    created: list[tuple[str, int]] = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *args, **kwargs):
        if flags & os.O_CREAT:
            created.append((str(path), mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    monkeypatch.setattr(os, "environ", dict(os.environ))
    main.configure_local_env(tmp_path / "state")
    secret = tmp_path / "state" / "token-secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert created and all(mode == 0o600 for _, mode in created)
    main._write_private(tmp_path / "state" / "demo-token", "kbt_x\n")
    assert stat.S_IMODE((tmp_path / "state" / "demo-token").stat().st_mode) == 0o600
    assert not [p for p in Path(tmp_path / "state").iterdir() if p.name.endswith(".tmp")]
