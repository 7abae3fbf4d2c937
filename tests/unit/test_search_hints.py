"""A-SEARCH: bounded hints (4096 bytes, titles <= 256 code points, exact hint shape), limit, minScore,
status ok / disabled / unavailable / partial, and ACL (the viewer is on_behalf_of when given)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.models import (
    AgentDefinition,
    Document,
    DocumentAcl,
    Principal,
    SourceDefinition,
    Viewer,
)
from knowledge_core.domain.wire import ReadRequest, SearchRequest
from knowledge_core.ports import QueryAnalysis, SearchBackend, SourceQuery, SourceResult
from knowledge_core.services.knowledge import KnowledgeService

from tests.conftest import FakeClock, embedded_container

ROUTE = "hints"
A, B = "src-a@1.0.0", "src-b@1.0.0"
PRINCIPAL = Principal(client_id="c", session_id="s", subject="u", tenant="t", routes=[ROUTE])
HINT_KEYS = {"ref", "title", "summary", "revision", "score", "expires_at"}


def dumps(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def setup_world(container: Container, sources: dict[str, float], docs: list[Document] = ()) -> Container:
    """Publish `sources` (key -> minScore), an agent allowing them all, the workspace, and `docs`."""
    admin = container.admin
    for key, min_score in sources.items():
        id_, version = key.split("@")
        admin.publish_source(
            SourceDefinition.model_validate({"id": id_, "version": version, "minScore": min_score})
        )
    admin.publish_agent(
        AgentDefinition.model_validate(
            {
                "id": "hint-agent",
                "version": "1.0.0",
                "modelProfile": {"candidates": [{"model": "m"}]},
                "allowedKnowledge": [{"id": k.split("@")[0], "version": k.split("@")[1]} for k in sources],
            }
        )
    )
    admin.set_workspace(ROUTE, "hint-agent@1.0.0")
    if docs:
        admin.put_documents(list(docs))
    return container


def search(
    container: Container,
    query: str,
    limit: int = 3,
    principal: Principal = PRINCIPAL,
    service: KnowledgeService | None = None,
) -> dict:
    return (
        (service or container.knowledge)
        .search(principal, ROUTE, SearchRequest(query=query, limit=limit))
        .wire()
    )


class FailingBackend(SearchBackend):
    """The real backend, except that searches of the `failing` sources (all when None) fail."""

    def __init__(self, inner: SearchBackend, failing: set[str] | None = None) -> None:
        self.inner = inner
        self.failing = failing

    def search(self, queries: list[SourceQuery], query: QueryAnalysis, viewer: Viewer) -> list[SourceResult]:
        real = {r.key: r for r in self.inner.search(queries, query, viewer)}
        return [
            SourceResult(q.key, error=SourceFailure("unavailable"))
            if self.failing is None or q.key in self.failing
            else real[q.key]
            for q in queries
        ]

    def get_document(self, source_key, doc_id):
        return self.inner.get_document(source_key, doc_id)

    def get_documents(self, keys):
        return self.inner.get_documents(keys)

    def document_states(self, keys):
        return self.inner.document_states(keys)

    def put_documents(self, documents):
        return self.inner.put_documents(documents)

    def delete_document(self, source_key, doc_id):
        return self.inner.delete_document(source_key, doc_id)

    def set_document_status(self, source_key, doc_id, status):
        return self.inner.set_document_status(source_key, doc_id, status)

    def healthy(self, timeout_s: float = 1.0) -> bool:
        return self.inner.healthy(timeout_s)

    def list_documents(self, source_key, limit=1000):
        return self.inner.list_documents(source_key, limit)


def service_with(container: Container, backend: SearchBackend) -> KnowledgeService:
    return KnowledgeService(container.scopes, backend, container.codec, container.run_guard, container.clock)


def doc(source: str, doc_id: str, title: str, body: str, **acl: object) -> Document:
    """A document of the principal's tenant unless `tenant=` says otherwise (it always names one)."""
    acl = {"tenant": PRINCIPAL.tenant} | acl
    return Document(source_key=source, doc_id=doc_id, title=title, body=body, acl=DocumentAcl(**acl))


