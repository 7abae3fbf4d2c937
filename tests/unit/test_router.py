"""R-MODE / R-ROUTE / R-TOOL source selection: table-driven routing cases, explicit sources, leases."""

from __future__ import annotations

import pytest
from knowledge_core.domain.errors import ProtocolError, SourceDenied
from knowledge_core.domain.models import AgentDefinition, Source, SourceDefinition, SourceState
from knowledge_core.domain.router import (
    expired_leases,
    lease_expired,
    plan_search,
    plan_startup,
    plan_tool,
    routing_terms,
)
from knowledge_core.domain.scope import KnowledgeScope

NOW = 1_795_953_600.0
SOURCES = {
    "install-docs@1.0.0": {"description": "设备安装规范 device installation guide", "tags": ["安装", "设备"]},
    "billing@1.0.0": {"description": "退款与账单政策 refund and billing policy", "tags": ["billing", "退款"]},
    "monitor-runbook@2.0.0": {"description": "监控告警处理手册 alert runbook", "tags": ["monitor", "告警"]},
    "security@1.0.0": {"description": "SSO SAML single sign-on setup", "tags": ["sso"]},
    "firmware@1.0.0": {"description": "固件升级 firmware upgrade", "tags": ["固件"]},
}
TOOL_MODEL = {"candidates": [{"model": "m", "toolCalling": True}]}


def _source(key: str, **state: object) -> Source:
    id_, _, version = key.partition("@")
    return Source(
        definition=SourceDefinition.model_validate({"id": id_, "version": version, **SOURCES[key]}),
        state=SourceState(**state),
    )


def _ref(key: str) -> dict:
    id_, _, version = key.partition("@")
    return {"id": id_, "version": version}


def _scope(
    routing: dict | None,
    allowed: list[str] | None = None,
    states: dict | None = None,
    published: list[str] | None = None,
) -> KnowledgeScope:
    allowed = allowed if allowed is not None else list(SOURCES)
    definition = {
        "id": "agent",
        "version": "1.0.0",
        "modelProfile": TOOL_MODEL,
        "allowedKnowledge": [_ref(k) for k in allowed],
    }
    if routing is not None:
        definition["knowledgeRouting"] = routing
    agent = AgentDefinition.model_validate(definition)
    published = published if published is not None else list(SOURCES)
    sources = {k: (_source(k, **(states or {}).get(k, {})) if k in published else None) for k in allowed}
    return KnowledgeScope(route="r", agent=agent, sources=sources)


def _rule(key: str, **fields: object) -> dict:
    return {"knowledge": _ref(key), **fields}


def _plan(scope: KnowledgeScope, query: str, context: dict | None = None) -> list[tuple[str, str]]:
    return [(p.key, p.reason) for p in plan_search(scope, query, context)]


