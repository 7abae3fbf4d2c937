"""One retrieval behind every door (SPEC §3.9, K-PIPE), on every backend: with one source and `rerank: NONE`,
the same question in the same scope gets the same documents in the same order through search hints
(§2.3), a turn's inline startup bodies (§2.2), the agent tool's `knowledge_search` and `startup` (§3.6), the
MCP door (§6) and the evaluation door (`kb eval`) — in Chinese, in English and across the two languages
(hybrid ranking with zh<->en query translation, the default wherever models and lexicon are fetched)."""

from __future__ import annotations

import pytest
from knowledge_core.domain.models import AgentDefinition, SourceDefinition
from knowledge_core.domain.tool_wire import parse_envelope
from knowledge_core.domain.turn_wire import TurnRequest
from knowledge_core.domain.wire import SearchRequest
from knowledge_core.mcp_server import ServiceDoor

from tests.contract.conftest import PRINCIPAL, World, doc

CORPUS = [
    (
        "refund-en",
        "Refund policy",
        "Annual plans are refunded pro rata when the customer cancels within "
        "thirty days. Monthly plans are not refunded.",
    ),
    (
        "firmware-en",
        "Firmware upgrade",
        "Upgrade the sensor firmware over the air at night; keep the battery charged during the upgrade.",
    ),
    (
        "failover-en",
        "Database failover runbook",
        "Promote the standby replica, repoint the application "
        "connection string, then rebuild the old primary as a new standby.",
    ),
    ("gateway-zh", "网关离线排查", "网关离线时，先检查电源指示灯和网线，再重启网关。"),
    ("invoice-zh", "发票说明", "发票在每月初开具，企业客户可以在控制台下载发票。"),
    ("install-zh", "设备安装规范", "设备安装在离地一点五米的位置，远离热源和强电磁干扰。"),
]
QUESTIONS = [  # (question, the document that answers it)
    ("网关离线怎么办？", "网关离线排查"),  # zh -> zh
    ("database failover: promote the standby", "Database failover runbook"),  # en -> en
    ("年度套餐怎么退款？", "Refund policy"),  # zh -> en
    ("device installation specification", "设备安装规范"),  # en -> zh
    ("how do I download an invoice?", "发票说明"),  # en -> zh
]


def _one_source_world(world: World) -> tuple[str, str]:
    """One source, an AUTO agent that always selects it (tool exposed, `rerank: NONE`), route `kb`."""
    key = world.key("doors")
    id_, version = key.split("@")
    world.c.admin.publish_source(SourceDefinition.model_validate({"id": id_, "version": version, "topK": 5}))
    agent_id = f"doors-agent-{world.tag}"
    world.c.admin.publish_agent(
        AgentDefinition.model_validate(
            {
                "id": agent_id,
                "version": "1.0.0",
                "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
                "allowedKnowledge": [{"id": id_, "version": version}],
                "knowledgeRouting": {
                    "mode": "AUTO",
                    "topK": 5,
                    "rerank": "NONE",
                    "rules": [{"knowledge": {"id": id_, "version": version}, "always": True}],
                },
            }
        )
    )
    world.c.admin.set_workspace("kb", f"{agent_id}@1.0.0")
    world.ingest(*(doc(key, d, title, body) for d, title, body in CORPUS))
    return key, f"{agent_id}@1.0.0"


def _tool(world: World, agent: str, operation: str, query: str, n: int) -> list[str]:
    envelope = parse_envelope(
        {
            "operation": operation,
            "invocation": {
                "tenant": PRINCIPAL.tenant,
                "app": "doors",
                "subject": PRINCIPAL.subject,
                "agent": agent,
                "invocation_id": f"inv-{operation}-{n}",
                "ancestors": [],
                "trusted_context": {},
            },
            "arguments": {"query": query},
        }
    )
    result = world.c.tools.call(envelope).wire()
    assert "error" not in result, result
    return [r["source"]["title"] for r in result["references"]]


def _doors(world: World, agent: str, query: str, n: int) -> dict[str, list[str]]:
    hints = world.c.knowledge.search(PRINCIPAL, "kb", SearchRequest(query=query, limit=3)).wire()
    turn = world.c.turns.start(PRINCIPAL, "kb", TurnRequest(turn_id=f"t-{n}", message=query)).wire()
    mcp = ServiceDoor(world.c.knowledge, PRINCIPAL, "kb").search(SearchRequest(query=query, limit=3))
    ranked = world.c.knowledge.rank(PRINCIPAL, "kb", query, 3)
    titles = {d: t for d, t, _ in CORPUS}
    return {
        "search": [h["title"] for h in hints["hints"]],
        "turn inline": [k["title"] for k in turn["context"]["knowledge"]][:3],
        "tool knowledge_search": _tool(world, agent, "knowledge_search", query, n)[:3],
        "tool startup": _tool(world, agent, "startup", query, n)[:3],
        "mcp": [h["title"] for h in mcp["hints"]],
        "eval": [titles[doc_id] for _, doc_id, _ in ranked],
    }


