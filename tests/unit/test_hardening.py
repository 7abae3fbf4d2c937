"""The security review's findings: one test (or a few) per finding, named after it."""

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
from tests.conftest import FakeClock, installed_demo
from tests.iam_actions import admin_event

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
PRINCIPAL = Principal(
    client_id="demo-client", session_id="demo-session", subject="demo-user", tenant="default", routes=["demo"]
)


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Container]:
    with installed_demo(tmp_path_factory, clock, "hardening") as container:
        yield container


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
    args = argparse.Namespace(
        file=str(docs),
        doc_id=None,
        title=None,
        source="s@1",
        endpoint="http://x",
        tenant="t",
        share_tenant=None,
    )
    main.cmd_ingest(args)
    uris = sorted(d["structured_source"]["uri"] for d in sent[0]["documents"])
    assert uris == ["faq.md", "guides/setup.md"]
    monkeypatch.chdir(tmp_path)
    sent.clear()
    args = argparse.Namespace(
        file="corpus/faq.md",
        doc_id="faq",
        title=None,
        source="s@1",
        endpoint="http://x",
        tenant="t",
        share_tenant=None,
    )
    main.cmd_ingest(args)
    assert sent[0]["documents"][0]["structured_source"] == {"uri": "corpus/faq.md", "format": "markdown"}
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


# --- S1: nothing secret or document-derived in traces or logs ---------------------------------------------


class _Subsegment:
    def __init__(self, sink: list) -> None:
        self.sink = sink

    def put_metadata(self, key: str, value: object, namespace: str = "default") -> None:
        self.sink.append(("metadata", key, value))

    def put_annotation(self, key: str, value: object) -> None:
        self.sink.append(("annotation", key, value))

    def add_exception(self, *args: object, **kwargs: object) -> None:
        self.sink.append(("exception", args, kwargs))


class _RecordingProvider:
    """Stands in for the X-Ray recorder: every annotation, metadata and exception a handler would send."""

    def __init__(self) -> None:
        self.sink: list = []

    def in_subsegment(self, name: str = "", **kwargs: object):
        import contextlib

        @contextlib.contextmanager
        def cm():
            yield _Subsegment(self.sink)

        return cm()

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


@pytest.fixture
def traced_and_logged(container, monkeypatch):
    """Handlers loaded afresh with a recording tracer and every log record (DEBUG and up) captured."""
    import io
    import logging

    from aws_lambda_powertools import Tracer
    from knowledge_core import observability

    provider = _RecordingProvider()
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "false")  # tracing on, as on Lambda: handlers traced
    monkeypatch.setenv("POWERTOOLS_TRACER_CAPTURE_RESPONSE", "true")
    monkeypatch.setenv("POWERTOOLS_TRACER_CAPTURE_ERROR", "true")
    monkeypatch.setattr(
        observability.tracer,
        "_tracer",
        Tracer(service="test", provider=provider, disabled=False, auto_patch=False),  # type: ignore[arg-type]
    )
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(observability.logger.registered_formatter)  # the JSON lines CloudWatch would get
    root = logging.getLogger(observability.SERVICE)
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield Handlers(), provider.sink, stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def test_S1_traces_and_logs_hold_no_token_or_document_text(traced_and_logged, container, monkeypatch):
    handlers, trace, logs = traced_and_logged
    admin = load_event("admin/publish-source.json")
    admin.update(
        rawPath="/admin/v1/tokens",
        routeKey="POST /admin/v1/tokens",
        body=json.dumps(
            {"routes": ["demo"], "client_id": "demo-client", "subject": "demo-user", "tenant": "default"}
        ),
    )
    admin["requestContext"]["http"].update(path="/admin/v1/tokens", method="POST")
    status, issued = run(handlers, "AdminFunction", admin)
    assert status == 201
    token = issued["token"]
    status, found = run(handlers, "search", event_for("search/search-en.json"))
    assert status == 200 and found["hints"]
    read = event_for("read/read-tampered.json")
    read["body"] = json.dumps({"ref": found["hints"][0]["ref"], "max_bytes": 4096})
    status, page = run(handlers, "read", read)
    assert status == 200 and page["content"]
    status, turn = run(handlers, "turns", event_for("turns/inline.json"))
    assert status == 200 and turn["context"]["knowledge"]
    tool = handlers.invoke("AgentToolsFunction", load_event("agent_tools/startup.json"))
    assert tool.get("references"), tool
    # An unexpected error whose message quotes internals and a body.
    monkeypatch.setattr(
        container.knowledge,
        "search",
        lambda *a, **k: (_ for _ in ()).throw(RuntimeError(page["content"][:40])),
    )
    status, _ = run(handlers, "search", event_for("search/search.json"))
    assert status == 500

    recorded = json.dumps([repr(x) for x in trace], ensure_ascii=False) + logs.getvalue()
    assert trace, "the recording tracer saw nothing"
    assert "unhandled error" in logs.getvalue() and "RuntimeError" in logs.getvalue()
    assert token not in recorded
    secrets_and_text = [
        found["hints"][0]["ref"],
        found["hints"][0]["summary"][:30],
        page["content"][:40],
        turn["context"]["knowledge"][0]["content"][:40],
        tool["references"][0]["content"][:40],
    ]
    for text in secrets_and_text:
        assert text not in recorded
    assert not [x for x in trace if x[0] in ("metadata", "exception")]


