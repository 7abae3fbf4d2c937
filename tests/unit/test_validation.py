"""SPEC §2 validation through the real handlers: strict JSON types, unknown fields, bounds, malformed
bodies → 400 invalid_request naming the field; runs → 404 run_not_found / 409 run_not_ready; and no
error body ever leaks document text, paths, SQL, hostnames or tracebacks."""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Iterator

import pytest
from knowledge_core import bootstrap
from knowledge_core.bootstrap import Container
from knowledge_core.domain.models import Run

from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import FakeClock, installed_demo

SESSION, CLIENT, ROUTE = "demo-session", "demo-client", "demo"
SEARCH_EVENT = load_event("search/search.json")
READ_EVENT = load_event("read/read-tampered.json")
# Things that must never appear in an error body.
LEAKS = re.compile(
    r"Traceback|File \"|\.py\b|/work|/tmp|/home|SELECT|sqlite|bm25|dynamodb|boto|localhost|127\.0\.0\.1"
    r"|amazonaws|https?://|pydantic|errors\.pydantic|网关|gateway",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def handlers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handlers]:
    with installed_demo(tmp_path_factory, FakeClock(), "validation"):
        yield Handlers()


@pytest.fixture(scope="module")
def container(handlers: Handlers) -> Container:
    return bootstrap.container()


def invoke(handlers: Handlers, function: str, body: str) -> tuple[int, dict]:
    event = copy.deepcopy(SEARCH_EVENT if function == "search" else READ_EVENT)
    event["body"] = body
    result = handlers.invoke(function, event)
    assert result["headers"]["Cache-Control"] == "no-store"
    payload = json.loads(result["body"])
    if result["statusCode"] >= 400:
        assert set(payload) == {"error"} and set(payload["error"]) == {"code", "message"}
        assert not LEAKS.search(result["body"]), result["body"]
        assert len(result["body"]) < 512
    return result["statusCode"], payload


def assert_invalid(handlers: Handlers, function: str, body: object, field: str) -> None:
    raw = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    status, payload = invoke(handlers, function, raw)
    assert (status, payload["error"]["code"]) == (400, "invalid_request"), payload
    assert payload["error"]["message"].startswith(f"{field}:"), payload


SEARCH_INVALID = [
    ({"query": "x", "limit": "3"}, "limit"),
    ({"query": "x", "limit": True}, "limit"),
    (
        {"query": "x", "limit": 2.5},
        "limit",
    ),  # 2.0 is the integer 2 (JSON Schema; tests/unit/test_openapi_truth.py)
    ({"query": "x", "limit": 0}, "limit"),
    ({"query": "x", "limit": 4}, "limit"),
    ({"query": "x", "limit": None}, "limit"),
    ({"query": 1}, "query"),
    ({"query": ["网关"]}, "query"),
    ({"query": ""}, "query"),
    ({"query": "   \n\t "}, "query"),
    ({"query": "a" * 2001}, "query"),
    ({"query": "网" * 2001}, "query"),
    ({}, "query"),
    ({"query": "x", "kb_ids": ["other-kb@1.0.0"]}, "kb_ids"),
    ({"query": "x", "doc_id": "05-refund-billing-policy"}, "doc_id"),
    ({"query": "x", "sources": ["demo-docs@1.0.0"]}, "sources"),
    ({"query": "x", "run_id": "not-a-run"}, "run_id"),
    ({"query": "x", "run_id": 1}, "run_id"),
    ({"query": "x", "run_id": True}, "run_id"),
    ("{not json", "body"),
    ('{"query": "x",}', "body"),
    ("[]", "body"),
    ('"query"', "body"),
    ("1", "body"),
    ("null", "body"),
    ("", "body"),
]


@pytest.mark.parametrize(
    ("body", "field"), SEARCH_INVALID, ids=[f"{f}-{i}" for i, (_, f) in enumerate(SEARCH_INVALID)]
)
def test_a_search_invalid_request_names_the_field(handlers, body, field):
    assert_invalid(handlers, "search", body, field)