@pytest.mark.parametrize("n", range(len(QUESTIONS)), ids=[q[:24] for q, _ in QUESTIONS])
def test_k_pipe_every_door_same_documents_same_order(translated_hybrid_world: World, n: int) -> None:
    world = translated_hybrid_world
    _, agent = _one_source_world(world)
    question, answer = QUESTIONS[n]
    doors = _doors(world, agent, question, n)
    assert doors["search"][:1] == [answer], doors
    assert all(titles == doors["search"] for titles in doors.values()), doors


@pytest.mark.parametrize("question", ["quantum chromodynamics on a lattice", "量子计算机的原理"])
def test_no_word_match_no_padding_at_any_door(translated_hybrid_world: World, question: str) -> None:
    """R-TOOL (§3.6: no match → `references: []`) and 无匹配不强塞文档: a question sharing no
    word with the source, in either language, gets no document through any door, though min-max scaling
    gives its nearest passage the best possible semantic score; the evaluation door's deep ranking (asked
    without the doors' cut) still ranks them."""
    world = translated_hybrid_world
    _, agent = _one_source_world(world)
    doors = _doors(world, agent, question, 0)
    assert all(titles == [] for name, titles in doors.items() if name != "eval"), doors
    assert doors["eval"] == []  # the evaluation door as the doors ask it (with the cut)
    assert len(world.c.knowledge.rank(PRINCIPAL, "kb", question, 3, cut=False)) == 3


KETTLE = (
    "kettle-en",
    "Electric Kettle Care / 电热水壶保养",
    "## Safety\n\nNever immerse the base in water. Unplug the kettle before cleaning.",
)


def test_no_padding_under_a_title_of_the_other_script(translated_hybrid_world: World) -> None:
    """无匹配不强塞文档 / R-HYBRID (a newcomer's walk): an English section under a bilingual title
    is embedded with its title, so as a Chinese passage; its cosines are the Chinese side's models' and
    face that side's no-match check, whatever script the cited text shows. A question sharing no word with the
    source gets no document through search or the agent tool (it got the kettle at 0.600 when fusion took
    the script from the cited text); a question about kettles still finds it."""
    world = translated_hybrid_world
    key, agent = _one_source_world(world)
    world.ingest(doc(key, *KETTLE))
    for n, question in enumerate(["quantum chromodynamics on a lattice", "量子计算机的原理"]):
        hints = world.c.knowledge.search(PRINCIPAL, "kb", SearchRequest(query=question, limit=3)).wire()
        assert hints["hints"] == [], hints
        assert _tool(world, agent, "knowledge_search", question, 10 + n) == []
    found = world.c.knowledge.search(
        PRINCIPAL, "kb", SearchRequest(query="unplug the kettle", limit=3)
    ).wire()
    assert [h["title"] for h in found["hints"]][:1] == [KETTLE[1]]


def test_k_pipe_tool_call_on_opensearch_is_three_batched_requests(translated_hybrid_world: World) -> None:
    """K-PIPE: a hybrid tool call makes three OpenSearch requests whatever the number of hits, never one per
    hit: the `_msearch` of candidates (BM25 and k-NN of every source), one `_msearch` of the shown hits' best
    passages, from which domain.citing picks each hit's cited passage (BM25 alone makes the first
    only), and one `_mget` of the passage rows around the fused references' own, from which each reference
    quotes its passage in context (domain.citing.in_context; never the documents' bodies). The live check
    reads nothing: each passage row carries its document's status, ACL and stored version and is rewritten
    in the same refreshed bulk as the document (`live_hits`), so a hit is citable as returned
    (test_k_pipe_opensearch_hits_live_without_mget proves the disable/delete/ACL cases)."""
    world = translated_hybrid_world
    if world.c.settings.search_backend != "opensearch":
        pytest.skip("counts OpenSearch requests")
    key, agent = _one_source_world(world)
    world.ingest(
        *(doc(key, f"note-{i}", f"Gateway note {i}", f"gateway offline note {i} 网关离线") for i in range(12))
    )
    transport = world.c.backend.client.transport  # type: ignore[attr-defined]
    calls: list[str] = []
    perform = transport.perform_request

    def counted(method: str, url: str, *args: object, **kwargs: object) -> object:
        calls.append(f"{method} {url.split('?')[0]}")
        return perform(method, url, *args, **kwargs)

    transport.perform_request = counted
    try:
        for n, operation in enumerate(("knowledge_search", "startup")):
            calls.clear()
            titles = _tool(world, agent, operation, "gateway offline 网关离线", 100 + n)
            assert len(titles) == 5  # the routing's topK: hits enough to need many reads one by one
            assert [c.rsplit("/", 1)[-1] for c in calls] == ["_msearch", "_msearch", "_mget"], calls
            assert "-passages" in calls[-1], calls  # passage rows, not the documents index
    finally:
        transport.perform_request = perform
