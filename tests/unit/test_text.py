"""Byte-exact text budgeting (A-SEARCH, A-READ): JSON-escaped sizes, code-point-safe cuts that are also
the longest that fit, titles and excerpts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from knowledge_core.domain.text import (
    TITLE_MAX_CHARS,
    cut_title,
    dumps,
    escaped_size,
    excerpt,
    fit_bytes,
    fit_text,
    json_size,
)

NASTY = st.sampled_from(
    [
        "😀",
        "中",
        "é",
        "e\u0301",
        '"',
        "\\",
        "\x00",
        "\x1f",
        "\n",
        "\u2028",
        "\u2029",
        "a",
        " ",
        "\U0010ffff",
        "\x7f",
        "/",
    ]
)
TEXT = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=400), st.lists(NASTY, max_size=400).map("".join)
)


def compact(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("", 0),
        ("a", 1),
        ('"', 2),
        ("\\", 2),
        ("\n", 2),
        ("\x00", 6),
        ("\x1f", 6),
        ("\x7f", 1),
        ("é", 2),
        ("中", 3),
        ("😀", 4),
        ("\u2028", 3),
        ("\u2029", 3),
        ("/", 1),
    ],
)
def test_escaped_size_of_single_characters(text, size):
    assert escaped_size(text) == size


def test_dumps_is_the_compact_utf8_encoding():
    obj = {"a": ["中", "😀", '"'], "b": None}
    assert dumps(obj).encode() == compact(obj)
    assert json_size(obj) == len(compact(obj))


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_escaped_size_matches_the_wire(text):
    assert escaped_size(text) == len(compact(text)) - 2


@pytest.mark.parametrize("title", ["", "short", "😀" * 300, "\x00" * 300, "中" * 256, "e\u0301" * 200])
def test_a_search_titles_cut_to_256_code_points(title):
    cut = cut_title(title)
    assert title.startswith(cut) and len(cut) == min(len(title), TITLE_MAX_CHARS)
    cut.encode("utf-8")  # whole code points only


@settings(max_examples=150, deadline=None)
@given(text=TEXT, budget=st.integers(-5, 3000))
def test_fit_text_is_the_longest_prefix_that_fits(text, budget):
    fitted = fit_text(text, budget)
    assert text.startswith(fitted)
    assert escaped_size(fitted) <= max(budget, 0)
    if len(fitted) < len(text):
        assert escaped_size(text[: len(fitted) + 1]) > budget


def test_fit_text_control_characters_are_not_emptied():
    assert fit_text("\x01" * 320, 600) == "\x01" * 100
    assert fit_text("a\x00" * 100, 70) == "a\x00" * 10


@settings(max_examples=150, deadline=None)
@given(text=TEXT, prefix=TEXT, budget=st.integers(0, 3000))
def test_fit_bytes_is_whole_code_points_and_the_longest_that_fits(text, prefix, budget):
    body = (prefix + text).encode("utf-8")
    start = len(prefix.encode("utf-8"))
    end = fit_bytes(body, start, budget)
    assert start <= end <= len(body)
    piece = body[start:end].decode("utf-8")  # never splits a code point
    assert escaped_size(piece) <= budget
    if end < len(body):
        next_char = body[end:].decode("utf-8")[0]
        assert escaped_size(piece + next_char) > budget


def test_fit_bytes_makes_progress_on_control_characters():
    body = ("\x00" * 5000).encode()
    assert fit_bytes(body, 0, 3000) == 500
    assert fit_bytes(body, 100, 6) == 101
    assert fit_bytes(body, 100, 5) == 100


def test_fit_bytes_respects_a_truncated_body_end():
    body = "中文".encode()
    assert fit_bytes(body, 0, 100) == 6
    assert fit_bytes(body, 3, 100) == 6
    assert fit_bytes(body, 0, 4) == 3


def test_excerpt_is_bounded_normalised_and_centred_on_the_term():
    passage = "lorem ipsum " * 100 + "the gateway\u2028went\toffline " + "dolor sit " * 100
    out = excerpt(passage, ["offline"], 120)
    assert "offline" in out and out.startswith("…") and out.endswith("…")
    assert len(out) <= 122 and "\u2028" not in out and "\t" not in out and "  " not in out
    assert excerpt("  short\n\npassage  ", ["x"]) == "short passage"
    assert excerpt("word " * 200, ["absent"], 50).startswith("word")
