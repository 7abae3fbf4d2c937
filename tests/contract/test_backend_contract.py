"""The backend contract (A-SEARCH, A-READ, A-REF, R-ADMIN ingestion), asserted identically on the
embedded backends and the real ones: search and hint shape, reads and read chains, refs, ingest, replace,
delete, disable, minScore thresholds, ACL, topK, roll-up to parent documents, multi-source merge."""

from __future__ import annotations

from dataclasses import replace

import pytest
from knowledge_core.domain.analyzer import unique_terms
from knowledge_core.domain.citing import in_context
from knowledge_core.domain.errors import (
    KnowledgeChanged,
    NotFound,
    ReferenceExpired,
    ReferenceInvalid,
)
from knowledge_core.domain.models import Document, DocumentAcl, Principal, Viewer
from knowledge_core.domain.passages import split_passages, stored_passages
from knowledge_core.domain.summary import focused_excerpt
from knowledge_core.ports import QueryAnalysis, SourceQuery
from knowledge_core.services.knowledge import SUMMARY_MAX_BYTES

from tests.contract.conftest import PRINCIPAL, World, doc

HINT_KEYS = {"ref", "title", "summary", "revision", "score", "expires_at"}
GATEWAY_ZH = (
    "网关离线排查",
    "当网关离线时，先检查电源指示灯，再确认上行网络与 MQTT 连接状态。\n\n"
    "如果诊断日志显示证书过期，请在控制台重新签发设备证书。",
)
WEBHOOK_EN = (
    "Webhook signature verification",
    "Every webhook request carries an HMAC signature header. "
    "Verify the signature with your signing secret before trusting the payload.\n\n"
    "Reject requests whose timestamp is older than five minutes to stop replays.",
)
BILLING_EN = (
    "Billing and invoices",
    "Invoices are issued monthly. Usage above the plan quota is billed "
    "per device-hour at the end of the cycle.",
)


@pytest.fixture
def kb(world: World) -> tuple[World, str]:
    (key,) = world.publish({"docs": {"topK": 5}})
    world.ingest(doc(key, "gw", *GATEWAY_ZH), doc(key, "hook", *WEBHOOK_EN), doc(key, "bill", *BILLING_EN))
    return world, key


# --- search ---------------------------------------------------------------------------------------------


def test_a_search_english_query_finds_the_document_with_exact_hint_shape(kb):
    world, _ = kb
    body = world.search("webhook signature")
    assert body["status"] == "ok" and body["truncated"] is False and body["trust"] == "reference_only"
    hint = body["hints"][0]
    assert set(hint) == HINT_KEYS
    assert hint["title"] == WEBHOOK_EN[0] and hint["score"] > 0
    assert "signature" in hint["summary"].lower()


def test_a_search_chinese_query_finds_the_chinese_document(kb):
    world, _ = kb
    hints = world.search("网关离线怎么办？")["hints"]
    assert hints and hints[0]["title"] == GATEWAY_ZH[0]


def test_a_search_summary_is_the_excerpt_of_the_matching_passage(world):
    (key,) = world.publish({"long": {}})
    paras = [
        f"Paragraph {i} about routine maintenance windows and general housekeeping. " * 8 for i in range(6)
    ]
    paras[4] = "The zebracorn failover procedure promotes the standby replica within thirty seconds. " * 4
    world.ingest(doc(key, "long", "Operations handbook", "\n\n".join(paras)))
    hint = world.search("zebracorn failover")["hints"][0]
    passages = split_passages("\n\n".join(paras))
    best = next(p for p in passages if "zebracorn" in p)
    # The passage's best-matching sentence window in the hint's bytes (domain.summary).
    assert hint["summary"] == focused_excerpt(best, unique_terms("zebracorn failover"), SUMMARY_MAX_BYTES)
    assert "The zebracorn failover procedure promotes the standby replica" in hint["summary"]


def test_a_search_nothing_above_threshold_is_ok_and_empty(kb):
    world, _ = kb
    body = world.search("quaternion spectroscopy")
    assert body == body | {"status": "ok", "hints": [], "truncated": False}