# --- S5: every cache keyed by caller input is bounded by bytes ---------------------------------------------


def test_S5_stemmer_cache_is_bounded_by_bytes():
    from knowledge_core.domain import analyzer

    analyzer._stem_cache.clear()
    for i in range(3000):  # 3,000 distinct 2,000-character "words": ~12 MB of keys if all were kept
        analyzer.stem(f"{i:05d}" + "a" * 1995)
        analyzer.stem("x" * (i % 60 + 1) + "ing")
    assert analyzer._stem_cache.bytes <= analyzer.STEM_CACHE_BYTES
    assert analyzer._stem_cache.bytes < 1_000_000  # long words are never kept
    assert analyzer.stem("running") == "run"


def test_S5_bounded_cache_evicts_least_recently_used_by_bytes():
    from knowledge_core.domain.cache import BoundedCache

    cache: BoundedCache[str, str] = BoundedCache(10_000, max_entry_bytes=2_000)
    for i in range(1000):
        cache.put(f"k{i}", "v" * 100)
        if i % 10 == 0:
            assert cache.get("k0") is not None  # kept warm
    assert cache.bytes <= 10_000 and cache.get("k0") is not None and cache.get("k1") is None
    cache.put("huge", "v" * 5_000)
    assert cache.get("huge") is None


def test_S5_run_guard_and_query_vector_caches_are_bounded(container, tmp_path):
    from knowledge_core.adapters.embedding import OnnxEmbedder
    from knowledge_core.domain.models import Run
    from knowledge_core.ports import Vector
    from knowledge_core.services.access import RUN_CACHE_BYTES, RunGuard

    class Runs:
        def get_run(self, run_id: str) -> Run:
            return Run(
                run_id=run_id, session_id="s" * 100, client_id="c", route="demo", state="context_ready"
            )

    guard = RunGuard(Runs(), FakeClock(), ttl_seconds=60)  # type: ignore[arg-type]
    for i in range(30_000):
        guard._get(f"{i:08d}-0000-4000-8000-000000000000")
    assert guard._cache.bytes <= RUN_CACHE_BYTES
    model = tmp_path / "m"
    model.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (model / name).write_bytes(b"x")
    (model / "model.json").write_text('{"id": "m", "dimensions": 512}')
    cache = OnnxEmbedder(model)._queries  # queries of up to 2,000 characters, 512-byte vectors
    for i in range(20_000):
        cache.put(f"{i}{'q' * 1990}", Vector("m", bytes(512)))
    assert 0 < cache.bytes <= cache.max_bytes <= 4 * 1024 * 1024 and len(cache) < 2_000


# --- S3: tenant isolation fails closed ---------------------------------------------------------------------


def test_S3_another_tenant_on_the_same_route_sees_and_reads_nothing(container):
    from knowledge_core.domain.errors import KnowledgeError
    from knowledge_core.domain.wire import ReadRequest, SearchRequest

    other = PRINCIPAL.model_copy(update={"tenant": "tenant-b"})
    mine = container.knowledge.search(PRINCIPAL, "demo", SearchRequest(query="网关离线"))
    assert mine.hints
    theirs = container.knowledge.search(other, "demo", SearchRequest(query="网关离线"))
    assert theirs.status == "ok" and theirs.hints == []
    # The tenant is part of the identity a ref is bound to: the same client/session/subject of another
    # tenant cannot read it.
    with pytest.raises(KnowledgeError) as info:
        container.knowledge.read(other, "demo", ReadRequest(ref=mine.hints[0].ref))
    assert info.value.code == "knowledge_reference_invalid"