# (name, routing, query, trusted context, expected [(key, reason)])
ROUTING_CASES = [
    (
        "auto-description-chinese-bigrams",
        {"mode": "AUTO"},
        "安装规范是什么",
        None,
        [("install-docs@1.0.0", "match")],
    ),
    (
        "auto-description-english-terms",
        {"mode": "AUTO"},
        "How do I get a REFUND?",
        None,
        [("billing@1.0.0", "match")],
    ),
    ("auto-no-match-queries-nothing", {"mode": "AUTO"}, "weather tomorrow 天气", None, []),
    ("auto-stopwords-do-not-match", {"mode": "AUTO"}, "what is the and of", None, []),
    (
        "auto-rank-by-match-count-then-key",
        {"mode": "AUTO"},
        "设备安装 firmware 固件升级",
        None,
        [("firmware@1.0.0", "match"), ("install-docs@1.0.0", "match")],
    ),
    ("auto-tags-count-for-description", {"mode": "AUTO"}, "sso 登录", None, [("security@1.0.0", "match")]),
    (
        "rule-terms-case-insensitive",
        {"mode": "AUTO", "rules": [_rule("monitor-runbook@2.0.0", queryTerms=["ALERT"])]},
        "why did the alert fire",
        None,
        [("monitor-runbook@2.0.0", "rule")],
    ),
    (
        "rule-terms-not-matched-source-not-chosen-by-description",
        {"mode": "AUTO", "rules": [_rule("monitor-runbook@2.0.0", queryTerms=["离线"])]},
        "告警 alert runbook",
        None,
        [],
    ),
    (
        "rule-context-trusted-match",
        {
            "mode": "AUTO",
            "rules": [
                _rule(
                    "install-docs@1.0.0",
                    queryTerms=["安装"],
                    contextEquals={"projectType": "monitor"},
                    priority=10,
                )
            ],
        },
        "设备安装规范",
        {"projectType": "monitor"},
        [("install-docs@1.0.0", "rule")],
    ),
    (
        "rule-context-missing-no-match",
        {
            "mode": "AUTO",
            "rules": [
                _rule("install-docs@1.0.0", queryTerms=["安装"], contextEquals={"projectType": "monitor"})
            ],
        },
        "设备安装规范 projectType",
        None,
        [],
    ),
    (
        "rule-context-other-value-no-match",
        {"mode": "AUTO", "rules": [_rule("install-docs@1.0.0", contextEquals={"projectType": "monitor"})]},
        "anything",
        {"projectType": "billing"},
        [],
    ),
    (
        "rule-context-only",
        {"mode": "AUTO", "rules": [_rule("security@1.0.0", contextEquals={"team": "it"})]},
        "unrelated words",
        {"team": "it"},
        [("security@1.0.0", "rule")],
    ),
    (
        "rule-tags-need-source-tag-and-query",
        {"mode": "AUTO", "rules": [_rule("billing@1.0.0", tags=["billing", "invoice"])]},
        "invoice question",
        None,
        [],
    ),
    (
        "rule-tags-match",
        {"mode": "AUTO", "rules": [_rule("billing@1.0.0", tags=["Billing"])]},
        "billing question",
        None,
        [("billing@1.0.0", "rule")],
    ),
    (
        "rule-terms-and-tags-both-required",
        {"mode": "AUTO", "rules": [_rule("billing@1.0.0", queryTerms=["发票"], tags=["退款"])]},
        "退款 only",
        None,
        [],
    ),
    (
        "always-needs-context",
        {"mode": "AUTO", "rules": [_rule("security@1.0.0", always=True, contextEquals={"tier": "gold"})]},
        "nothing relevant",
        {"tier": "silver"},
        [],
    ),
    (
        "always-with-context",
        {"mode": "AUTO", "rules": [_rule("security@1.0.0", always=True, contextEquals={"tier": "gold"})]},
        "nothing relevant",
        {"tier": "gold"},
        [("security@1.0.0", "always")],
    ),
    (
        "priority-desc-then-key",
        {
            "mode": "AUTO",
            "maxSources": 4,
            "rules": [
                _rule("billing@1.0.0", always=True, priority=5),
                _rule("security@1.0.0", always=True, priority=50),
                _rule("firmware@1.0.0", always=True, priority=5),
            ],
        },
        "x",
        None,
        [("security@1.0.0", "always"), ("billing@1.0.0", "always"), ("firmware@1.0.0", "always")],
    ),
    (
        "rules-before-description-matches-and-max-sources",
        {"mode": "AUTO", "maxSources": 2, "rules": [_rule("security@1.0.0", always=True)]},
        "安装 固件",
        None,
        [("security@1.0.0", "always"), ("firmware@1.0.0", "match")],
    ),
    (
        "eager-exact-key-order-ignores-rules",
        {"mode": "EAGER", "maxSources": 2, "rules": [_rule("security@1.0.0", always=True, priority=100)]},
        "anything",
        None,
        [("billing@1.0.0", "eager"), ("firmware@1.0.0", "eager")],
    ),
    ("legacy-every-source-in-allowed-order", None, "anything", None, [(k, "legacy") for k in SOURCES]),
]


