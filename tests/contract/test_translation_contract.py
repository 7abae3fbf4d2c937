"""Cross-lingual search on every backend (A-SEARCH): with the compiled CC-CEDICT lexicon a Chinese
question finds an English document and an English question a Chinese one, through the public search; the
translated words only add lexical matches (a monolingual ranking keeps its order), `minScore` still
thresholds, ACLs still hide; with hybrid ranking the translation is embedded by the other language's model
and vectors of two models are never compared."""

from __future__ import annotations

from knowledge_core.domain.models import Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery

from tests.contract.conftest import World, doc

VIEWER = Viewer(tenant="acme", subject="alice", groups=["eng"])
REFUND_EN = (
    "Refund policy",
    "Annual plans are refunded pro rata when the customer cancels within thirty days. "
    "Monthly plans are not refunded.",
)
# No English document shares a word with the English question: BM25 statistics are index-wide on OpenSearch
# (every test's documents), so a shared word's weight against the translated words would be the shared
# index's, not this corpus'.
FIRMWARE_EN = (
    "Firmware upgrade",
    "Upgrade the sensor firmware over the air at night; keep the battery charged.",
)
GATEWAY_ZH = ("网关离线排查", "网关离线时，先检查电源指示灯和网线，再重启网关。")
INVOICE_ZH = ("发票说明", "发票在每月初开具，企业客户可以在控制台下载发票。")
ZH_QUESTION = "年度套餐怎么退款？"
EN_QUESTION = "gateway offline: what should I check?"


def _bilingual(world: World, **source: object) -> str:
    (key,) = world.publish({"kb": {"topK": 4, **source}})
    world.ingest(
        doc(key, "refund-en", *REFUND_EN),
        doc(key, "firmware-en", *FIRMWARE_EN),
        doc(key, "gateway-zh", *GATEWAY_ZH),
        doc(key, "invoice-zh", *INVOICE_ZH),
    )
    return key


def _titles(world: World, query: str) -> list[str]:
    return [h["title"] for h in world.search(query, limit=3)["hints"]]


def test_a_search_chinese_question_finds_english_document(translated_world: World) -> None:
    _bilingual(translated_world)
    assert _titles(translated_world, ZH_QUESTION)[0] == "Refund policy"


def test_a_search_english_question_finds_chinese_document(translated_world: World) -> None:
    _bilingual(translated_world)
    assert _titles(translated_world, EN_QUESTION)[0] == "网关离线排查"


def test_a_search_without_translation_stays_monolingual(world: World) -> None:
    """The same corpus without a lexicon: the Chinese question shares no word with the English document."""
    _bilingual(world)
    assert "Refund policy" not in _titles(world, ZH_QUESTION)


def test_a_search_translation_keeps_min_score_and_acls(translated_world: World) -> None:
    key = _bilingual(translated_world)
    translated_world.ingest(
        doc(key, "refund-secret", "Refund approvals", "Refunds above 1000 need approval.", groups=["finance"])
    )
    hits = translated_world.c.backend.search([SourceQuery(key, 4, 0.0)], QueryAnalysis(ZH_QUESTION), VIEWER)[
        0
    ].hits
    assert hits == []  # the backend alone sees no translation: the service expands
    titles = _titles(translated_world, ZH_QUESTION)
    assert "Refund approvals" not in titles
    translated_world.publish({"strict": {"topK": 4, "minScore": 1e6}})
    assert translated_world.search(ZH_QUESTION)["hints"] == []


def test_a_search_translation_leaves_monolingual_order(translated_world: World) -> None:
    """English words added to a Chinese question match no Chinese document: a Chinese corpus ranks the same
    with and without the expansion."""
    (key,) = translated_world.publish({"zh": {"topK": 4}})
    translated_world.ingest(doc(key, "gateway-zh", *GATEWAY_ZH), doc(key, "invoice-zh", *INVOICE_ZH))
    question = "网关离线了怎么办"
    query = [SourceQuery(key, 4, 0.0)]
    plain = translated_world.c.backend.search(query, QueryAnalysis(question), VIEWER)[0].hits
    expansion = translated_world.c.translator.expand(question)
    assert expansion and all(not ("\u4e00" <= ch <= "\u9fff") for ch in expansion)
    expanded = translated_world.c.backend.search(query, QueryAnalysis(question, expansion), VIEWER)[0].hits
    assert [(h.doc_id, round(h.score, 6)) for h in expanded] == [(h.doc_id, round(h.score, 6)) for h in plain]


def test_a_search_hybrid_translation_crosses_languages(translated_hybrid_world: World) -> None:
    """Hybrid with both models: the question's own vector meets its language's passages, its translation's
    vector (the other model) the other language's; both directions find their document first."""
    _bilingual(translated_hybrid_world)
    assert _titles(translated_hybrid_world, ZH_QUESTION)[0] == "Refund policy"
    assert _titles(translated_hybrid_world, EN_QUESTION)[0] == "网关离线排查"
    assert _titles(translated_hybrid_world, "发票在哪里下载")[0] == "发票说明"