# --- bytes, titles, shape ----------------------------------------------------------------------------

HOSTILE_TITLES = {
    "emoji": "zzbig " + "😀🫠🚀" * 120,
    "control": "zzbig " + "".join(chr(c) for c in range(0x20)) * 12,
    "mixed": "zzbig " + ('\x00😀\u2028"\\中\u0301' * 60),
}
CJK_PASSAGE = "设备安装规范要求网关在离线状态下自动重连，zzbig 并记录诊断日志。" * 40


@pytest.fixture
def hostile(tmp_path: Path, clock: FakeClock) -> Container:
    docs = [
        doc(A, f"hostile-{k}", t, (CJK_PASSAGE + '\x01\x02"\\' + "😀" * 200) * 2)
        for k, t in HOSTILE_TITLES.items()
    ]
    return setup_world(embedded_container(tmp_path, clock), {A: 0.0}, docs)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_a_search_hostile_hints_fit_4096_bytes(hostile, limit):
    result = search(hostile, "zzbig 网关离线", limit=limit)
    assert len(dumps(result)) <= 4096
    assert result["status"] == "ok" and 1 <= len(result["hints"]) <= limit
    # One hostile hint fits on its own; two or three do not, so some are dropped or shortened.
    assert result["truncated"] is (limit > 1)
    for hint in result["hints"]:
        assert set(hint) == HINT_KEYS
        assert len(hint["title"]) <= 256
        assert hint["title"] in {t[:256] for t in HOSTILE_TITLES.values()}


def test_a_search_hint_shape_and_values(hostile, clock):
    result = search(hostile, "zzbig", limit=1)
    assert set(result) == {
        "schema",
        "route",
        "knowledge_scope_revision",
        "trust",
        "status",
        "hints",
        "truncated",
    }
    assert result["schema"] == "bailing.agent-knowledge-search.v1" and result["trust"] == "reference_only"
    assert result["route"] == ROUTE
    hint = result["hints"][0]
    stored = hostile.backend.get_document(
        A, next(f"hostile-{k}" for k, t in HOSTILE_TITLES.items() if t[:256] == hint["title"])
    )
    assert hint["revision"] == stored.revision
    assert isinstance(hint["score"], float) and hint["score"] > 0
    expires = datetime.strptime(hint["expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert expires.timestamp() == int(clock.now()) + 300
    # At most SUMMARY_MAX_BYTES of UTF-8 (960: 320 CJK characters), ellipses included.
    assert hint["summary"] and len(hint["summary"].encode("utf-8")) <= 960


def test_a_search_small_hints_are_not_truncated(tmp_path, clock):
    docs = [
        doc(A, f"d{i}", f"gateway note {i}", f"zzsmall gateway offline checklist item {i}") for i in range(5)
    ]
    container = setup_world(embedded_container(tmp_path, clock), {A: 0.0}, docs)
    for limit in (1, 2, 3):
        result = search(container, "zzsmall", limit=limit)
        assert len(result["hints"]) == limit and result["truncated"] is False
        assert all(h["summary"].startswith("zzsmall gateway") for h in result["hints"])
    default = container.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query="zzsmall")).wire()
    assert len(default["hints"]) == 3


def test_a_search_hint_summary_of_a_table_document_reads_as_text(tmp_path, clock):
    """A hint (and so the console's result card) shows a table's rows as `key: value` text, not pipes."""
    body = (
        "## 升级策略 Escalation\n\n| 优先级 Priority | L1 → L2 最长停留 |\n|---|---|\n"
        "| P1 紧急 | 15 分钟 minutes |\n| P2 重要 | 1 小时 hour |\n\n"
        "## Rate limits\n\n| Tier | Requests per minute | Burst |\n|---|---|---|\n"
        "| Starter | 100 | 20 |\n| Enterprise | 5000 | 800 |\n"
    )
    container = setup_world(embedded_container(tmp_path, clock), {A: 0.0}, [doc(A, "t1", "SLA tables", body)])
    summaries = {h["summary"] for h in search(container, "Escalation P2 Enterprise burst", limit=3)["hints"]}
    summaries |= {h["summary"] for h in search(container, "Priority 优先级", limit=3)["hints"]}
    assert summaries and not any("|" in s for s in summaries)
    assert any("P2 重要: 1 小时 hour" in s for s in summaries)
    assert any("Enterprise — Requests per minute: 5000; Burst: 800" in s for s in summaries)