@pytest.mark.parametrize(
    ("routing", "query", "context", "expected"),
    [c[1:] for c in ROUTING_CASES],
    ids=[c[0] for c in ROUTING_CASES],
)
def test_r_route_table(routing: dict | None, query: str, context: dict | None, expected: list) -> None:
    assert _plan(_scope(routing), query, context) == expected


def test_r_route_permission_first_rules_never_grant() -> None:
    """Disabled, revoked, unpublished or not-allowed sources are never planned, whatever the rules say."""
    routing = {
        "mode": "AUTO",
        "maxSources": 8,
        "rules": [_rule("billing@1.0.0", always=True), _rule("security@1.0.0", always=True)],
    }
    scope = _scope(
        routing,
        allowed=["billing@1.0.0", "security@1.0.0", "firmware@1.0.0"],
        states={"billing@1.0.0": {"enabled": False}, "security@1.0.0": {"status": "revoked"}},
        published=["billing@1.0.0", "security@1.0.0"],
    )
    assert _plan(scope, "固件 billing sso") == []
    assert plan_search(_scope({"mode": "AUTO"}, allowed=["billing@1.0.0"]), "固件升级 firmware") == []


def test_r_route_untrusted_context_in_query_does_not_match() -> None:
    """The chat can say projectType=monitor; only the trusted context counts."""
    routing = {
        "mode": "AUTO",
        "rules": [_rule("install-docs@1.0.0", always=True, contextEquals={"projectType": "plant"})],
    }
    assert _plan(_scope(routing), '{"projectType": "plant"} projectType=plant') == []
    assert _plan(_scope(routing), "x", {"projectType": "plant"}) == [("install-docs@1.0.0", "always")]


def test_r_mode_startup_per_mode() -> None:
    assert (
        plan_startup(_scope({"mode": "ON_DEMAND", "rules": [_rule("billing@1.0.0", always=True)]}), "x") == []
    )
    assert [p.reason for p in plan_startup(_scope(None), "x")] == ["legacy"] * len(SOURCES)
    assert [p.key for p in plan_startup(_scope({"mode": "EAGER", "maxSources": 1}), "x")] == ["billing@1.0.0"]
    assert [p.key for p in plan_startup(_scope({"mode": "AUTO"}), "退款")] == ["billing@1.0.0"]


def test_r_tool_not_exposed_for_legacy_and_eager() -> None:
    for routing in (None, {"mode": "EAGER"}):
        with pytest.raises(ProtocolError):
            plan_tool(_scope(routing), "退款")
    assert [p.key for p in plan_tool(_scope({"mode": "ON_DEMAND"}), "退款")] == ["billing@1.0.0"]


def test_r_tool_explicit_sources_select_only_those() -> None:
    scope = _scope({"mode": "AUTO", "rules": [_rule("billing@1.0.0", always=True)]})
    planned = plan_tool(scope, "退款", None, ["security@1.0.0", "firmware@1.0.0"])
    assert [(p.key, p.reason) for p in planned] == [
        ("security@1.0.0", "explicit"),
        ("firmware@1.0.0", "explicit"),
    ]


@pytest.mark.parametrize(
    "sources",
    [
        ["unknown@1.0.0"],  # not allowed
        ["billing@9.9.9"],  # wrong version
        ["billing"],  # not an exact key
        ["billing@1.0.0", "billing@1.0.0"],  # duplicated
        ["billing@1.0.0", "other@1.0.0"],  # one bad key denies the call
    ],
)
def test_r_tool_knowledge_source_denied(sources: list[str]) -> None:
    with pytest.raises(SourceDenied) as err:
        plan_tool(_scope({"mode": "AUTO"}), "退款", None, sources)
    assert err.value.code == "KNOWLEDGE_SOURCE_DENIED"


def test_r_tool_explicit_disabled_source_denied() -> None:
    scope = _scope({"mode": "AUTO"}, states={"billing@1.0.0": {"enabled": False}})
    with pytest.raises(SourceDenied):
        plan_tool(scope, "退款", None, ["billing@1.0.0"])