def test_S3_identity_digest_binds_the_tenant():
    from knowledge_core.codec import identity_digest

    other = PRINCIPAL.model_copy(update={"tenant": "tenant-b"})
    assert identity_digest(PRINCIPAL, "demo", None) != identity_digest(other, "demo", None)


def test_S3_run_ownership_compares_tenants(container):
    import uuid

    from knowledge_core.domain.errors import RunNotFound
    from knowledge_core.domain.models import Run

    run_id = str(uuid.uuid4())
    container.state.runs.create_run(
        Run(
            run_id=run_id,
            session_id=PRINCIPAL.session_id,
            client_id=PRINCIPAL.client_id,
            route="demo",
            state="context_ready",
            tenant="default",
        )
    )
    assert container.run_guard.check(PRINCIPAL, "demo", run_id) is not None
    with pytest.raises(RunNotFound):
        container.run_guard.check(PRINCIPAL.model_copy(update={"tenant": "tenant-b"}), "demo", run_id)
    legacy = str(uuid.uuid4())  # stored before runs carried a tenant: nobody's
    container.state.runs.create_run(
        Run(
            run_id=legacy,
            session_id=PRINCIPAL.session_id,
            client_id=PRINCIPAL.client_id,
            route="demo",
            state="context_ready",
        )
    )
    with pytest.raises(RunNotFound):
        container.run_guard.check(PRINCIPAL, "demo", legacy)


def test_S3_admin_ingest_requires_a_tenant(handlers):
    def put(body: dict) -> tuple[int, dict]:
        event = load_event("admin/publish-source.json")
        path = "/admin/v1/sources/demo-docs@1.0.0/documents/new-doc"
        event.update(
            rawPath=path, routeKey="PUT /admin/v1/sources/{source}/documents/{doc_id}", body=json.dumps(body)
        )
        event["requestContext"]["http"].update(path=path, method="PUT")
        event["pathParameters"] = {"source": "demo-docs@1.0.0", "doc_id": "new-doc"}
        return run(handlers, "AdminFunction", event)

    status, body = put({"title": "t", "body": "b"})
    assert status == 400 and code(body) == "invalid_request" and body["error"]["message"].startswith("acl")
    status, body = put({"title": "t", "body": "b", "acl": {"subjects": ["x"]}})
    assert status == 400 and body["error"]["message"].startswith("acl.tenant")
    status, body = put(
        {"title": "t", "body": "b", "acl": {"tenant": "default", "shared_tenants": ["partner"]}}
    )
    assert status == 200, body


def test_S3_demo_documents_and_kb_ingest_name_a_tenant(monkeypatch, tmp_path):
    from kb_cli import main

    assert all(d.acl.tenant == "default" for d in demo.demo_documents())
    sent: list[dict] = []
    monkeypatch.setattr(
        main, "call", lambda endpoint, method, path, body=None: sent.append(json.loads(json.dumps(body)))
    )
    (tmp_path / "a.md").write_text("# A\nbody", encoding="utf-8")
    main.main(["ingest", "--source", "s@1", "--doc-id", "a", str(tmp_path / "a.md")])
    assert sent[-1]["documents"][0]["acl"] == {"tenant": "default", "shared_tenants": []}
    main.main(
        [
            "ingest",
            "--source",
            "s@1",
            "--doc-id",
            "a",
            "--tenant",
            "acme",
            "--share-tenant",
            "globex",
            str(tmp_path / "a.md"),
        ]
    )
    assert sent[-1]["documents"][0]["acl"] == {"tenant": "acme", "shared_tenants": ["globex"]}


# --- S7: tokens can be listed and revoked -----------------------------------------------------------------


def authorizer_event(token: str) -> dict:
    event = load_event("authorizer/request.json")
    event["headers"]["authorization"] = f"Bearer {token}"
    event["identitySource"] = [f"Bearer {token}"]
    return event