def test_a_search_hint_ref_reads_the_hit_document(hostile):
    hint = search(hostile, "zzbig", limit=1)["hints"][0]
    page = hostile.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=hint["ref"], max_bytes=4096)).wire()
    assert page["revision"] == hint["revision"] and page["title"] == hint["title"]
    assert len(dumps(page)) <= 4096


# --- minScore -----------------------------------------------------------------------------------------

# Unrelated documents keep `zzscore` rare, so BM25 gives it a real weight. The three best score within
# the relevance cut of each other (domain.relevance), so minScore alone decides what is dropped.
SCORED_DOCS = [
    doc(A, f"m{i}", f"minscore doc {i}", "zzscore " * (8 - i) + "filler text " * (i * 2)) for i in range(6)
] + [doc(A, f"other{i}", f"other {i}", f"unrelated words {i}") for i in range(30)]


def _scores(tmp_path: Path, clock: FakeClock, min_score: float) -> list[float]:
    directory = tmp_path / f"min-score-{min_score}"
    directory.mkdir()
    container = setup_world(embedded_container(directory, clock), {A: min_score}, SCORED_DOCS)
    return [h["score"] for h in search(container, "zzscore", limit=3)["hints"]]


def test_a_search_min_score_drops_hits_and_is_never_lowered(tmp_path, clock):
    # Same corpus in two fresh indexes gives the same BM25 scores; only the source threshold differs.
    scores = _scores(tmp_path, clock, 0.0)
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and len(set(scores)) == 3
    threshold = (scores[0] + scores[1]) / 2
    assert _scores(tmp_path, clock, threshold) == scores[:1]
    container = setup_world(embedded_container(tmp_path, clock), {A: 1e9}, SCORED_DOCS)
    result = search(container, "zzscore")
    assert (result["status"], result["hints"], result["truncated"]) == ("ok", [], False)


# --- status -------------------------------------------------------------------------------------------


@pytest.fixture
def two_sources(tmp_path: Path, clock: FakeClock) -> Container:
    docs = [
        doc(A, "a1", "alpha", "zzstatus from source a"),
        doc(B, "b1", "beta", "zzstatus from source b"),
        doc(A, "a2", "only a", "zzonlya words"),
    ]
    return setup_world(embedded_container(tmp_path, clock), {A: 0.0, B: 0.0}, docs)


def test_a_search_status_ok_with_results_and_ok_with_nothing(two_sources):
    result = search(two_sources, "zzstatus")
    assert result["status"] == "ok" and {h["title"] for h in result["hints"]} == {"alpha", "beta"}
    nothing = search(two_sources, "nonexistentterm")
    assert (nothing["status"], nothing["hints"]) == ("ok", [])


def test_a_search_status_disabled_when_no_source_in_scope(two_sources):
    two_sources.admin.set_source_enabled(A, False)
    assert search(two_sources, "zzstatus")["status"] == "ok"  # B still answers
    two_sources.admin.set_source_enabled(B, False)
    result = search(two_sources, "zzstatus")
    assert (result["status"], result["hints"]) == ("disabled", [])
    two_sources.admin.set_source_enabled(B, True)
    result = search(two_sources, "zzstatus")
    assert result["status"] == "ok" and [h["title"] for h in result["hints"]] == ["beta"]


def test_a_search_status_unavailable_when_every_source_fails(two_sources):
    service = service_with(two_sources, FailingBackend(two_sources.backend))
    result = search(two_sources, "zzstatus", service=service)
    assert (result["status"], result["hints"]) == ("unavailable", [])


def test_a_search_status_partial_when_one_source_fails(two_sources):
    service = service_with(two_sources, FailingBackend(two_sources.backend, {A}))
    result = search(two_sources, "zzstatus", service=service)
    assert result["status"] == "partial" and [h["title"] for h in result["hints"]] == ["beta"]
    # A failure with no hits from the others is still a failure, never "ok, nothing found".
    only_a = search(two_sources, "zzonlya", service=service)
    assert (only_a["status"], only_a["hints"]) == ("partial", [])