def test_a_search_limit_bounds_the_hints(kb):
    world, _ = kb
    assert len(world.search("webhook invoices 网关", limit=1)["hints"]) == 1
    assert len(world.search("webhook invoices 网关", limit=3)["hints"]) == 3


# --- read and refs -----------------------------------------------------------------------------------------


def test_a_read_returns_the_body_of_the_hit(kb):
    world, _ = kb
    hint = world.search("webhook signature")["hints"][0]
    page = world.read(hint["ref"])
    assert page["content"] == WEBHOOK_EN[1] and page["revision"] == hint["revision"]
    assert page["title"] == WEBHOOK_EN[0] and page["next_cursor"] is None and page["truncated"] is False


def test_a_read_chain_of_a_large_mixed_document_reproduces_the_body(world):
    (key,) = world.publish({"big": {}})
    body = "\n\n".join(f"第{i}节：设备固件升级说明 firmware upgrade step {i} 😀 " * 12 for i in range(120))
    world.ingest(doc(key, "big", "固件升级 firmware manual", body))
    hint = world.search("firmware upgrade 固件")["hints"][0]
    content, pages = world.read_all(hint["ref"])
    assert 40_000 < len(body.encode("utf-8")) < 131072
    assert content == body.encode("utf-8") and pages > 10


def test_a_ref_tampered_is_invalid_and_expired_after_300s(kb):
    world, _ = kb
    ref = world.search("invoices")["hints"][0]["ref"]
    with pytest.raises(ReferenceInvalid):
        world.read(ref[:-2] + ("AA" if not ref.endswith("AA") else "BB"))
    world.clock.advance(301)
    with pytest.raises(ReferenceExpired):
        world.read(ref)


def test_a_ref_read_under_another_identity_is_invalid(kb):
    world, _ = kb
    ref = world.search("invoices")["hints"][0]["ref"]
    other = PRINCIPAL.model_copy(update={"session_id": "s-2"})
    with pytest.raises(ReferenceInvalid):
        world.read(ref, principal=other)


# --- ingest, replace, delete, disable -------------------------------------------------------------------


def test_r_admin_ingested_documents_are_searchable_when_ingest_returns(world):
    (key,) = world.publish({"fresh": {}})
    for i in range(3):
        world.ingest(doc(key, f"d{i}", f"Note {i}", f"marmalade{i} recipe with oranges"))
        assert world.search(f"marmalade{i}")["hints"][0]["title"] == f"Note {i}"


def test_r_admin_replace_never_serves_stale_passages_or_old_body(world):
    (key,) = world.publish({"rep": {}})
    old_body = "\n\n".join(f"Section {i}: the obsoletium procedure, step {i}. " * 12 for i in range(10))
    world.ingest(doc(key, "d", "Procedure", old_body))
    old = world.search("obsoletium")["hints"][0]
    assert len(split_passages(old_body)) > 3
    world.ingest(doc(key, "d", "Procedure", "The renovatium procedure replaces everything."))
    assert world.search("obsoletium")["hints"] == []  # no passage of the old version matches
    new = world.search("renovatium")["hints"]
    assert [h["title"] for h in new] == ["Procedure"] and new[0]["revision"] != old["revision"]
    with pytest.raises(KnowledgeChanged):  # never a newer body under an old ref
        world.read(old["ref"])
    assert world.read(new[0]["ref"])["content"] == "The renovatium procedure replaces everything."


def test_r_admin_delete_removes_document_and_its_passages(kb):
    world, key = kb
    ref = world.search("invoices")["hints"][0]["ref"]
    world.c.admin.delete_document(key, "bill")
    assert all(h["title"] != BILLING_EN[0] for h in world.search("invoices monthly")["hints"])
    assert world.c.backend.get_document(key, "bill") is None
    with pytest.raises(KnowledgeChanged):
        world.read(ref)
    with pytest.raises(NotFound):
        world.c.admin.delete_document(key, "bill")


def test_r_admin_disable_hides_and_enable_restores(kb):
    world, key = kb
    ref = world.search("invoices")["hints"][0]["ref"]
    world.c.admin.set_document_status(key, "bill", "disabled")
    assert world.search("invoices")["hints"] == []
    with pytest.raises(KnowledgeChanged):
        world.read(ref)
    world.c.admin.set_document_status(key, "bill", "ready")
    hints = world.search("invoices")["hints"]
    assert [h["title"] for h in hints] == [BILLING_EN[0]]
    assert world.read(ref)["content"] == BILLING_EN[1]  # same revision: the old ref is good again
    with pytest.raises(NotFound):
        world.c.admin.set_document_status(key, "missing", "disabled")


