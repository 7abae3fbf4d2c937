"""The Lambda handlers driven by the ready events in `events/` (one loader for sam and the tests):
status codes, `Cache-Control: no-store` on every response, JSON shapes, and the authorizer (A-CAP,
A-SEARCH, A-READ, §2 common rules)."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.models import Principal

from kb_cli import demo
from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import FakeClock, installed_demo

# A request that records no metric (a 404, a refused request) makes Powertools warn; that is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
EVENT_PRINCIPAL = Principal(
    client_id="demo-client", session_id="demo-session", subject="demo-user", tenant="default", routes=["demo"]
)
LIMITS = {
    "search_max_results": 3,
    "search_max_bytes": 4096,
    "read_default_bytes": 16384,
    "read_max_bytes": 32768,
    "reference_ttl_seconds": 300,
    "read_chain_max_bytes": 131072,
}


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Container]:
    with installed_demo(tmp_path_factory, clock, "handlers") as container:
        yield container


@pytest.fixture(scope="module")
def handlers(container: Container) -> Handlers:
    return Handlers()


def run(handlers: Handlers, function: str, event: dict) -> tuple[int, dict]:
    result = handlers.invoke(function, event)
    assert result["headers"]["Cache-Control"] == "no-store", result
    assert result["headers"]["Content-Type"] == "application/json"
    return result["statusCode"], json.loads(result["body"])


def with_body(name: str, body: object) -> dict:
    event = load_event(name)
    event["body"] = json.dumps(body, ensure_ascii=False)
    return event


def with_principal(name: str, principal: Principal | None, route: str | None = None) -> dict:
    event = load_event(name)
    if principal is None:
        event["requestContext"]["authorizer"] = {"lambda": {}}
    else:
        event["requestContext"]["authorizer"] = {"lambda": {"principal": principal.model_dump_json()}}
    if route:
        event["pathParameters"]["route"] = route
        event["rawPath"] = event["rawPath"].replace("/demo/", f"/{route}/")
        event["requestContext"]["http"]["path"] = event["rawPath"]
    return event


def error_code(payload: dict) -> str:
    assert set(payload) == {"error"} and set(payload["error"]) == {"code", "message"}
    return payload["error"]["code"]


# --- capabilities --------------------------------------------------------------------------------------


def test_a_cap_capabilities_event(handlers, container):
    status, body = run(handlers, "CapabilitiesFunction", load_event("capabilities/get.json"))
    assert status == 200
    assert body == {
        "schema": "bailing.agent-knowledge-capabilities.v1",
        "protocol": "bailing.agent-knowledge.v1",
        "supported": True,
        "route": "demo",
        "enabled": True,
        "knowledge_scope_revision": container.scopes.resolve("demo").revision,
        "delivery_modes": ["inline", "on_demand"],
        "limits": LIMITS,
        "extensions": {  # §2.1: the filter extension (§8) a host may send
            "filter": {
                "schema": "bailing.agent-knowledge-filter.v1",
                "operators": [
                    *("equals", "notEquals", "greaterThan", "greaterThanOrEquals", "lessThan"),
                    *("lessThanOrEquals", "in", "notIn", "startsWith", "listContains", "stringContains"),
                    *("andAll", "orAll"),
                ],
                "max_conditions": 16,
                "max_depth": 3,
            },
            "read": {"min_bytes": 4096},  # §2.4: the smallest max_bytes a read takes
            "ranking": {"mode": "bm25", "vectors": "none"},  # how searches rank now (no model here)
        },
    }


# --- search --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["search/search.json", "search/search-en.json"])
def test_a_search_search_events(handlers, name):
    event = load_event(name)
    status, body = run(handlers, "search", event)
    assert status == 200
    assert set(body) == {
        "schema",
        "route",
        "knowledge_scope_revision",
        "trust",
        "status",
        "hints",
        "truncated",
    }
    assert body["status"] == "ok" and body["trust"] == "reference_only"
    assert 1 <= len(body["hints"]) <= json.loads(event["body"])["limit"]
    for hint in body["hints"]:
        assert set(hint) == {"ref", "title", "summary", "revision", "score", "expires_at"}
    assert len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()) <= 4096


def test_a_search_unknown_field_event_is_400(handlers):
    status, body = run(handlers, "search", load_event("search/invalid-unknown-field.json"))
    assert status == 400 and error_code(body) == "invalid_request" and "kb_ids" in body["error"]["message"]


# --- read ----------------------------------------------------------------------------------------------


def test_a_read_tampered_event_is_400(handlers):
    status, body = run(handlers, "read", load_event("read/read-tampered.json"))
    assert status == 400 and error_code(body) == "knowledge_reference_invalid"


def test_a_read_chain_through_the_handler(handlers, container):
    _, found = run(
        handlers, "search", with_body("search/search.json", {"query": "database failover runbook"})
    )
    hint = found["hints"][0]
    assert hint["title"].startswith("On-call Runbook")
    document = next(d for d in demo.demo_documents() if d.title == hint["title"])
    content, cursor, pages = b"", None, 0
    while True:
        request = {"ref": hint["ref"], "max_bytes": 4096} | ({"cursor": cursor} if cursor else {})
        status, page = run(handlers, "read", with_body("read/read-tampered.json", request))
        assert status == 200, page
        assert len(json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode()) <= 4096
        content += page["content"].encode()
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert content == document.body.encode() and pages > 5
    assert (page["truncated"], page["budget_exhausted"]) == (False, False)


# --- errors at the edge --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "name"),
    [
        ("capabilities", "capabilities/get.json"),
        ("search", "search/search.json"),
        ("read", "read/read-tampered.json"),
    ],
)
def test_edge_no_principal_is_401(handlers, function, name):
    status, body = run(handlers, function, with_principal(name, None))
    assert status == 401 and error_code(body) == "unauthorized"
    event = load_event(name)
    del event["requestContext"]["authorizer"]
    status, body = run(handlers, function, event)
    assert status == 401 and error_code(body) == "unauthorized"


@pytest.mark.parametrize(
    ("function", "name"),
    [
        ("capabilities", "capabilities/get.json"),
        ("search", "search/search.json"),
        ("read", "read/read-tampered.json"),
    ],
)
def test_edge_route_not_allowed_is_403(handlers, function, name):
    status, body = run(handlers, function, with_principal(name, EVENT_PRINCIPAL, route="other"))
    assert status == 403 and error_code(body) == "forbidden"


def test_edge_unknown_workspace_is_404(handlers):
    principal = EVENT_PRINCIPAL.model_copy(update={"routes": ["demo", "nowhere"]})
    status, body = run(
        handlers, "capabilities", with_principal("capabilities/get.json", principal, route="nowhere")
    )
    assert status == 404 and error_code(body) == "not_found"


def test_edge_unknown_path_is_404_with_no_store(handlers):
    event = load_event("search/search.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/agent-api/v1/nothing-here"
    status, body = run(handlers, "search", event)
    assert status == 404 and error_code(body) == "not_found"


def test_edge_base64_body_is_400(handlers):
    event = load_event("search/search.json")
    event["body"] = base64.b64encode(event["body"].encode()).decode()
    event["isBase64Encoded"] = True
    status, body = run(handlers, "search", event)
    assert status == 400 and error_code(body) == "invalid_request"


def test_edge_unexpected_error_is_500_without_internals(handlers, container, monkeypatch):
    def boom(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("SELECT * FROM passages at /var/data/kb.sqlite3 on search-1.internal")

    monkeypatch.setattr(container.knowledge, "search", boom)
    status, body = run(handlers, "search", load_event("search/search.json"))
    assert status == 500 and body == {"error": {"code": "internal_error", "message": "internal error"}}


# --- authorizer ----------------------------------------------------------------------------------------


def authorizer_event(token: str | None) -> dict:
    event = copy.deepcopy(load_event("authorizer/request.json"))
    if token is None:
        del event["headers"]["authorization"]
        event["identitySource"] = []
    else:
        event["headers"]["authorization"] = f"Bearer {token}"
        event["identitySource"] = [f"Bearer {token}"]
    return event


def test_authorizer_valid_token_yields_the_principal(handlers, container):
    token, session = container.access.issue_token(
        routes=["demo"],
        client_id="demo-client",
        subject="demo-user",
        tenant="default",
        on_behalf_of="end-user",
    )
    result = handlers.invoke("AuthorizerFunction", authorizer_event(token))
    assert result["isAuthorized"] is True
    principal = Principal.model_validate_json(result["context"]["principal"])
    assert principal == Principal(
        client_id="demo-client",
        session_id=session.session_id,
        subject="demo-user",
        on_behalf_of="end-user",
        tenant="default",
        routes=["demo"],
    )
    # The context feeds the function as API Gateway would pass it.
    search = load_event("search/search.json")
    search["requestContext"]["authorizer"] = {"lambda": result["context"]}
    status, body = run(handlers, "search", search)
    assert status == 200 and body["hints"]


@pytest.mark.parametrize("token", ["kbt_not-a-real-token", "not-even-prefixed", "", None, "kbt_" + "x" * 300])
def test_authorizer_bad_token_yields_empty_context_then_401(handlers, token):
    result = handlers.invoke("AuthorizerFunction", authorizer_event(token))
    # Authorized with no principal (Powertools leaves an empty context out), so the function answers 401.
    assert result["isAuthorized"] is True and not result.get("context")
    search = load_event("search/search.json")
    search["requestContext"]["authorizer"] = {"lambda": result.get("context") or {}}
    status, body = run(handlers, "search", search)
    assert status == 401 and error_code(body) == "unauthorized"


def test_authorizer_expired_token_yields_no_principal_and_a_401_saying_token_expired(
    handlers, container, clock
):
    """A-SEARCH: an expired token reaches the function with no principal, only the authorizer's word that
    it expired; the function's 401 keeps the `unauthorized` shape and says `token_expired`."""
    token, _ = container.access.issue_token(
        routes=["demo"], client_id="c", subject="u", tenant="default", ttl_seconds=60
    )
    assert handlers.invoke("AuthorizerFunction", authorizer_event(token))["context"]
    clock.advance(60)
    result = handlers.invoke("AuthorizerFunction", authorizer_event(token))
    assert result["isAuthorized"] is True and result["context"] == {"refused": "token_expired"}
    search = load_event("search/search.json")
    search["requestContext"]["authorizer"] = {"lambda": result["context"]}
    status, body = run(handlers, "search", search)
    assert status == 401 and error_code(body) == "unauthorized"
    assert body["error"]["message"].startswith("token_expired:")


def test_authorizer_scheme_must_be_bearer(handlers, container):
    token, _ = container.access.issue_token(routes=["demo"], client_id="c", subject="u", tenant="default")
    event = authorizer_event(token)
    event["headers"]["authorization"] = f"Basic {token}"
    assert not handlers.invoke("AuthorizerFunction", event).get("context")


# --- admin ---------------------------------------------------------------------------------------------


def test_r_admin_publish_source_event_is_idempotent(handlers):
    event = load_event("admin/publish-source.json")
    status, body = run(handlers, "AdminFunction", event)
    assert (status, body) == (201, {"created": True})
    status, body = run(handlers, "AdminFunction", load_event("admin/publish-source.json"))
    assert (status, body) == (200, {"created": False})
    changed = load_event("admin/publish-source.json")
    changed["body"] = json.dumps(json.loads(changed["body"]) | {"topK": 3})
    status, body = run(handlers, "AdminFunction", changed)
    assert status == 409 and error_code(body) == "conflict"