def test_S7_token_list_and_revoke_through_the_admin_api(handlers, container):
    from knowledge_core.services.access import token_hash

    body = {"routes": ["demo"], "client_id": "revoke-me", "subject": "u", "tenant": "default"}
    status, issued = run(handlers, "AdminFunction", admin_event("POST", "/admin/v1/tokens", body))
    assert status == 201 and issued["token_id"].startswith("tok_")
    token = issued["token"]
    assert handlers.invoke("AuthorizerFunction", authorizer_event(token)).get("context")

    status, listed = run(handlers, "AdminFunction", admin_event("GET", "/admin/v1/tokens"))
    assert status == 200
    mine = [t for t in listed["tokens"] if t["token_id"] == issued["token_id"]]
    assert mine and mine[0]["client_id"] == "revoke-me" and mine[0]["revoked"] is False
    text = json.dumps(listed)
    assert token not in text and token_hash(token) not in text  # never the token nor its hash

    path = f"/admin/v1/tokens/{issued['token_id']}/revoke"
    status, revoked = run(
        handlers, "AdminFunction", admin_event("POST", path, {}, token_id=issued["token_id"])
    )
    assert (status, revoked) == (200, {"token_id": issued["token_id"], "revoked": True})
    # Refused at once by the authorizer (no session cache): the function then answers 401.
    assert not handlers.invoke("AuthorizerFunction", authorizer_event(token)).get("context")
    status, listed = run(handlers, "AdminFunction", admin_event("GET", "/admin/v1/tokens"))
    assert [t["revoked"] for t in listed["tokens"] if t["token_id"] == issued["token_id"]] == [True]
    # Idempotent; unknown and malformed ids are typed errors.
    assert (
        run(handlers, "AdminFunction", admin_event("POST", path, {}, token_id=issued["token_id"]))[0] == 200
    )
    unknown = "tok_" + "0" * 32
    status, body = run(
        handlers,
        "AdminFunction",
        admin_event("POST", f"/admin/v1/tokens/{unknown}/revoke", {}, token_id=unknown),
    )
    assert status == 404 and code(body) == "not_found"
    status, body = run(
        handlers, "AdminFunction", admin_event("POST", "/admin/v1/tokens/nope/revoke", {}, token_id="nope")
    )
    assert status == 400 and code(body) == "invalid_request"


def test_S7_expired_tokens_are_not_listed_and_cannot_be_revoked(container, clock):
    from knowledge_core.domain.models import token_id_of
    from knowledge_core.services.access import token_hash

    token, _ = container.access.issue_token(
        routes=["demo"], client_id="short", subject="u", tenant="default", ttl_seconds=60
    )
    token_id = token_id_of(token_hash(token))
    assert token_id in {t.token_id for t in container.access.list_tokens()}
    clock.advance(61)
    assert token_id not in {t.token_id for t in container.access.list_tokens()}
    from knowledge_core.domain.errors import NotFound

    with pytest.raises(NotFound):
        container.access.revoke_token(token_id)


def test_S7_kb_token_list_and_revoke(monkeypatch, capsys):
    from kb_cli import main

    calls: list[tuple[str, str, object]] = []

    def fake_call(endpoint, method, path, body=None):
        calls.append((method, path, body))
        if method == "GET":
            return {
                "tokens": [
                    {
                        "token_id": "tok_" + "a" * 32,
                        "client_id": "c",
                        "session_id": "s",
                        "subject": "u",
                        "on_behalf_of": None,
                        "tenant": "default",
                        "routes": ["demo"],
                        "expires_at": 1,
                        "revoked": False,
                    }
                ]
            }
        return {"token_id": path.split("/")[-2], "revoked": True}

    monkeypatch.setattr(main, "call", fake_call)
    assert main.main(["token", "list"]) == 0
    assert "tok_" + "a" * 32 in capsys.readouterr().out
    assert main.main(["token", "revoke", "tok_" + "b" * 32]) == 0
    assert calls[-1] == ("POST", f"/admin/v1/tokens/tok_{'b' * 32}/revoke", {})
    assert main.main(["token", "revoke", "kbt_secret-token"]) == 0  # by the token itself: only its id is sent
    assert "kbt_secret" not in json.dumps(calls[-1]) and calls[-1][1].startswith("/admin/v1/tokens/tok_")


# --- S9: current + previous secret, re-read on a bounded interval, kb secret rotate -----------------------