def test_r_admin_source_disabled_makes_search_disabled(kb):
    world, key = kb
    world.c.admin.set_source_enabled(key, False)
    assert world.search("invoices")["status"] == "disabled"


# --- thresholds, topK, roll-up, merge -------------------------------------------------------------------


def _scored_world(world: World, fields: dict[str, dict]) -> list[str]:
    keys = world.publish(fields)
    for key in keys:
        world.ingest(
            doc(key, "strong", "Quokka care", "Quokka quokka quokka: feeding the quokka daily."),
            doc(
                key,
                "weak",
                "Wildlife notes",
                "Among many animals of the island, one quokka was seen."
                " The island also hosts lizards, gulls, snakes and seals in large numbers.",
            ),
        )
    return keys


def test_a_search_min_score_drops_hits_and_is_never_lowered(world):
    (probe,) = _scored_world(world, {"probe": {"minScore": 0}})
    hits = world.c.backend.search(
        [SourceQuery(probe, 5, 0.0)], QueryAnalysis("quokka"), Viewer(tenant="acme", subject="a")
    )[0].hits
    scores = {h.doc_id: h.score for h in hits}
    assert scores["strong"] > scores["weak"] > 0
    between = (scores["strong"] + scores["weak"]) / 2
    _scored_world(world, {"probe@2.0.0": {"minScore": between}})
    assert [h["title"] for h in world.search("quokka")["hints"]] == ["Quokka care"]
    _scored_world(world, {"probe@3.0.0": {"minScore": scores["strong"] * 10}})
    body = world.search("quokka")
    assert body["status"] == "ok" and body["hints"] == []


def test_a_search_top_k_per_source_counts_parent_documents(world):
    (key,) = world.publish({"many": {"topK": 2}})
    long_body = "\n\n".join(f"The pangolin migration report, chapter {i}. " * 20 for i in range(8))
    world.ingest(
        doc(key, "long", "Pangolin report", long_body),
        *(doc(key, f"d{i}", f"Pangolin note {i}", f"pangolin sighting number {i}") for i in range(4)),
    )
    hits = world.c.backend.search(
        [SourceQuery(key, 2, 0.0)], QueryAnalysis("pangolin"), Viewer(tenant="acme", subject="a")
    )[0].hits
    assert len(hits) == 2 and len({h.doc_id for h in hits}) == 2  # rolled up: one hit per parent document
    assert len(world.search("pangolin")["hints"]) == 2
    wide = world.c.backend.search(
        [SourceQuery(key, 10, 0.0)], QueryAnalysis("pangolin"), Viewer(tenant="acme", subject="a")
    )
    assert sorted(h.doc_id for h in wide[0].hits) == ["d0", "d1", "d2", "d3", "long"]


