"""What the agent tool's reference quotes (domain.citing.in_context): the cited passage in its
context — whole sentences or lines after and before it in turns, the next first, within REFERENCE_CHARS,
never across a heading — read for every reference of a call in one batch (R-TOOL, K-PIPE)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from knowledge_core.domain.citing import REFERENCE_CHARS, context_span, fitting_quotes, in_context
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.fusion import Hit
from knowledge_core.domain.passages import StoredPassage

from tests.unit.test_tools import World

ZH = "# 黑死病\n\n第一句讲起源。第二句讲传播。第三句讲死亡人数。\n\n第四句讲奥斯曼帝国。第五句讲结束。"


def _span(body: str, passage: str, max_chars: int) -> str:
    start = body.index(passage)
    lo, hi = context_span(body, start, start + len(passage), max_chars)
    return body[lo:hi]


def test_context_takes_the_next_sentence_first_then_the_previous() -> None:
    passage = "第二句讲传播。"
    assert _span(ZH, passage, len(passage)) == passage  # no room: the passage alone
    assert _span(ZH, passage, 16) == "第二句讲传播。第三句讲死亡人数。"  # the next one first
    assert _span(ZH, passage, 23) == "第一句讲起源。第二句讲传播。第三句讲死亡人数。"  # then the one before
    # A direction ends at the first sentence that does not fit; the other goes on.
    assert _span(ZH, passage, 15) == "第一句讲起源。第二句讲传播。"
    # Across the paragraph break (a line's end is a unit's end too), never past the heading above.
    whole = _span(ZH, passage, REFERENCE_CHARS)
    assert whole == ZH.removeprefix("# 黑死病\n\n")


def test_context_takes_whole_paragraphs_where_they_fit_else_sentences() -> None:
    body = "Q1? A1 one. A1 two.\n\nQ2? A2.\n\nQ3? A3."
    assert _span(body, "Q2? A2.", 37) == body  # the next paragraph, then the one before, whole
    # The one before does not fit whole: its last sentence does; the one before that no longer.
    assert _span(body, "Q2? A2.", 30) == "A1 two.\n\nQ2? A2.\n\nQ3? A3."


def test_context_never_crosses_a_heading_and_keeps_a_long_passage() -> None:
    body = (
        "# Guide\n\n## Setup\n\nInstall it. Then start it.\n\n## Backups\n\nBack up nightly. Restore weekly."
    )
    assert _span(body, "Then start it.", 200) == "Install it. Then start it."
    assert _span(body, "Back up nightly.", 200) == "Back up nightly. Restore weekly."
    long = "A long sentence about pumps. " * 50
    body = f"Before it. {long.strip()} After it."
    assert _span(body, long.strip(), 100) == long.strip()  # already as long as the window: unchanged


def test_context_keeps_markdown_emphasis_with_its_sentence() -> None:
    """A FAQ's bold question ends at its `?**`: a quote neither begins with the `**` after it nor ends inside
    it (even where the window's end falls between the two stars)."""
    body = "Intro. **Q: Can I fail over?** Yes, with a switchover. **Q: Who approves?** The lead."
    passage = "Yes, with a switchover."
    assert _span(body, passage, 41) == passage  # (was "** Yes, with a switchover.")
    assert _span(body, passage, 43) == passage  # (the window ends between the stars)
    assert _span(body, passage, 44) == "Yes, with a switchover. **Q: Who approves?**"
    assert _span(body, passage, len(body) - len("Intro. ")) == body.removeprefix("Intro. ")


def test_context_cuts_lists_and_pdf_text_between_lines() -> None:
    body = "Steps:\n- open the valve\n- check the gauge\n- close the valve\nDone"
    assert _span(body, "- check the gauge", 39) == "- check the gauge\n- close the valve"
    assert _span(body, "- check the gauge", 40) == "- check the gauge\n- close the valve\nDone"


def _stored(
    *texts: str, first: int = 0, section: str = "", pages: tuple[int, ...] = ()
) -> list[StoredPassage]:
    return [StoredPassage(first + n, t, section, pages) for n, t in enumerate(texts)]


def test_in_context_joins_the_sections_passages_and_names_their_pages() -> None:
    neighbours = [
        StoredPassage(4, "Page one ends here.", "Setup", (1,)),
        StoredPassage(5, "Page two starts here. It goes on.", "Setup", (2,)),
        StoredPassage(6, "Another section.", "Backups", (2,)),
    ]
    hit = Hit(
        "k@1", "d", "T", "r", 3.0, "Page two starts here. It goes on.", {"uri": "s3://b/m.pdf", "pages": [2]}
    )
    shown = in_context(replace(hit, passage_no=5), neighbours)
    assert shown.passage == "Page one ends here.\n\nPage two starts here. It goes on."  # not the next section
    assert shown.structured_source == {"uri": "s3://b/m.pdf", "pages": [1, 2]}
    assert (shown.doc_id, shown.score, shown.revision, shown.passage_no) == ("d", 3.0, "r", 5)
    assert in_context(hit, neighbours).passage == shown.passage  # no number: found by its text


def test_in_context_never_joins_the_section_before_or_after() -> None:
    """The section's own passages only, on both sides (an HTML page's `h2` sections are one passage each:
    the "Water treatment" table quoted with the "Yearly tasks" list before it crossed a heading)."""
    neighbours = [
        StoredPassage(0, "Intro.", "", ()),
        StoredPassage(1, "Test the cutoff weekly.", "Weekly checks", ()),
        StoredPassage(2, "- Replace the nozzle.\n- Test the safety valve.", "Yearly tasks", ()),
        StoredPassage(3, "Parameter | Limit\npH | 10.5 - 11.5", "Water treatment", ()),
        StoredPassage(4, "TDS | 3500 ppm", "Water treatment", ()),
        StoredPassage(5, "Call the hotline.", "Contacts", ()),
    ]
    table = Hit("k@1", "d", "T", "r", 2.0, neighbours[4].text, passage_no=4)
    assert in_context(table, neighbours).passage == "Parameter | Limit\npH | 10.5 - 11.5\n\nTDS | 3500 ppm"
    alone = Hit("k@1", "d", "T", "r", 2.0, neighbours[2].text, passage_no=2)
    assert in_context(alone, neighbours) == alone  # a section of one passage: nothing to join either way
    assert in_context(replace(alone, passage="Intro.", passage_no=0), neighbours).passage == "Intro."


def test_in_context_keeps_a_passage_it_cannot_place() -> None:
    hit = Hit("k@1", "d", "T", "r", 1.0, "Second.", passage_no=1)
    assert in_context(hit, _stored("First.", "Second.", "Third.")).passage == "First.\n\nSecond.\n\nThird."
    assert in_context(hit, []) == hit  # another revision, or gone: the backend returned nothing
    assert in_context(replace(hit, passage_no=7), _stored("First.", "Second.")) == replace(hit, passage_no=7)
    gap = [StoredPassage(0, "First."), StoredPassage(1, "Second."), StoredPassage(3, "Fourth.")]
    assert in_context(hit, gap).passage == "First.\n\nSecond."  # only passages side by side


def test_r_budget_a_quote_in_context_only_where_it_fits_whole() -> None:
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


# Three paragraphs of 250 estimated tokens each: three passages (two do not fit one).
PARAGRAPHS = ["甲" * 249 + "。", "乙" * 249 + "。", "丙" * 249 + "。"]


@pytest.fixture
def world(container: Any, clock: Any) -> World:
    w = World(container, clock)
    w.backend.add("alpha@1.0.0", "a1", "\n\n".join(PARAGRAPHS), 9.0)
    w.backend.hits["alpha@1.0.0"][0] = replace(w.backend.hits["alpha@1.0.0"][0], passage=PARAGRAPHS[1])
    return w


def _agent(world: World, **routing: Any) -> str:
    return world.agent("auto", {"mode": "AUTO", "rules": [{"knowledge": _ref(), "always": True}], **routing})


def test_r_tool_reference_quotes_its_passage_in_context(world: World) -> None:
    """The fake backend keeps no passages: the port's default reads its documents and splits them again."""
    result = world.call(_agent(world), {"query": "乙"})
    [ref] = result["references"]
    assert ref["content"] == "\n\n".join(PARAGRAPHS)
    assert next(e for e in result["events"] if e["type"] == "knowledge.fused")["charsUsed"] == len(
        ref["content"]
    )


def test_r_tool_references_quote_their_passages_alone_when_the_read_fails(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(hits: Any) -> Any:
        raise SourceFailure("unavailable")

    monkeypatch.setattr(world.tools._retrieval, "neighbour_passages", down)
    [ref] = world.call(_agent(world), {"query": "乙"})["references"]
    assert ref["content"] == PARAGRAPHS[1]


def test_r_tool_a_tight_budget_quotes_the_passage_not_the_context_before_it(world: World) -> None:
    [ref] = world.call(_agent(world, maxContextChars=600), {"query": "乙"})["references"]
    assert ref["content"] == PARAGRAPHS[1]  # the passage (250 chars), not the first 600 of its context


def _ref() -> dict[str, str]:
    return {"id": "alpha", "version": "1.0.0"}


_PIECES = st.sampled_from(
    ["Valve.", "泵。", "a b", "\n", "\n\n", "## H\n", "- item\n", "  ", "长句子没有标点", "x? y!"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_PIECES, min_size=1, max_size=40),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=1, max_value=120),
)
def test_context_span_holds_its_passage_within_the_limit_and_its_section(
    pieces: list[str], at: int, length: int, max_chars: int
) -> None:
    """Whatever the text: the span holds the whole passage, is no longer than `max_chars` unless the
    passage alone is, and crosses no heading line that does not touch the passage."""
    body = "".join(pieces)
    start = min(at, len(body) - 1)
    end = min(len(body), start + length)
    passage = body[start:end].strip()  # a passage is text without surrounding whitespace
    assume(passage)
    start = body.index(passage, start)
    end = start + len(passage)
    lo, hi = context_span(body, start, end, max_chars)
    assert lo <= start and hi >= end
    assert hi - lo <= max(max_chars, end - start)
    for heading in re.finditer(r"^ {0,3}#{1,6}[ \t].*$", body, re.MULTILINE):
        if heading.end() <= start or heading.start() >= end:  # outside the passage: outside the span
            assert heading.end() <= lo or heading.start() >= hi