def test_r_tool_explicit_more_than_max_sources_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        plan_tool(_scope({"mode": "AUTO", "maxSources": 1}), "x", None, ["billing@1.0.0", "security@1.0.0"])


def test_r_route_lease_only_selected_sources_checked() -> None:
    """An expired lease on an unselected source does not matter; a selected one is unavailable."""
    past, future = "2026-11-29T11:00:00Z", "2026-11-29T13:00:00Z"
    states = {"billing@1.0.0": {"lease_until": past}, "security@1.0.0": {"lease_until": future}}
    auto = _scope({"mode": "AUTO"}, states=states)
    planned = plan_search(auto, "sso login")
    assert [p.key for p in planned] == ["security@1.0.0"]
    assert expired_leases(auto, planned, NOW) == set()
    planned = plan_search(auto, "退款 sso")
    assert expired_leases(auto, planned, NOW) == {"billing@1.0.0"}
    legacy = _scope(None, states=states)
    assert expired_leases(legacy, plan_search(legacy, "anything"), NOW) == {"billing@1.0.0"}


def test_lease_parsing() -> None:
    assert not lease_expired(_source("billing@1.0.0"), NOW)
    assert lease_expired(_source("billing@1.0.0", lease_until="garbage"), NOW)
    assert not lease_expired(_source("billing@1.0.0", lease_until="2026-11-29T12:00:01+00:00"), NOW)
    assert lease_expired(_source("billing@1.0.0", lease_until="2026-11-29T12:00:00Z"), NOW)


def test_routing_terms_english_words_and_chinese_bigrams() -> None:
    assert routing_terms("How to install the 设备安装") == {"install", "设备", "备安", "安装"}


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"mode": "AUTO", "rules": [_rule("nope@1.0.0", always=True)]}, "not in allowedKnowledge"),
        (
            {
                "mode": "AUTO",
                "rules": [_rule("billing@1.0.0", always=True), _rule("billing@1.0.0", queryTerms=["x"])],
            },
            "at most one rule",
        ),
        ({"mode": "AUTO", "rules": [_rule("billing@1.0.0")]}, "at least one of"),
        ({"mode": "AUTO", "rules": [_rule("billing@1.0.0", queryTerms=["Refund", "refund"])]}, "distinct"),
        ({"mode": "AUTO", "rules": [_rule("billing@1.0.0", queryTerms=[" "])]}, "blank"),
        ({"mode": "AUTO", "rules": [_rule("billing@1.0.0", always=True, priority=101)]}, "priority"),
        ({"mode": "AUTO", "maxSources": 17}, "maxSources"),
        ({"mode": "AUTO", "topK": 51}, "topK"),
        ({"mode": "AUTO", "maxRetrievals": 65}, "maxRetrievals"),
        ({"mode": "AUTO", "maxContextChars": 0}, "maxContextChars"),
        ({"mode": "AUTO", "failurePolicy": "RETRY"}, "failurePolicy"),
        ({"mode": "SOMETIMES"}, "mode"),
    ],
)
def test_r_cfg_precheck_rejects(routing: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _scope(routing)


@pytest.mark.parametrize("tool_calling", [False, None])
def test_r_cfg_tool_modes_need_tool_calling(tool_calling: bool | None) -> None:
    for mode in ("AUTO", "ON_DEMAND"):
        with pytest.raises(ValueError, match="toolCalling"):
            AgentDefinition.model_validate(
                {
                    "id": "a",
                    "version": "1",
                    "knowledgeRouting": {"mode": mode},
                    "modelProfile": {
                        "candidates": [
                            {"model": "m", "toolCalling": True},
                            {"model": "n", "toolCalling": tool_calling},
                        ]
                    },
                }
            )
    AgentDefinition.model_validate(
        {
            "id": "a",
            "version": "1",
            "knowledgeRouting": {"mode": "EAGER"},
            "modelProfile": {"candidates": [{"model": "n", "toolCalling": tool_calling}]},
        }
    )