def test_S9_refs_of_either_side_of_a_rotation_verify_and_new_ones_use_the_current_secret():
    from knowledge_core.codec import TokenCodec
    from knowledge_core.domain.errors import ReferenceInvalid

    clock = FakeClock()
    old, new = b"old-secret-0123456789abcdef", b"new-secret-0123456789abcdef"
    before = TokenCodec(old, clock)  # a warm container that has not re-read yet
    after = TokenCodec(new, clock, previous=old)
    claims = {
        "identity": "i",
        "scope_revision": "s" * 64,
        "source_key": "a@1",
        "doc_id": "d",
        "revision": "sha256:x",
    }
    ref_before, exp = before.issue_ref(**claims)
    assert after.open_ref(ref_before, identity="i").doc_id == "d"  # old refs still verify
    cursor_before = before.issue_cursor(ref=ref_before, offset=7, expires_at=exp)
    assert after.open_cursor(cursor_before, ref=ref_before).offset == 7
    ref_after, _ = after.issue_ref(**claims)
    assert TokenCodec(new, clock).open_ref(ref_after, identity="i").doc_id == "d"  # signed with the current
    with pytest.raises(ReferenceInvalid):
        TokenCodec(old, clock).open_ref(ref_after, identity="i")
    with pytest.raises(ReferenceInvalid):  # retired twice: no longer verifies
        TokenCodec(b"newest-secret-0123456789abc", clock, previous=new).open_ref(ref_before, identity="i")


def test_S9_rotating_codec_rereads_within_the_interval_and_keeps_keys_on_failure():
    from knowledge_core.codec import RotatingTokenCodec

    clock = FakeClock()
    store = {"current": b"first-secret-0123456789abcd", "previous": None, "fail": False, "reads": 0}

    def source():
        store["reads"] += 1
        if store["fail"]:
            raise RuntimeError("secrets manager down")
        return store["current"], store["previous"]

    codec = RotatingTokenCodec(source, clock, refresh_seconds=60)
    claims = {
        "identity": "i",
        "scope_revision": "s" * 64,
        "source_key": "a@1",
        "doc_id": "d",
        "revision": "sha256:x",
    }
    first, _ = codec.issue_ref(**claims)
    store["previous"], store["current"] = store["current"], b"second-secret-0123456789abc"
    clock.advance(59)
    assert (
        codec.keys().ref_keys[0]
        == RotatingTokenCodec(lambda: (b"first-secret-0123456789abcd", None), clock).keys().ref_keys[0]
    )
    clock.advance(1)  # the bound: re-read now
    second, _ = codec.issue_ref(**claims)
    assert second != first and codec.open_ref(first, identity="i") and codec.open_ref(second, identity="i")
    reads = store["reads"]
    store["fail"] = True
    clock.advance(60)
    assert codec.open_ref(second, identity="i") and store["reads"] == reads + 1  # tried, kept its keys


