"""A-REF (§2.5): what each read re-checks, the outcome of each failure, and their precedence.

400 knowledge_reference_invalid (bad MAC, malformed, other identity/route/run) > 410 expired > 409
knowledge_scope_changed > 409 knowledge_changed (replaced, deleted, disabled, no longer visible) and
503 knowledge_unavailable (backend down). A newer body is never served under an old ref."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.errors import KnowledgeError, SourceFailure
from knowledge_core.domain.models import (
    AgentDefinition,
    Document,
    DocumentAcl,
    Principal,
    Run,
    SourceDefinition,
)
from knowledge_core.domain.wire import ReadRequest, SearchRequest
from knowledge_core.ports import SearchBackend
from knowledge_core.services.knowledge import KnowledgeService

from tests.conftest import FakeClock, embedded_container

ROUTE, ROUTE_2 = "verify", "verify-two"
A, B = "vdocs@1.0.0", "vextra@1.0.0"
ACL = DocumentAcl(tenant="t")  # the principal's tenant (a document always names its tenant)
PRINCIPAL = Principal(client_id="c", session_id="s", subject="u", tenant="t", routes=[ROUTE, ROUTE_2])
BODY = "zzverify 设备安装规范 " + "page filler text with 中文 and emoji 😀 " * 300
SECRET_PHRASE = "zzverify"


def agent(version: str, sources: list[str]) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {
            "id": "verify-agent",
            "version": version,
            "modelProfile": {"candidates": [{"model": "m"}]},
            "allowedKnowledge": [{"id": k.split("@")[0], "version": k.split("@")[1]} for k in sources],
        }
    )


def build(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(tmp_path, clock)
    admin = container.admin
    admin.publish_source(SourceDefinition.model_validate({"id": "vdocs", "version": "1.0.0"}))
    admin.publish_source(SourceDefinition.model_validate({"id": "vextra", "version": "1.0.0"}))
    admin.publish_agent(agent("1.0.0", [A, B]))
    admin.publish_agent(agent("2.0.0", [A]))
    admin.set_workspace(ROUTE, "verify-agent@1.0.0")
    admin.set_workspace(ROUTE_2, "verify-agent@1.0.0")
    admin.put_documents([Document(acl=ACL, source_key=A, doc_id="d1", title="verify doc", body=BODY)])
    return container


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Container:
    """A world of its own, for tests that change it or move the clock."""
    return build(tmp_path, clock)


@pytest.fixture(scope="module")
def stable(tmp_path_factory: pytest.TempPathFactory) -> Container:
    """One shared world for tests that neither change it nor move its clock."""
    return build(tmp_path_factory.mktemp("verify"), FakeClock())


def new_run(
    container: Container, principal: Principal = PRINCIPAL, route: str = ROUTE, state: str = "context_ready"
) -> str:
    run_id = str(uuid.uuid4())
    container.state.runs.create_run(
        Run(
            run_id=run_id,
            session_id=principal.session_id,
            client_id=principal.client_id,
            route=route,
            state=state,
            tenant=principal.tenant,
        )
    )
    return run_id


def ref_of(
    container: Container, run_id: str | None = None, route: str = ROUTE, principal: Principal = PRINCIPAL
) -> str:
    result = container.knowledge.search(
        principal, route, SearchRequest(query=SECRET_PHRASE, run_id=run_id)
    ).wire()
    assert result["status"] == "ok" and result["hints"], result
    return result["hints"][0]["ref"]


def read(
    container: Container,
    ref: str,
    *,
    run_id: str | None = None,
    cursor: str | None = None,
    route: str = ROUTE,
    principal: Principal = PRINCIPAL,
    service: KnowledgeService | None = None,
) -> dict:
    return (
        (service or container.knowledge)
        .read(principal, route, ReadRequest(ref=ref, run_id=run_id, cursor=cursor, max_bytes=4096))
        .wire()
    )


def refused(call, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises(KnowledgeError) as info:
        call(*args, **kwargs)
    error = info.value
    # No error ever carries document text.
    assert SECRET_PHRASE not in error.message and "filler" not in error.message
    return error.status, error.code


INVALID = (400, "knowledge_reference_invalid")
EXPIRED = (410, "knowledge_reference_expired")
SCOPE_CHANGED = (409, "knowledge_scope_changed")
CHANGED = (409, "knowledge_changed")
UNAVAILABLE = (503, "knowledge_unavailable")


def tamper(token: str) -> str:
    i = len(token) // 3
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]


class DownBackend(SearchBackend):
    """A backend that cannot answer document reads."""

    def __init__(self, inner: SearchBackend) -> None:
        self.inner = inner

    def search(self, queries, query, viewer):
        return self.inner.search(queries, query, viewer)

    def get_document(self, source_key, doc_id):
        raise SourceFailure("unavailable", "connection refused to search-node-7.internal:9200")

    def get_documents(self, keys):
        raise SourceFailure("unavailable", "connection refused to search-node-7.internal:9200")

    def document_states(self, keys):
        raise SourceFailure("unavailable", "connection refused to search-node-7.internal:9200")

    def put_documents(self, documents):
        return self.inner.put_documents(documents)

    def delete_document(self, source_key, doc_id):
        return self.inner.delete_document(source_key, doc_id)

    def set_document_status(self, source_key, doc_id, status):
        return self.inner.set_document_status(source_key, doc_id, status)

    def healthy(self, timeout_s: float = 1.0) -> bool:
        return False

    def list_documents(self, source_key, limit=1000):
        raise SourceFailure("unavailable")


def down(container: Container) -> KnowledgeService:
    return KnowledgeService(
        container.scopes,
        DownBackend(container.backend),
        container.codec,
        container.run_guard,
        container.clock,
    )


# --- 400 -------------------------------------------------------------------------------------------------


def test_a_ref_valid_ref_reads(stable):
    page = read(stable, ref_of(stable))
    assert BODY.encode().startswith(page["content"].encode()) and page["next_cursor"]


@pytest.mark.parametrize(
    "mangle",
    [
        tamper,
        lambda r: r + "x",
        lambda r: r.split(".")[0],
        lambda r: "not-a-ref",
        lambda r: r.replace(".", ".."),
        lambda r: "é" + r,
    ],
)
def test_a_ref_bad_mac_or_malformed_is_400(stable, mangle):
    assert refused(read, stable, mangle(ref_of(stable))) == INVALID


@pytest.mark.parametrize(
    "change", [{"client_id": "c2"}, {"session_id": "s2"}, {"subject": "u2"}, {"on_behalf_of": "someone"}]
)
def test_a_ref_other_identity_is_400(stable, change):
    assert refused(read, stable, ref_of(stable), principal=PRINCIPAL.model_copy(update=change)) == INVALID


def test_a_ref_other_route_is_400(stable):
    assert refused(read, stable, ref_of(stable, route=ROUTE), route=ROUTE_2) == INVALID


def test_a_ref_other_run_is_400(stable):
    run_1, run_2 = new_run(stable), new_run(stable)
    ref = ref_of(stable, run_id=run_1)
    assert read(stable, ref, run_id=run_1)["run_id"] == run_1
    assert refused(read, stable, ref, run_id=run_2) == INVALID
    assert refused(read, stable, ref) == INVALID
    assert refused(read, stable, ref_of(stable), run_id=run_1) == INVALID


def test_a_ref_tampered_cursor_or_cursor_of_another_ref_is_400(stable):
    ref = ref_of(stable)
    cursor = read(stable, ref)["next_cursor"]
    assert refused(read, stable, ref, cursor=tamper(cursor)) == INVALID
    assert refused(read, stable, ref, cursor=ref) == INVALID
    other = ref_of(stable, route=ROUTE_2)
    assert refused(read, stable, other, cursor=cursor, route=ROUTE_2) == INVALID


# --- 410 -------------------------------------------------------------------------------------------------


def test_a_ref_expired_is_410_at_300_seconds(world, clock):
    ref = ref_of(world)
    cursor = read(world, ref)["next_cursor"]
    clock.advance(299)
    read(world, ref, cursor=cursor)
    clock.advance(1)
    assert refused(read, world, ref) == EXPIRED
    assert refused(read, world, ref, cursor=cursor) == EXPIRED


# --- 409 scope -------------------------------------------------------------------------------------------


def test_a_ref_workspace_switched_to_another_agent_is_scope_changed(world):
    ref = ref_of(world)
    world.admin.set_workspace(ROUTE, "verify-agent@2.0.0")
    assert refused(read, world, ref) == SCOPE_CHANGED
    # Rollback restores the identical scope, and with it the same revision.
    world.admin.set_workspace(ROUTE, "verify-agent@1.0.0")
    assert read(world, ref)["content"]


@pytest.mark.parametrize("source", [A, B])
def test_a_ref_source_disabled_is_scope_changed(world, source):
    ref = ref_of(world)
    revision = world.knowledge.capabilities(PRINCIPAL, ROUTE).wire()["knowledge_scope_revision"]
    world.admin.set_source_enabled(source, False)
    assert world.knowledge.capabilities(PRINCIPAL, ROUTE).wire()["knowledge_scope_revision"] != revision
    assert refused(read, world, ref) == SCOPE_CHANGED


# --- 409 document ----------------------------------------------------------------------------------------


def test_a_ref_document_replaced_is_changed_and_the_new_body_needs_a_new_ref(world):
    ref = ref_of(world)
    cursor = read(world, ref)["next_cursor"]
    world.admin.put_documents(
        [Document(acl=ACL, source_key=A, doc_id="d1", title="verify doc", body="zzverify v2 body")]
    )
    assert refused(read, world, ref) == CHANGED
    assert refused(read, world, ref, cursor=cursor) == CHANGED
    assert read(world, ref_of(world))["content"] == "zzverify v2 body"


def test_a_ref_title_change_is_a_new_revision(world):
    ref = ref_of(world)
    world.admin.put_documents([Document(acl=ACL, source_key=A, doc_id="d1", title="renamed", body=BODY)])
    assert refused(read, world, ref) == CHANGED


def test_a_ref_document_deleted_is_changed(world):
    ref = ref_of(world)
    world.admin.delete_document(A, "d1")
    assert refused(read, world, ref) == CHANGED


def test_a_ref_document_disabled_is_changed(world):
    ref = ref_of(world)
    world.admin.set_document_status(A, "d1", "disabled")
    assert refused(read, world, ref) == CHANGED
    world.admin.set_document_status(A, "d1", "ready")
    assert read(world, ref)["content"]


def test_a_ref_document_no_longer_visible_is_changed(world):
    ref = ref_of(world)
    world.admin.put_documents(
        [
            Document(
                source_key=A,
                doc_id="d1",
                title="verify doc",
                body=BODY,
                acl=DocumentAcl(tenant="t", subjects=["someone-else"]),
            )
        ]
    )
    assert refused(read, world, ref) == CHANGED


# --- 503 -------------------------------------------------------------------------------------------------


def test_a_ref_backend_down_on_read_is_503_without_internals(world):
    ref = ref_of(world)
    with pytest.raises(KnowledgeError) as info:
        read(world, ref, service=down(world))
    assert (info.value.status, info.value.code) == UNAVAILABLE
    assert "internal" not in info.value.message and "9200" not in info.value.message


# --- precedence ------------------------------------------------------------------------------------------


def test_a_ref_tampered_and_expired_is_400(world, clock):
    ref = ref_of(world)
    clock.advance(600)
    assert refused(read, world, tamper(ref)) == INVALID


def test_a_ref_other_identity_and_expired_is_400(world, clock):
    ref = ref_of(world)
    clock.advance(600)
    assert refused(read, world, ref, principal=PRINCIPAL.model_copy(update={"subject": "x"})) == INVALID


def test_a_ref_expired_and_scope_changed_is_410(world, clock):
    ref = ref_of(world)
    world.admin.set_workspace(ROUTE, "verify-agent@2.0.0")
    clock.advance(300)
    assert refused(read, world, ref) == EXPIRED


def test_a_ref_expired_and_document_changed_is_410(world, clock):
    ref = ref_of(world)
    world.admin.delete_document(A, "d1")
    clock.advance(300)
    assert refused(read, world, ref) == EXPIRED


def test_a_ref_scope_changed_and_document_changed_is_scope_changed(world):
    ref = ref_of(world)
    world.admin.delete_document(A, "d1")
    world.admin.set_source_enabled(B, False)
    assert refused(read, world, ref) == SCOPE_CHANGED


def test_a_ref_scope_changed_and_backend_down_is_scope_changed(world):
    ref = ref_of(world)
    world.admin.set_workspace(ROUTE, "verify-agent@2.0.0")
    assert refused(read, world, ref, service=down(world)) == SCOPE_CHANGED


def test_a_ref_tampered_cursor_and_scope_changed_is_400(world):
    ref = ref_of(world)
    cursor = read(world, ref)["next_cursor"]
    world.admin.set_workspace(ROUTE, "verify-agent@2.0.0")
    assert refused(read, world, ref, cursor=tamper(cursor)) == INVALID
