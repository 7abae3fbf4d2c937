"""What the agent tool's reference quotes (issue 24, domain.citing.in_context): the cited passage in its
context — whole sentences or lines after and before it in turns, the next first, within REFERENCE_CHARS,
never across a heading — read for every reference of a call in one batch (R-TOOL, K-PIPE)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from knowledge_core.domain.citing import REFERENCE_CHARS, context_span, fitting_quotes, in_context
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.fusion import Hit
from knowledge_core.domain.models import Document, DocumentAcl

from tests.unit.test_tools import World

ZH = "# 黑死病\n\n第一句讲起源。第二句讲传播。第三句讲死亡人数。\n\n第四句讲奥斯曼帝国。第五句讲结束。"


def _span(body: str, passage: str, max_chars: int) -> str:
    start = body.index(passage)
    lo, hi = context_span(body, start, start + len(passage), max_chars)
    return body[lo:hi]


def test_i24_context_takes_the_next_sentence_first_then_the_previous() -> None:
    passage = "第二句讲传播。"
    assert _span(ZH, passage, len(passage)) == passage  # no room: the passage alone
    assert _span(ZH, passage, 16) == "第二句讲传播。第三句讲死亡人数。"  # the next one first
    assert _span(ZH, passage, 23) == "第一句讲起源。第二句讲传播。第三句讲死亡人数。"  # then the one before
    # A direction ends at the first sentence that does not fit; the other goes on.
    assert _span(ZH, passage, 15) == "第一句讲起源。第二句讲传播。"
    # Across the paragraph break (a line's end is a unit's end too), never past the heading above.
    whole = _span(ZH, passage, REFERENCE_CHARS)
    assert whole == ZH.removeprefix("# 黑死病\n\n")


def test_i24_context_takes_whole_paragraphs_where_they_fit_else_sentences() -> None:
    body = "Q1? A1 one. A1 two.\n\nQ2? A2.\n\nQ3? A3."
    assert _span(body, "Q2? A2.", 37) == body  # the next paragraph, then the one before, whole
    # The one before does not fit whole: its last sentence does; the one before that no longer.
    assert _span(body, "Q2? A2.", 30) == "A1 two.\n\nQ2? A2.\n\nQ3? A3."


def test_i24_context_never_crosses_a_heading_and_keeps_a_long_passage() -> None:
    body = (
        "# Guide\n\n## Setup\n\nInstall it. Then start it.\n\n## Backups\n\nBack up nightly. Restore weekly."
    )
    assert _span(body, "Then start it.", 200) == "Install it. Then start it."
    assert _span(body, "Back up nightly.", 200) == "Back up nightly. Restore weekly."
    long = "A long sentence about pumps. " * 50
    body = f"Before it. {long.strip()} After it."
    assert _span(body, long.strip(), 100) == long.strip()  # already as long as the window: unchanged


def test_i24_context_cuts_lists_and_pdf_text_between_lines() -> None:
    body = "Steps:\n- open the valve\n- check the gauge\n- close the valve\nDone"
    assert _span(body, "- check the gauge", 39) == "- check the gauge\n- close the valve"
    assert _span(body, "- check the gauge", 40) == "- check the gauge\n- close the valve\nDone"


def _doc(body: str, structured: dict[str, Any] | None = None) -> Document:
    return Document(
        source_key="k@1",
        doc_id="d",
        title="T",
        body=body,
        acl=DocumentAcl(tenant="t"),
        structured_source=structured,
    )


def test_i24_in_context_quotes_the_window_with_its_pages() -> None:
    body = "Page one ends here.\nPage two starts here. It goes on."
    doc = _doc(body, {"uri": "s3://b/m.pdf", "page_starts": [0, 20]})
    hit = Hit(
        "k@1", "d", "T", doc.revision, 3.0, "Page two starts here.", {"uri": "s3://b/m.pdf", "pages": [2]}
    )
    shown = in_context(hit, doc)
    assert shown.passage == body
    assert shown.structured_source == {"uri": "s3://b/m.pdf", "pages": [1, 2]}
    assert (shown.doc_id, shown.score, shown.revision) == (hit.doc_id, hit.score, hit.revision)


def test_i24_in_context_keeps_the_passage_of_another_revision_or_an_unknown_one() -> None:
    doc = _doc("First. Second. Third.")
    hit = Hit("k@1", "d", "T", doc.revision, 1.0, "Second.")
    assert in_context(hit, doc).passage == "First. Second. Third."
    assert in_context(replace(hit, revision="other"), doc) == replace(hit, revision="other")  # a newer body
    assert in_context(hit, None) == hit
    assert in_context(replace(hit, passage="Not in it."), doc).passage == "Not in it."


def test_i24_r_budget_a_quote_in_context_only_where_it_fits_whole() -> None:
    """A budget's cut keeps a quote's beginning: were the context before a passage cut instead of the
    passage, the reference would quote what did not match. So a quote in context is taken only where it
    fits whole, in rank order, per source (`sourceMaxChars`) and for the chain (remaining chars)."""

    def pair(key: str, passage: str, quote: str) -> tuple[Hit, Hit]:
        alone = Hit(key, passage, "T", "r", 1.0, passage)
        return alone, replace(alone, passage=quote)

    pairs = [
        pair("a@1", "P1", "ctx P1 ctx"),
        pair("a@1", "P2", "ctx P2 ctx"),
        pair("b@1", "P3", "ctx P3 ctx"),
    ]
    quoted = [h.passage for h in fitting_quotes(pairs, 100, 100)]
    assert quoted == ["ctx P1 ctx", "ctx P2 ctx", "ctx P3 ctx"]
    # sourceMaxChars 15: the second of source a no longer fits whole; source b has its own share.
    assert [h.passage for h in fitting_quotes(pairs, 15, 100)] == ["ctx P1 ctx", "P2", "ctx P3 ctx"]
    # 15 chars left in the chain: the first fits (5 left), then only the passages alone (2 each).
    assert [h.passage for h in fitting_quotes(pairs, 100, 15)] == ["ctx P1 ctx", "P2", "P3"]
    assert [h.passage for h in fitting_quotes(pairs, 100, 0)] == ["P1", "P2", "P3"]


@pytest.fixture
def world(container: Any, clock: Any) -> World:
    w = World(container, clock)
    w.backend.add("alpha@1.0.0", "a1", ZH, 9.0)
    w.backend.hits["alpha@1.0.0"][0] = replace(w.backend.hits["alpha@1.0.0"][0], passage="第二句讲传播。")
    return w


def test_i24_r_tool_reference_quotes_its_passage_in_context(world: World) -> None:
    agent = world.agent("auto", {"mode": "AUTO", "rules": [{"knowledge": _ref(), "always": True}]})
    result = world.call(agent, {"query": "黑死病传播"})
    [ref] = result["references"]
    assert ref["content"] == ZH.removeprefix("# 黑死病\n\n")
    assert next(e for e in result["events"] if e["type"] == "knowledge.fused")["charsUsed"] == len(
        ref["content"]
    )


def test_i24_r_tool_references_quote_their_passages_alone_when_the_read_fails(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(keys: Any) -> Any:
        raise SourceFailure("unavailable")

    agent = world.agent("auto", {"mode": "AUTO", "rules": [{"knowledge": _ref(), "always": True}]})
    monkeypatch.setattr(world.tools._retrieval, "documents", down)  # the live check still reads
    [ref] = world.call(agent, {"query": "黑死病传播"})["references"]
    assert ref["content"] == "第二句讲传播。"


def test_i24_r_tool_a_tight_budget_quotes_the_passage_not_the_context_before_it(world: World) -> None:
    rules = [{"knowledge": _ref(), "always": True}]
    agent = world.agent("tight", {"mode": "AUTO", "maxContextChars": 10, "rules": rules})
    [ref] = world.call(agent, {"query": "黑死病传播"})["references"]
    assert ref["content"] == "第二句讲传播。"  # the passage (7 chars), not the 10 first chars of its context


def _ref() -> dict[str, str]:
    return {"id": "alpha", "version": "1.0.0"}