def test_S9_kb_secret_rotate_takes_effect_in_a_running_process(tmp_path, monkeypatch):
    from knowledge_core.bootstrap import token_secret_source
    from knowledge_core.codec import RotatingTokenCodec
    from knowledge_core.settings import Settings

    from kb_cli import main

    monkeypatch.setattr(os, "environ", dict(os.environ))
    state = tmp_path / "state"
    main.configure_local_env(state)
    assert os.environ["KB_TOKEN_SECRET_FILE"] == str((state / "token-secret").resolve())
    clock = FakeClock()
    settings = Settings.from_env()
    codec = RotatingTokenCodec(
        token_secret_source(settings), clock, refresh_seconds=settings.secret_refresh_seconds
    )
    claims = {
        "identity": "i",
        "scope_revision": "s" * 64,
        "source_key": "a@1",
        "doc_id": "d",
        "revision": "sha256:x",
    }
    old_ref, _ = codec.issue_ref(**claims)
    old_secret = (state / "token-secret").read_text()
    assert main.main(["secret", "rotate", "--state", str(state)]) == 0
    assert (state / "token-secret.previous").read_text() == old_secret
    assert (state / "token-secret").read_text() != old_secret
    for name in ("token-secret", "token-secret.previous"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600
    clock.advance(settings.secret_refresh_seconds)
    new_ref, _ = codec.issue_ref(**claims)
    assert (
        new_ref != old_ref and codec.open_ref(old_ref, identity="i") and codec.open_ref(new_ref, identity="i")
    )


def test_S9_secrets_manager_current_and_previous_stages(monkeypatch):
    import boto3
    from knowledge_core.bootstrap import token_secret_source
    from knowledge_core.settings import Settings
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        arn = sm.create_secret(Name="kb-token", SecretString="first-secret-0123456789abcd")["ARN"]
        source = token_secret_source(Settings(token_secret_arn=arn, secret_refresh_seconds=1))
        assert source() == (b"first-secret-0123456789abcd", None)  # never rotated: no AWSPREVIOUS
        sm.put_secret_value(SecretId=arn, SecretString="second-secret-0123456789abc")
        fresh = token_secret_source(Settings(token_secret_arn=arn, secret_refresh_seconds=1))
        assert fresh() == (b"second-secret-0123456789abc", b"first-secret-0123456789abcd")


# --- S2/S8: every action each function performs is granted by its policy, and every granted write used ----


def test_S2_S8_each_function_performs_only_what_its_policy_grants(tmp_path, clock, monkeypatch):
    """The S3 source's actions (ListBucket under its prefix, GetObject) both ways."""
    import boto3
    from knowledge_core.adapters.s3_objects import S3ObjectStore
    from knowledge_core.settings import Settings

    from tests.dynamo_tables import moto_table
    from tests.iam_actions import Recorder, RecordingHandlers, S3Scenario, check, run_scenario

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    settings = Settings(
        state_backend="dynamodb",
        search_backend="sqlite",
        sqlite_path=str(tmp_path / "kb.sqlite3"),
        token_secret="test-secret-0123456789abcdef-0123456789",
        registry_cache_seconds=0,
        ingest_s3_uri="s3://kb-iam-probe/manuals/",
        ingest_s3_source="demo-docs@1.0.0",
        ingest_s3_tenant="demo",
    )
    with moto_table() as table:
        s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="m", aws_secret_access_key="m")
        s3.create_bucket(Bucket="kb-iam-probe")
        scenario = S3Scenario(s3, "kb-iam-probe", "manuals/")
        store = S3ObjectStore(client=s3)
        container = Container(settings, clock=clock, state=table.stores(), object_store=store)
        demo.seed(container, with_token=False)  # setup, outside any function
        recorder = Recorder()
        recorder.watch_dynamodb(table.client)
        recorder.watch_s3(s3)
        bootstrap.reset(container)
        try:
            run_scenario(RecordingHandlers(), container, scenario)
        finally:
            bootstrap.reset(None)
    assert set(recorder.actions) >= {
        "AdminFunction",
        "AuthorizerFunction",
        "CapabilitiesFunction",
        "SearchFunction",
        "ReadFunction",
        "TurnsFunction",
        "AgentToolsFunction",
    }
    assert check(recorder, {"dynamodb", "s3"}, s3=scenario.params) == []
    assert {a.name for a in recorder.actions["IngestWorkerFunction"] if a.service == "s3"} == {
        "ListBucket",
        "GetObject",
    }


# --- S4: cost control in the template ---------------------------------------------------------------------


def test_S4_throttling_reserved_concurrency_and_serverless_rules():
    import subprocess
    import sys

    from kb_cli.template import TEMPLATE, load_template

    template = load_template()
    resources, parameters = template["Resources"], template["Parameters"]
    routes = resources["HttpApi"]["Properties"]["DefaultRouteSettings"]
    assert routes == {
        "ThrottlingRateLimit": {"Ref": "ApiThrottlingRateLimit"},
        "ThrottlingBurstLimit": {"Ref": "ApiThrottlingBurstLimit"},
    }
    assert (
        parameters["ApiThrottlingRateLimit"]["Default"] > 0
        and parameters["ApiThrottlingBurstLimit"]["Default"] > 0
    )
    functions = {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    assert len(functions) >= 7
    for name, function in functions.items():
        reserved = function["Properties"].get("ReservedConcurrentExecutions")
        assert reserved and "If" in reserved, name  # a parameter; 0 = no reservation
        assert parameters[reserved["If"][1]["Ref"]]["Default"] > 0, name
    # No authorizer result cache: a missing header would get no no-store; a revocation would be outlived.
    authorizer = resources["HttpApi"]["Properties"]["Auth"]["Authorizers"]["KnowledgeAuthorizer"]
    assert authorizer["Identity"]["ReauthorizeEvery"] == 0
    # AWS's serverless rules (cfn-lint-serverless): access logs, throttling, log retention, … report nothing.
    lint = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--append-rules",
            "cfn_lint_serverless.rules",
            "--",
            str(TEMPLATE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