def test_a_search_top_k_documents_when_few_documents_hold_the_best_passages(world):
    """A-SEARCH roll-up: `top_k` documents even when a few documents hold more of the best
    passages than the first fetch of passages asks for (OpenSearch: the collapsed second search)."""
    (key,) = world.publish({"deep": {"topK": 8}})
    sections = lambda n: "\n\n".join(  # noqa: E731
        f"## Part {i}\n\nThe axolotl axolotl regrows its limbs, part {i}." for i in range(n)
    )
    filler = " The pond also holds frogs, newts, snails, reeds, lilies and many small fish of every kind."
    world.ingest(
        *(doc(key, f"book{b}", f"Axolotl book {b}", sections(12)) for b in range(3)),
        *(
            doc(key, f"note{i}", f"Pond note {i}", f"One axolotl was seen {i} times.{filler * 3}")
            for i in range(6)
        ),
    )
    hits = world.c.backend.search(
        [SourceQuery(key, 8, 0.0)], QueryAnalysis("axolotl"), Viewer(tenant="acme", subject="a")
    )[0].hits
    assert len(hits) == 8 and len({h.doc_id for h in hits}) == 8
    assert {h.doc_id for h in hits[:3]} == {"book0", "book1", "book2"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_a_search_multi_source_merge_by_raw_score(world):
    a, b = world.publish({"alpha": {"topK": 2}, "beta": {"topK": 2}})
    world.ingest(
        doc(a, "a1", "Alpha okapi guide", "okapi okapi okapi habitat and okapi diet"),
        doc(a, "a2", "Alpha zoo list", "the zoo has an okapi and many other animals like zebras"),
        doc(a, "a3", "Alpha okapi extra", "okapi mention among a lot of unrelated words here"),
        doc(b, "b1", "Beta okapi facts", "okapi facts: the okapi is related to the giraffe"),
    )
    viewer = Viewer(tenant="acme", subject="alice", groups=["eng"])
    per_source = world.c.backend.search(
        [SourceQuery(a, 2, 0.0), SourceQuery(b, 2, 0.0)], QueryAnalysis("okapi"), viewer
    )
    assert [r.key for r in per_source] == [a, b] and all(r.error is None for r in per_source)
    assert len(per_source[0].hits) == 2 and len(per_source[1].hits) == 1
    expected = sorted(
        (h for r in per_source for h in r.hits), key=lambda h: (-h.score, h.source_key, h.doc_id)
    )
    body = world.search("okapi")
    assert body["status"] == "ok"
    assert [h["title"] for h in body["hints"]] == [h.title for h in expected[:3]]
    scores = [h["score"] for h in body["hints"]]
    assert scores == sorted(scores, reverse=True)


# --- ACL ----------------------------------------------------------------------------------------------------


@pytest.fixture
def acl_world(world: World) -> World:
    (key,) = world.publish({"acl": {"topK": 10}})
    world.ingest(
        doc(key, "open", "Open lynx memo", "lynx memo for everyone", shared_tenants=["globex"]),
        doc(key, "tenant", "Tenant lynx memo", "lynx memo for the acme tenant", tenant="acme"),
        doc(key, "other", "Other tenant lynx memo", "lynx memo for globex", tenant="globex"),
        doc(key, "alice", "Alice lynx memo", "lynx memo only for alice", tenant="acme", subjects=["alice"]),
        doc(key, "bob", "Bob lynx memo", "lynx memo only for bob", tenant="acme", subjects=["bob"]),
        doc(key, "eng", "Eng lynx memo", "lynx memo for engineering", groups=["eng"]),
        doc(key, "ops", "Ops lynx memo", "lynx memo for operations", groups=["ops"]),
    )
    return world


def _visible(world: World, viewer: Viewer) -> set[str]:
    key = world.key("acl")
    return {
        h.doc_id
        for h in world.c.backend.search([SourceQuery(key, 10, 0.0)], QueryAnalysis("lynx memo"), viewer)[
            0
        ].hits
    }


def test_a_search_acl_mirrors_document_acl_visibility(acl_world):
    assert _visible(acl_world, Viewer(tenant="acme", subject="alice", groups=["eng"])) == {
        "open",
        "tenant",
        "alice",
        "eng",
    }
    assert _visible(acl_world, Viewer(tenant="acme", subject="bob", groups=["ops", "x"])) == {
        "open",
        "tenant",
        "bob",
        "ops",
    }
    # SPEC §1 (S3): "open" is acme's, shared with globex by an explicit list; before, a document
    # without a tenant was visible to every tenant.
    assert _visible(acl_world, Viewer(tenant="globex", subject="alice")) == {"open", "other"}
    assert _visible(acl_world, Viewer(tenant="initech", subject="alice")) == set()


def test_S3_a_document_without_a_tenant_is_visible_to_no_one_until_migrated(world):
    (key,) = world.publish({"legacy": {"topK": 10}})
    legacy = Document(
        source_key=key, doc_id="legacy", title="Legacy okapi memo", body="okapi memo from before"
    )
    world.ingest(legacy, doc(key, "owned", "Owned okapi memo", "okapi memo of acme"))
    for tenant in ("acme", "globex", ""):
        found = world.c.backend.search(
            [SourceQuery(key, 10, 0.0)], QueryAnalysis("okapi memo"), Viewer(tenant=tenant, subject="a")
        )
        assert "legacy" not in {h.doc_id for h in found[0].hits}
    assert world.c.backend.untenanted_documents(key) == ["legacy"]
    assert world.c.admin.migrate_tenant(key, "acme", apply=False) == ["legacy"]  # a dry run changes nothing
    assert world.c.backend.untenanted_documents(key) == ["legacy"]
    assert world.c.admin.migrate_tenant(key, "acme", apply=True) == ["legacy"]
    assert world.c.backend.untenanted_documents(key) == []
    found = world.c.backend.search(
        [SourceQuery(key, 10, 0.0)], QueryAnalysis("okapi memo"), Viewer(tenant="acme", subject="a")
    )
    assert {h.doc_id for h in found[0].hits} == {"legacy", "owned"}
    migrated = world.c.backend.get_document(key, "legacy")
    assert migrated is not None and migrated.acl.tenant == "acme" and migrated.revision == legacy.revision


def test_a_search_acl_on_behalf_of_is_the_viewer_and_reads_recheck(acl_world):
    agent = Principal(
        client_id="contract",
        session_id="s-1",
        subject="svc-agent",
        on_behalf_of="bob",
        tenant="acme",
        routes=["kb"],
    )
    titles = {h["title"] for h in acl_world.search("lynx memo only", principal=agent)["hints"]}
    assert "Bob lynx memo" in titles and "Alice lynx memo" not in titles
    ref = next(
        h["ref"]
        for h in acl_world.search("lynx memo only", principal=agent)["hints"]
        if h["title"] == "Bob lynx memo"
    )
    assert acl_world.read(ref, principal=agent)["title"] == "Bob lynx memo"


def test_a_search_acl_hidden_documents_do_not_crowd_out_visible_ones(world):
    (key,) = world.publish({"crowd": {"topK": 1}})
    world.ingest(
        *(
            doc(key, f"secret{i}", f"Secret ibex {i}", "ibex ibex ibex ibex secret", subjects=["bob"])
            for i in range(12)
        ),
        doc(key, "public", "Public ibex", "one ibex among other words in a longer public sentence"),
    )
    assert [h["title"] for h in world.search("ibex")["hints"]] == ["Public ibex"]


def test_r_admin_list_documents_of_a_source_without_bodies(world):
    """The console's document list: every document of one source (any status), by doc id, sizes in chars."""
    (key, other) = world.publish({"listed": {}, "other": {}})
    world.ingest(
        doc(key, "b-doc", "Second", "网关离线排查"),
        doc(key, "a-doc", "First", "x" * 1234),
        doc(other, "c-doc", "Elsewhere", "elsewhere"),
    )
    world.c.admin.set_document_status(key, "b-doc", "disabled")
    listed = world.c.admin.list_documents(key)
    assert [(d.doc_id, d.title, d.status, d.chars) for d in listed.documents] == [
        ("a-doc", "First", "ready", 1234),
        ("b-doc", "Second", "disabled", 6),
    ]
    assert not listed.truncated and all(d.revision.startswith("sha256:") for d in listed.documents)
    assert world.c.admin.list_documents(key, limit=1).truncated


def test_i_ingest_document_ids_list_a_source_under_a_prefix(world):
    (key, other) = world.publish({"ids": {}, "ids-other": {}})
    world.ingest(
        doc(key, "guide-a", "A", "alpha"),
        doc(key, "guide-b", "B", "beta"),
        doc(key, "notes-c", "C", "gamma"),
        doc(other, "guide-z", "Z", "zeta"),
    )
    assert world.c.backend.document_ids(key) == ["guide-a", "guide-b", "notes-c"]
    assert world.c.backend.document_ids(key, "guide-") == ["guide-a", "guide-b"]
    assert world.c.backend.document_ids(key, "none-") == []


def test_i_ingest_pdf_passages_name_their_pages_in_hints_and_sources(world):
    """A paged document (PDF: `structured_source.page_starts`): each passage knows its pages; the hit's
    source says them without the offsets, and the hint's summary starts with "p. N"."""
    (key,) = world.publish({"paged": {}})
    pages = [f"Page {n} is about " + ("pumps and seals. " * 60) for n in (1, 2)]
    pages.append("Page 3 explains the zygomorphic flange torque. " + "Other words here. " * 10)
    body, starts = "", []
    for text in pages:
        starts.append(len(body))
        body += text + "\n\n"
    world.ingest(
        Document(
            source_key=key,
            doc_id="manual",
            title="Manual",
            body=body,
            structured_source={"uri": "file:///m.pdf", "format": "pdf", "page_starts": starts},
            acl=DocumentAcl(tenant=PRINCIPAL.tenant),
        )
    )
    hint = world.search("zygomorphic flange")["hints"][0]
    assert hint["summary"].startswith("p. 3: ")
    [result] = world.c.backend.search(
        [SourceQuery(key, 1, 0.0)],
        QueryAnalysis("zygomorphic flange"),
        Viewer(tenant=PRINCIPAL.tenant, subject="s"),
    )
    assert result.hits[0].structured_source == {"uri": "file:///m.pdf", "format": "pdf", "pages": [3]}
    stored = world.c.backend.get_document(key, "manual")
    assert stored is not None and stored.structured_source["page_starts"] == starts


def test_neighbour_passages_are_the_stored_passages_around_a_hit(world):
    """What a reference quoting its passage in context reads (domain.citing.in_context): the stored
    passages numbered within a radius of a hit's own (`Hit.passage_no`, set by every backend), of the hit's
    revision — on every backend the passages the one splitter cuts from the document."""
    (key,) = world.publish({"guide": {}})
    paragraphs = [f"Paragraph {n} " + ("about pumps and seals. " * 40) for n in range(8)]
    paragraphs[5] += "The zygomorphic flange torque is set here."
    document = doc(key, "guide", "Guide", "\n\n".join(paragraphs))
    world.ingest(document)
    [result] = world.c.backend.search(
        [SourceQuery(key, 1, 0.0)],
        QueryAnalysis("zygomorphic flange"),
        Viewer(tenant=PRINCIPAL.tenant, subject="s"),
    )
    hit = result.hits[0]
    stored = stored_passages(document.body, document.title, None)
    assert len(stored) == 8 and hit.passage == stored[5].text and hit.passage_no == 5
    around = world.c.backend.neighbour_passages([hit], 2)
    assert around == {(key, "guide"): stored[3:8]}
    assert world.c.backend.neighbour_passages([replace(hit, revision="older")], 2) == {}


def test_neighbours_carry_their_sections_and_a_quote_stays_in_its_own(world):
    """A sectioned document (Markdown headings, as HTML and DOCX headings become): every backend returns
    each neighbour with its section (heading path), so a quote in context (domain.citing.in_context) takes
    the cited passage's section only — neither the section before nor the one after. (A Chinese section
    the size of one passage, beside short ones: a quote that joined the section before began with the
    "年度任务" list.)"""
    (key,) = world.publish({"manual": {}})
    dosing = (
        "".join(f"第{i}条加药说明适用于给水泵。" for i in range(25)) + "亚硫酸盐保持在二十到四十毫克每升。"
    )
    body = (
        "# 锅炉指南\n\n## 每周检查\n\n每周测试低水位切断装置。\n\n"
        "## 年度任务\n\n- 更换燃烧器喷嘴。\n- 按设定压力测试安全阀。\n\n"
        f"## 水处理\n\npH 保持在 10.5 到 11.5 之间。\n\n{dosing}\n\n## 联系方式\n\n请拨打服务热线。"
    )
    document = doc(key, "manual", "锅炉指南", body)
    world.ingest(document)
    [result] = world.c.backend.search(
        [SourceQuery(key, 1, 0.0)], QueryAnalysis("亚硫酸盐"), Viewer(tenant=PRINCIPAL.tenant, subject="s")
    )
    hit = result.hits[0]
    stored = stored_passages(document.body, document.title, None)
    assert [p.heading_path for p in stored] == ["每周检查", "年度任务", "水处理", "联系方式"]
    assert hit.passage_no == 2 and hit.passage == stored[2].text
    around = world.c.backend.neighbour_passages([hit], 4)
    assert around == {(key, "manual"): stored}
    assert in_context(hit, around[(key, "manual")]).passage == stored[2].text  # its section alone
