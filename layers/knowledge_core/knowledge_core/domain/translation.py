"""Cross-lingual query expansion by dictionary (Chinese <-> English): a Chinese question also asks, in
English words, for what its words mean; an English question also asks for the Chinese words of its words.

The expansion only feeds the lexical (BM25) stage: translated terms match documents of the other language
and nothing in documents of the query's own, so a monolingual corpus ranks as before. The dictionary is
CC-CEDICT (adapters/lexicon.py loads it); word frequencies pick the usual Chinese words among an English
word's many dictionary senses. Plain Python, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .analyzer import stem

# Han ideographs (with extension A and compatibility ideographs): the script this module translates from.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RE = re.compile(f"[{_HAN}]")
_HAN_RUN_RE = re.compile(f"[{_HAN}]+")
_EN_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]*")
_CEDICT_LINE = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/\s*$")
_PARENTHESES = re.compile(r"\([^)]*\)")
# Senses that are cross-references or usage notes, not translations.
_NOT_A_SENSE = re.compile(
    r"^(variant of|old variant|archaic variant|see |CL:|surname |abbr\. for|used in|also written|"
    r"Japanese variant|\((dialect|old|archaic|literary|Tw|Cantonese)\))",
    re.IGNORECASE,
)


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


EN_STOPWORDS = _word_set(
    """a an the to of in on at for and or by with from as is are was were be been being do does did done
    what which who whom whose when where why how that this these those it its into than then there their
    they them he she his her him we our you your i me my not no yes can could would should will shall may
    might must has have had one sb sth oneself someone something etc e g also about after before during
    over under between up down out off so such very more most much many any some all each other another if
    but because while"""
)
# Chinese function words and question words: their glosses would only add noise.
ZH_STOPWORDS = _word_set(
    """的 了 是 在 吗 呢 吧 啊 什么 哪 哪个 哪些 哪里 谁 多少 几 怎么 怎样 如何 为什么 和 与 及 或 被 把
    对 由 于 从 到 有 没有 这 那 这个 那个 一个 其 之 也 都 就 而 以 为 时 中 上 下 后 前 个 位 能 会 要
    还 么 呀 哦 请 我 你 他 她 它 我们 你们 他们"""
)
SENSES_PER_WORD = 2  # the first senses of a Chinese word that give its English words
WORDS_PER_SENSE = 3
CHINESE_PER_WORD = 2  # the Chinese words an English word expands to
MAX_TERMS = 64  # a long question's expansion stays a bounded BM25 query
_SHORT_SENSE = 3  # English words at most, for a sense to translate an English word back
_REVERSE_SENSES = 4
_REVERSE_POOL = 20


def english_root(word: str) -> str:
    """Lower case, possessive and plural folded ("Warsaw's" -> "warsaw", "policies" -> "policy", "keys" ->
    "key"): enough to meet dictionary senses, which are singular."""
    w = word.lower()
    w = (w[:-2] if w.endswith("'s") else w).rstrip("'")
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def _content_words(text: str) -> list[tuple[str, str]]:
    """The English words of `text` with their roots, but stop words, as written or as folded ("one's")."""
    roots = ((w, english_root(w)) for w in _EN_WORD_RE.findall(text))
    return [(w, root) for w, root in roots if w.lower() not in EN_STOPWORDS and root not in EN_STOPWORDS]


def sense_words(sense: str) -> list[str]:
    """The content words of one dictionary sense, parenthesised notes dropped."""
    return [root for _, root in _content_words(_PARENTHESES.sub(" ", sense))]


def proper_name(sense: str) -> str:
    """A place's sense without its gloss: "Paris, capital of France" names Paris, "Shanghai municipality,
    central east China, …" Shanghai municipality (the dictionary explains a name after a comma); any other
    sense whole, and a person's ("Norman Bethune, …": its words are two names, neither of them the
    person)."""
    head, comma, _ = _PARENTHESES.sub(" ", sense).partition(",")
    words = head.split()
    if comma and words and words[0][:1].isupper() and not any(w[:1].isupper() for w in words[1:]):
        return head
    return sense


@dataclass(frozen=True)
class Lexicon:
    """Chinese word -> its English words (first senses first); English root -> its usual Chinese words."""

    zh_en: Mapping[str, tuple[str, ...]]
    en_zh: Mapping[str, tuple[str, ...]]
    longest: int
    name: str = "CC-CEDICT"
    # Snowball stem -> the shortest root of en_zh with that stem, where that root is not the stem itself
    # ("restor" -> "restore"): an inflected English word meets its dictionary form. Compiled, not computed
    # at load (stemming every root takes seconds in pure Python).
    en_stems: Mapping[str, str] = field(default_factory=dict)


def stem_index(roots: Iterable[str]) -> dict[str, str]:
    """Lexicon.en_stems of these roots."""
    index: dict[str, str] = {}
    for root in sorted(roots, key=lambda w: (len(w), w)):
        index.setdefault(stem(root), root)
    return {s: root for s, root in index.items() if s != root}


def dictionary_form(root: str, lexicon: Lexicon) -> str | None:
    """The root of en_zh an inflected English root stands for ("designed" -> "design"), if any."""
    s = stem(root)
    return lexicon.en_stems.get(s) or (s if s in lexicon.en_zh else None)


def parse_cedict(lines: Iterable[str], frequencies: Mapping[str, int]) -> Lexicon:
    """A Lexicon from CC-CEDICT lines (`trad simp [pinyin] /sense/sense/`) and Chinese word frequencies."""
    senses: dict[str, list[str]] = {}
    for line in lines:
        m = _CEDICT_LINE.match(line)
        if m is None:
            continue  # comments and malformed lines
        simplified = m.group(2)
        senses.setdefault(simplified, []).extend(
            s for s in m.group(4).split("/") if s and not _NOT_A_SENSE.match(s)
        )
    zh_en: dict[str, tuple[str, ...]] = {}
    reverse: dict[str, dict[str, float]] = {}
    for word, word_senses in senses.items():
        english: list[str] = []
        for sense in word_senses[:SENSES_PER_WORD]:
            english.extend(w for w in sense_words(proper_name(sense))[:WORDS_PER_SENSE] if w not in english)
        if english:
            zh_en[word] = tuple(english)
        for rank, sense in enumerate(word_senses[:_REVERSE_SENSES]):
            words = sense_words(proper_name(sense))
            if not words or len(words) > _SHORT_SENSE:
                continue
            weight = 1.0 / len(words) / (1 + rank)  # a one-word first sense translates best
            for w in words:
                candidates = reverse.setdefault(w, {})
                candidates[word] = max(candidates.get(word, 0.0), weight)
    en_zh = {w: zh for w, candidates in reverse.items() if (zh := _usual(candidates, frequencies))}
    return Lexicon(zh_en, en_zh, max((len(w) for w in zh_en), default=1), en_stems=stem_index(en_zh))


def _usual(candidates: dict[str, float], frequencies: Mapping[str, int]) -> tuple[str, ...]:
    """The Chinese words that best translate one English word: the closest senses, then the commonest."""
    pool = sorted(candidates.items(), key=lambda kv: (-kv[1], -frequencies.get(kv[0], 0), kv[0]))
    pool = pool[:_REVERSE_POOL]
    ranked = sorted(pool, key=lambda kv: (-kv[1] * math.log(2 + frequencies.get(kv[0], 0)), kv[0]))
    return tuple(word for word, _ in ranked[:CHINESE_PER_WORD])


def segment(run: str, lexicon: Lexicon) -> list[str]:
    """A run of Han characters cut into dictionary words, longest match first (a character alone else)."""
    out: list[str] = []
    i = 0
    while i < len(run):
        for length in range(min(lexicon.longest, len(run) - i), 0, -1):
            word = run[i : i + length]
            if length == 1 or word in lexicon.zh_en:
                out.append(word)
                i += length
                break
    return out


def english_terms(text: str, lexicon: Lexicon) -> list[str]:
    """The English words of the Chinese words in `text`."""
    out: list[str] = []
    for run in _HAN_RUN_RE.findall(text):
        for word in segment(run, lexicon):
            if word in ZH_STOPWORDS:
                continue
            out.extend(lexicon.zh_en.get(word, ()))
    return out


def chinese_terms(text: str, lexicon: Lexicon) -> list[str]:
    """The usual Chinese words of the English words in `text`."""
    out: list[str] = []
    for word, root in _content_words(text):
        zh = lexicon.en_zh.get(root)
        if zh is None and word[:1].islower():  # an inflected word ("designed"); a capitalised one is a name
            zh = lexicon.en_zh.get(dictionary_form(root, lexicon) or "")
        out.extend(zh or ())
    return out


def expand_query(text: str, lexicon: Lexicon) -> str:
    """The other language's words for a query: English ones for a query with Chinese characters (its Latin
    words, often product names and codes, stay as they are), Chinese ones for any other query. Empty when
    the dictionary knows none of its words. Repeats dropped, first occurrence order, at most MAX_TERMS."""
    terms = english_terms(text, lexicon) if _HAN_RE.search(text) else chinese_terms(text, lexicon)
    return " ".join(list(dict.fromkeys(terms))[:MAX_TERMS])


# --- the compiled form (what `kb models fetch` writes and the service loads in a fraction of a second) ---


def lexicon_lines(lexicon: Lexicon) -> list[str]:
    """`z<TAB>chinese<TAB>english words`, `e<TAB>english root<TAB>chinese words` and `s<TAB>stem<TAB>english
    root` lines, sorted."""
    lines = [f"z\t{zh}\t{' '.join(en)}" for zh, en in lexicon.zh_en.items()]
    lines += [f"e\t{en}\t{' '.join(zh)}" for en, zh in lexicon.en_zh.items() if zh]
    lines += [f"s\t{s}\t{root}" for s, root in lexicon.en_stems.items()]
    return sorted(lines)


def read_lexicon(lines: Iterable[str], name: str = "CC-CEDICT") -> Lexicon:
    """The Lexicon of `lexicon_lines`; raises ValueError on a line of another shape."""
    zh_en: dict[str, tuple[str, ...]] = {}
    en_zh: dict[str, tuple[str, ...]] = {}
    en_stems: dict[str, str] = {}
    words: dict[str, str] = {}  # one string object per distinct word
    for number, line in enumerate(lines, 1):
        kind, _, rest = line.rstrip("\n").partition("\t")
        key, tab, values = rest.partition("\t")
        if kind not in ("z", "e", "s") or not key or not tab or not values:
            raise ValueError(f"line {number} is not a lexicon entry")
        if kind == "s":
            en_stems[key] = words.setdefault(values, values)
            continue
        translated = tuple(words.setdefault(w, w) for w in values.split(" "))
        (zh_en if kind == "z" else en_zh)[key] = translated
    return Lexicon(zh_en, en_zh, max((len(w) for w in zh_en), default=1), name, en_stems)