# --- ACL ----------------------------------------------------------------------------------------------


@pytest.fixture
def acl_world(tmp_path: Path, clock: FakeClock) -> Container:
    docs = [
        doc(A, "public", "public", "zzacl for the whole tenant"),
        doc(A, "other-tenant", "other tenant", "zzacl zzacl for tenant two", tenant="t2"),
        doc(
            A,
            "for-mallory",
            "mallory only",
            "zzacl zzacl zzacl for mallory",
            tenant="t",
            subjects=["mallory"],
        ),
        doc(A, "for-alice", "alice only", "zzacl zzacl for alice", tenant="t", subjects=["alice"]),
        doc(A, "for-bot", "bot only", "zzacl zzacl for the bot", subjects=["agent-bot"]),
        doc(A, "for-ops", "ops group", "zzacl zzacl for ops", groups=["ops"]),
    ]
    return setup_world(embedded_container(tmp_path, clock), {A: 0.0}, docs)


def _titles(container: Container, principal: Principal) -> set[str]:
    found: set[str] = set()
    for query in ("zzacl", "zzacl tenant", "zzacl mallory alice bot ops whole"):
        found |= {h["title"] for h in search(container, query, 3, principal)["hints"]}
    return found


def test_a_search_acl_restricted_documents_are_never_returned(acl_world):
    assert _titles(acl_world, PRINCIPAL) == {"public"}


def test_a_search_acl_on_behalf_of_is_the_viewer(acl_world):
    bot_for_alice = PRINCIPAL.model_copy(update={"subject": "agent-bot", "on_behalf_of": "alice"})
    assert _titles(acl_world, bot_for_alice) == {"public", "alice only"}
    bot_alone = PRINCIPAL.model_copy(update={"subject": "agent-bot"})
    assert _titles(acl_world, bot_alone) == {"public", "bot only"}
    ops = PRINCIPAL.model_copy(update={"groups": ["ops"]})
    assert _titles(acl_world, ops) == {"public", "ops group"}
    tenant_two = PRINCIPAL.model_copy(update={"tenant": "t2"})
    # SPEC §1 (S3): a document always names its tenant and is never visible to every tenant;
    # before, a document without a tenant was visible to any tenant that could reach the source.
    assert _titles(acl_world, tenant_two) == {"other tenant"}


def test_a_search_acl_many_restricted_hits_do_not_hide_a_visible_one(tmp_path, clock):
    restricted = [
        doc(A, f"secret-{i}", f"secret {i}", "zzcrowd " * 20, subjects=["mallory"]) for i in range(120)
    ]
    visible = doc(A, "visible", "visible", "zzcrowd appears once in a much longer visible document " * 3)
    container = setup_world(embedded_container(tmp_path, clock), {A: 0.0}, [*restricted, visible])
    result = search(container, "zzcrowd")
    assert [h["title"] for h in result["hints"]] == ["visible"]


def test_search_expired_lease_is_unavailable_not_empty(demo_container, clock):
    """R-ROUTE / A-SEARCH: a selected source whose runtime lease expired is not searched and the search
    says `unavailable` — never `ok` with no hints."""
    from knowledge_core.domain.models import Principal, SourceState
    from knowledge_core.domain.wire import SearchRequest

    key = "demo-docs@1.0.0"
    demo_container.state.registry.update_source_state(key, SourceState(lease_until="2000-01-01T00:00:00Z"))
    demo_container.scopes.invalidate()
    principal = Principal(client_id="c", session_id="s", subject="u", tenant="default", routes=["demo"])
    result = demo_container.knowledge.search(principal, "demo", SearchRequest(query="网关离线")).wire()
    assert result["status"] == "unavailable" and result["hints"] == []
    demo_container.state.registry.update_source_state(key, SourceState(lease_until="2999-01-01T00:00:00Z"))
    demo_container.scopes.invalidate()
    result = demo_container.knowledge.search(principal, "demo", SearchRequest(query="网关离线")).wire()
    assert result["status"] == "ok" and result["hints"]