READ_INVALID = [
    ({"ref": "r", "max_bytes": "16384"}, "max_bytes"),
    ({"ref": "r", "max_bytes": True}, "max_bytes"),
    ({"ref": "r", "max_bytes": 16384.5}, "max_bytes"),  # 16384.0 is an integer (test_openapi_truth.py)
    ({"ref": "r", "max_bytes": 4095}, "max_bytes"),
    ({"ref": "r", "max_bytes": 32769}, "max_bytes"),
    ({"ref": 1}, "ref"),
    ({"ref": ""}, "ref"),
    ({"ref": None}, "ref"),
    ({}, "ref"),
    ({"ref": "r", "cursor": True}, "cursor"),
    ({"ref": "r", "cursor": 1}, "cursor"),
    ({"ref": "r", "cursor": ""}, "cursor"),
    ({"ref": "r", "doc_id": "05-refund-billing-policy"}, "doc_id"),
    ({"ref": "r", "kb_ids": ["x"]}, "kb_ids"),
    ({"ref": "r", "offset": 4096}, "offset"),
    ({"ref": "r", "run_id": "123"}, "run_id"),
    ("{", "body"),
    ("[1, 2]", "body"),
]


@pytest.mark.parametrize(
    ("body", "field"), READ_INVALID, ids=[f"{f}-{i}" for i, (_, f) in enumerate(READ_INVALID)]
)
def test_a_read_invalid_request_names_the_field(handlers, body, field):
    assert_invalid(handlers, "read", body, field)


def test_a_search_unknown_field_name_is_echoed_bounded(handlers):
    status, payload = invoke(handlers, "search", json.dumps({"query": "x", "k" * 100_000: 1}))
    assert status == 400 and payload["error"]["message"] == "k" * 64 + "…: unknown field"


def test_a_search_bounds_that_are_valid(handlers):
    for body in ({"query": "网" * 2000}, {"query": "x" * 2000, "limit": 1}, {"query": "网关", "limit": 3}):
        status, payload = invoke(handlers, "search", json.dumps(body, ensure_ascii=False))
        assert status == 200 and payload["status"] == "ok", payload


@pytest.mark.parametrize("max_bytes", [4096, 32768])
def test_a_read_bounds_that_are_valid(handlers, max_bytes):
    _, result = invoke(handlers, "search", json.dumps({"query": "网关离线"}, ensure_ascii=False))
    ref = result["hints"][0]["ref"]
    status, page = invoke(handlers, "read", json.dumps({"ref": ref, "max_bytes": max_bytes}))
    assert (
        status == 200
        and len(json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode()) <= max_bytes
    )


def test_a_read_bad_ref_error_leaks_nothing(handlers):
    status, payload = invoke(handlers, "read", json.dumps({"ref": "eyJ0IjoicmVmIn0.tampered"}))
    assert (status, payload["error"]["code"]) == (400, "knowledge_reference_invalid")


# --- runs ---------------------------------------------------------------------------------------------


def make_run(
    container: Container,
    *,
    session: str = SESSION,
    client: str = CLIENT,
    route: str = ROUTE,
    state: str = "context_ready",
    tenant: str = "default",
) -> str:
    run_id = str(uuid.uuid4())
    container.state.runs.create_run(
        Run(run_id=run_id, session_id=session, client_id=client, route=route, state=state, tenant=tenant)
    )
    return run_id


def search_with_run(handlers: Handlers, run_id: str) -> tuple[int, dict]:
    return invoke(handlers, "search", json.dumps({"query": "网关离线", "run_id": run_id}, ensure_ascii=False))


def read_with_run(handlers: Handlers, run_id: str) -> tuple[int, dict]:
    return invoke(handlers, "read", json.dumps({"ref": "eyJ0IjoicmVmIn0.tampered", "run_id": run_id}))


def test_a_search_own_ready_run_is_accepted_and_echoed(handlers, container):
    run_id = make_run(container)
    status, result = search_with_run(handlers, run_id)
    assert status == 200 and result["run_id"] == run_id and result["hints"]
    status, page = invoke(handlers, "read", json.dumps({"ref": result["hints"][0]["ref"], "run_id": run_id}))
    assert status == 200 and page["run_id"] == run_id


@pytest.mark.parametrize(
    "owner", [{"session": "other-session"}, {"client": "other-client"}, {"route": "other"}, None]
)
def test_a_search_and_read_run_of_someone_else_is_404(handlers, container, owner):
    run_id = make_run(container, **owner) if owner else str(uuid.uuid4())
    for call in (search_with_run, read_with_run):
        status, payload = call(handlers, run_id)
        assert (status, payload["error"]["code"]) == (404, "run_not_found")


@pytest.mark.parametrize("state", ["preparing", "completed", "failed", "cancelled"])
def test_a_search_and_read_run_not_ready_is_409(handlers, container, state):
    run_id = make_run(container, state=state)
    for call in (search_with_run, read_with_run):
        status, payload = call(handlers, run_id)
        assert (status, payload["error"]["code"]) == (409, "run_not_ready")
