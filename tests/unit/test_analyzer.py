"""Query/document analysis (R-ROUTE, A-SEARCH): English words and CJK character bigrams, shared by the
embedded backend and the router."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from knowledge_core.domain.analyzer import count_terms_in, is_cjk, terms, unique_terms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("   ,.;!? ", []),
        ("Hello, World!", ["hello", "world"]),
        ("设备安装规范", ["设备", "备安", "安装", "装规", "规范"]),
        ("安", ["安"]),
        ("设备installation安装", ["设备", "installation", "安装"]),
        ("device_install v2.0", ["device", "install", "v2", "0"]),
        ("カタカナ", ["カタ", "タカ", "カナ"]),
        ("한국어", ["한국", "국어"]),
        ("ÜNÏCÖDÉ straße", ["ünïcödé", "straße"]),
        ("网关离线怎么排查？", ["网关", "关离", "离线", "线怎", "怎么", "么排", "排查"]),
        ("GW_OFFLINE 8883", ["gw", "offline", "8883"]),
    ],
)
def test_terms(text, expected):
    assert terms(text) == expected


def test_unique_terms_keeps_first_occurrence_order():
    assert unique_terms("网关 gateway 网关 Gateway offline") == ["网关", "gateway", "offline"]


def test_is_cjk():
    assert is_cjk("中") and is_cjk("カ") and is_cjk("한")
    assert not is_cjk("a") and not is_cjk("") and not is_cjk("😀")


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_terms_are_lowercase_words_without_separators(text):
    for term in terms(text):
        assert term and term == term.lower()
        assert not any(c.isspace() or c in "_,.;:!?\"'\\/()[]{}" for c in term)
        if is_cjk(term):
            assert len(term) <= 2 and all(is_cjk(c) for c in term)
        else:
            assert not any(is_cjk(c) for c in term)


@settings(max_examples=100, deadline=None)
@given(words=st.lists(st.from_regex(r"[a-z]{1,12}", fullmatch=True), max_size=20))
def test_terms_of_plain_english_are_its_words(words):
    assert terms(" ".join(words)) == words
    assert terms(", ".join(w.upper() for w in words)) == words


@given(
    st.text(alphabet="ab 网关离线安装 Gateway-offline的。\n", max_size=80),
    st.text(alphabet="ab 网关离线 gateway的", max_size=12),
)
def test_r_fuse_count_terms_in_equals_membership_in_terms(text: str, query: str) -> None:
    """The fast lexical count is exactly `how many query terms are terms of the text`."""
    wanted = unique_terms(query)
    assert count_terms_in(text, wanted) == sum(1 for t in wanted if t in set(terms(text)))
