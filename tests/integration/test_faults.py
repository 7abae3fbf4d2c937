"""Faults against the real servers, through the Lambda handlers (A-CAP, A-SEARCH, A-READ, R-FAIL):

* OpenSearch stopped (a separate node started here with its own state dir, then stopped; the shared one
  is never touched): capabilities `enabled: false`, search 200 `status: "unavailable"`, read 503
  `knowledge_unavailable`.
* One of two sources failing inside the `_msearch` (the error comes from OpenSearch's own response):
  `status: "partial"` with the other source's hints; both failing: `unavailable`.
* DynamoDB unreachable (a closed port) or throttling (a loopback server answering ThrottlingException):
  503 with no internals in the body.
Nothing is ever reported as "no results" when a source failed. Timeouts are short so this stays fast.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from knowledge_core import bootstrap
from knowledge_core.adapters.opensearch import OpenSearchBackend
from knowledge_core.bootstrap import Container
from knowledge_core.domain.models import Document, Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery, Vector
from knowledge_core.settings import Settings

from kb_cli import demo
from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import TEST_SECRET, FakeClock
from tests.contract.conftest import World, doc, real_endpoints_or_skip, services_state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.opensearch,
    pytest.mark.dynamodb_local,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.timeout(600),
]
INTERNALS = (
    "opensearch",
    "dynamodb",
    "127.0.0.1",
    "traceback",
    "connection",
    "exception",
    "botocore",
    "urllib3",
)


@pytest.fixture(scope="module")
def endpoints() -> dict[str, str]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    return real_endpoints_or_skip()


def _settings(endpoints: dict[str, str], **overrides: object) -> Settings:
    values: dict[str, object] = {
        "state_backend": "dynamodb",
        "dynamodb_endpoint": endpoints["DYNAMODB_ENDPOINT"],
        "search_backend": "opensearch",
        "opensearch_url": endpoints["OPENSEARCH_URL"],
        "opensearch_index_prefix": f"kbf-{uuid.uuid4().hex[:10]}",
        "token_secret": TEST_SECRET,
        "table_name": f"kbf-{uuid.uuid4().hex[:12]}",
        "registry_cache_seconds": 0,
    }
    return Settings.model_validate(values | overrides)


def _invoke(
    handlers: Handlers, function: str, event_name: str, body: dict | None = None
) -> tuple[int, dict, str]:
    event = load_event(event_name)
    if body is not None:
        event["body"] = json.dumps(body, ensure_ascii=False)
    result = handlers.invoke(function, event)
    return result["statusCode"], json.loads(result["body"]), result["body"]


def _read_event_body(ref: str) -> dict:
    return {"ref": ref, "max_bytes": 4096}


def _assert_no_internals(raw: str) -> None:
    lowered = raw.lower()
    assert not [word for word in INTERNALS if word in lowered], raw


# --- OpenSearch stopped ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stopped_opensearch(endpoints: dict[str, str]) -> Iterator[tuple[Container, FakeClock, str]]:
    """The demo workspace on a separate OpenSearch node (state under /tmp), searched once while it runs
    (the hint ref is kept), then that node is stopped. DynamoDB is the shared server."""
    from kb_cli import supervisor

    state = Path(tempfile.mkdtemp(prefix="kb-faults-"))
    saved = os.environ.get("KB_OPENSEARCH_JAVA_OPTS")
    os.environ["KB_OPENSEARCH_JAVA_OPTS"] = "-Xms256m -Xmx512m -XX:+ExitOnOutOfMemoryError"
    try:
        try:
            own = supervisor.start(state)
        except Exception as exc:
            if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
                pytest.fail(f"second OpenSearch node could not start: {exc}")
            pytest.skip(f"second OpenSearch node could not start: {exc}")
        assert own["OPENSEARCH_URL"] != endpoints["OPENSEARCH_URL"]
        clock = FakeClock()
        container = Container(
            settings=_settings(endpoints, opensearch_url=own["OPENSEARCH_URL"]), clock=clock
        )
        container.table.create()
        demo.seed(container, with_token=False)
        bootstrap.reset(container)
        handlers = Handlers()
        status, body, _ = _invoke(handlers, "capabilities", "capabilities/get.json")
        assert (status, body["enabled"]) == (200, True)
        status, body, _ = _invoke(handlers, "search", "search/search.json")
        assert status == 200 and body["status"] == "ok" and body["hints"], body
        ref = body["hints"][0]["ref"]
        supervisor.stop(state)
        assert not supervisor.status(state)["opensearch"]["running"]
        clock.advance(11)  # past the 10 s health cache; the ref (300 s) is still valid
        yield container, clock, ref
        container.table.delete()
    finally:
        bootstrap.reset(None)
        supervisor.stop(state)
        if saved is None:
            os.environ.pop("KB_OPENSEARCH_JAVA_OPTS", None)
        else:
            os.environ["KB_OPENSEARCH_JAVA_OPTS"] = saved
        shutil.rmtree(state, ignore_errors=True)


def test_a_cap_opensearch_stopped_capabilities_disabled(stopped_opensearch):
    container, _, _ = stopped_opensearch
    bootstrap.reset(container)
    started = time.monotonic()
    status, body, _ = _invoke(Handlers(), "capabilities", "capabilities/get.json")
    assert status == 200 and body["enabled"] is False
    assert time.monotonic() - started < 5


def test_a_search_opensearch_stopped_is_unavailable_not_empty(stopped_opensearch):
    container, _, _ = stopped_opensearch
    bootstrap.reset(container)
    started = time.monotonic()
    status, body, _ = _invoke(Handlers(), "search", "search/search.json")
    assert status == 200 and body["status"] == "unavailable" and body["hints"] == []
    assert time.monotonic() - started < 5


def test_a_read_opensearch_stopped_is_503_knowledge_unavailable(stopped_opensearch):
    container, _, ref = stopped_opensearch
    bootstrap.reset(container)
    status, body, raw = _invoke(Handlers(), "read", "read/read-tampered.json", _read_event_body(ref))
    assert status == 503 and body["error"]["code"] == "knowledge_unavailable"
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    _assert_no_internals(raw)


# --- one source failing inside the _msearch ------------------------------------------------------------


class SabotagedBackend(OpenSearchBackend):
    """The real backend, except that the sub-searches of `failing` sources are made to fail *in
    OpenSearch*: sent to an index that does not exist, or with a query that throws on every shard."""

    def __init__(self, *args: object, failing: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.failing = failing

    def search_body(
        self,
        queries: list[SourceQuery],
        text: str,
        viewer: Viewer,
        vectors: Sequence[Vector] = (),
        dense: bool | None = None,
        evidence: Vector | None = None,
    ) -> list[dict]:
        # no embedder: one search a source
        body = super().search_body(queries, text, viewer, vectors, dense, evidence)
        for i, q in enumerate(queries):
            how = self.failing.get(q.key)
            if how == "missing_index":
                body[2 * i] = {"index": f"{self.index_prefix}-no-such-index"}
            elif how == "failing_query":
                body[2 * i + 1]["query"]["bool"]["filter"].append(
                    {"script": {"script": {"source": "throw new IllegalStateException('boom')"}}}
                )
        return body


@pytest.fixture
def two_sources(endpoints: dict[str, str]) -> Iterator[tuple[World, list[str]]]:
    container = Container(settings=_settings(endpoints), clock=FakeClock())
    container.table.create()
    world = World(container, container.clock)  # type: ignore[arg-type]
    keys = world.publish({"left": {}, "right": {}})
    world.ingest(
        doc(keys[0], "l1", "Left capybara", "capybara notes from the left source"),
        doc(keys[1], "r1", "Right capybara", "capybara notes from the right source"),
    )
    yield world, keys
    container.backend.drop_indices()  # type: ignore[attr-defined]
    container.table.delete()


def _sabotage(world: World, failing: dict[str, str]) -> SabotagedBackend:
    real: OpenSearchBackend = world.c.backend  # type: ignore[assignment]
    sabotaged = SabotagedBackend(
        world.c.settings.opensearch_url, index_prefix=real.index_prefix, timeout_s=3.0, failing=failing
    )
    world.c = Container(world.c.settings, clock=world.clock, state=world.c.state, backend=sabotaged)
    return sabotaged


@pytest.mark.parametrize("how", ["missing_index", "failing_query"])
def test_a_search_one_source_failing_in_msearch_is_partial(two_sources, how):
    world, (left, right) = two_sources
    assert world.search("capybara")["status"] == "ok"
    backend = _sabotage(world, {right: how})
    viewer = Viewer(tenant="acme", subject="alice")
    queries = [SourceQuery(left, 5, 0.0, 3.0), SourceQuery(right, 5, 0.0, 3.0)]
    raw = backend.msearch(backend.search_body(queries, "capybara", viewer), 5.0)["responses"]
    assert "error" not in raw[0] and ("error" in raw[1] or raw[1]["_shards"]["failed"])  # OpenSearch says so
    results = backend.search(queries, QueryAnalysis("capybara"), viewer)
    assert results[0].error is None and [h.doc_id for h in results[0].hits] == ["l1"]
    assert results[1].error is not None and results[1].error.kind == "unavailable" and results[1].hits == []
    body = world.search("capybara")
    assert body["status"] == "partial" and [h["title"] for h in body["hints"]] == ["Left capybara"]


def test_a_search_every_source_failing_in_msearch_is_unavailable(two_sources):
    world, (left, right) = two_sources
    _sabotage(world, {left: "failing_query", right: "missing_index"})
    body = world.search("capybara")
    assert body["status"] == "unavailable" and body["hints"] == []


def test_opensearch_sub_failures_map_to_source_failure_kinds():
    from knowledge_core.adapters.opensearch import _sub_failure

    assert _sub_failure({"error": {"type": "x"}, "status": 429}).kind == "throttled"
    assert _sub_failure({"error": {"type": "x"}, "status": 503}).kind == "unavailable"
    assert _sub_failure({"timed_out": True, "_shards": {"failed": 0}, "hits": {"hits": []}}).kind == "timeout"
    assert (
        _sub_failure({"timed_out": False, "_shards": {"failed": 1}, "hits": {"hits": []}}).kind
        == "unavailable"
    )
    assert _sub_failure({"timed_out": False, "_shards": {"failed": 0}, "hits": {"hits": []}}) is None


def test_a_search_connection_refused_fails_every_source_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenSearchBackend(f"http://127.0.0.1:{port}", index_prefix="kbf-closed", timeout_s=1.0)
    started = time.monotonic()
    results = backend.search(
        [SourceQuery("a@1", 3, 0.0, 1.0), SourceQuery("b@1", 3, 0.0, 1.0)],
        QueryAnalysis("x"),
        Viewer(tenant="t", subject="s"),
    )
    assert [r.error.kind for r in results if r.error] == ["unavailable", "unavailable"]
    assert backend.healthy(0.5) is False and time.monotonic() - started < 5


# --- DynamoDB unreachable or throttling ---------------------------------------------------------------


class _Throttling(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {
                "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                "message": "Rate of requests exceeds the allowed throughput.",
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(params=["closed_port", "throttling"])
def broken_dynamodb(request: pytest.FixtureRequest, endpoints: dict[str, str]) -> Iterator[str]:
    if request.param == "closed_port":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Throttling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("function", "event", "body"),
    [
        ("capabilities", "capabilities/get.json", None),
        ("search", "search/search.json", None),
        ("read", "read/read-tampered.json", {"ref": "x" * 40}),
    ],
)
def test_state_store_down_is_503_without_internals(broken_dynamodb, endpoints, function, event, body):
    container = Container(settings=_settings(endpoints, dynamodb_endpoint=broken_dynamodb), clock=FakeClock())
    bootstrap.reset(container)
    try:
        started = time.monotonic()
        status, payload, raw = _invoke(Handlers(), function, event, body)
        assert status == 503 and payload["error"]["code"] == "service_unavailable", raw
        assert set(payload) == {"error"} and set(payload["error"]) == {"code", "message"}
        _assert_no_internals(raw)
        assert time.monotonic() - started < 15
    finally:
        bootstrap.reset(None)


def test_document_ingest_with_opensearch_down_is_a_transient_source_failure():
    """The port's write failure (an ingestion job waits and retries it, no attempt counted; the admin API
    answers it 503 knowledge_unavailable: tests/unit/test_ingestion_security.py)."""
    from knowledge_core.domain.errors import SourceFailure

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenSearchBackend(f"http://127.0.0.1:{port}", index_prefix="kbf-closed", timeout_s=1.0)
    with pytest.raises(SourceFailure) as caught:
        backend.put_documents([Document(source_key="a@1", doc_id="d", title="t", body="b")])
    assert caught.value.transient


def test_shared_services_untouched(endpoints):
    """The shared services (state dir $KB_SERVICES_STATE) are still running after these tests."""
    from kb_cli import supervisor

    status = supervisor.status(services_state())
    assert all(s["running"] for s in status.values()), status
