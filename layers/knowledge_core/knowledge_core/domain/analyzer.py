"""Query/document analysis shared by the embedded backend and the router: English terms and CJK bigrams."""

from __future__ import annotations

import re
from collections.abc import Callable

from .cache import BoundedCache

# Runs of letters/digits (Latin and other alphabetic scripts), or runs of CJK ideographs / kana / hangul.
_TOKEN_RE = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+"
    r"|[^\W_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+",
    re.UNICODE,
)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def is_cjk(text: str) -> bool:
    return bool(_CJK_RE.match(text))


def has_cjk(text: str) -> bool:
    """Any CJK ideograph, kana or hangul anywhere in `text`."""
    return _CJK_RE.search(text) is not None


def terms(text: str) -> list[str]:
    """Lower-cased English/alphanumeric words and CJK character bigrams (a lone CJK character stays a
    unigram)."""
    out: list[str] = []
    for run in _TOKEN_RE.findall(text.lower()):
        if is_cjk(run):
            if len(run) == 1:
                out.append(run)
            else:
                out.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            out.append(run)
    return out


def _word_char(c: str) -> bool:
    """A character of a non-CJK token run (`_TOKEN_RE`'s second branch: \\w without `_` and CJK)."""
    return c.isalnum() and not _CJK_RE.match(c)


def _occurs_as_run(term: str, text: str, inside: Callable[[str], bool]) -> bool:
    """`term` occurs in `text` with no character of its own kind (`inside`) on either side."""
    start = text.find(term)
    while start >= 0:
        end = start + len(term)
        if (start == 0 or not inside(text[start - 1])) and (end == len(text) or not inside(text[end])):
            return True
        start = text.find(term, start + 1)
    return False


def count_terms_in(text: str, wanted: list[str]) -> int:
    """How many of `wanted` (distinct `terms`) are terms of `text`, without analysing the whole text: a CJK
    bigram is a term exactly when it occurs (both characters are CJK, so they sit in one run); a word or a
    lone CJK character must occur as a whole run."""
    lowered = text.lower()
    count = 0
    for term in wanted:
        if is_cjk(term):
            found = term in lowered if len(term) == 2 else _occurs_as_run(term, lowered, is_cjk)
        else:
            found = _occurs_as_run(term, lowered, _word_char)
        count += found
    return count


def unique_terms(text: str) -> list[str]:
    """`terms` without repeats, first occurrence order."""
    return list(dict.fromkeys(terms(text)))


def content_terms(text: str) -> list[str]:
    """`unique_terms` without English function words (`FUNCTION_WORDS`): what a query asks about, as the
    router matches it against a source's description and the LEXICAL rerank counts it in a passage."""
    return [t for t in unique_terms(text) if t not in FUNCTION_WORDS]


# --- search-index analysis (the backends' index and query terms; the router keeps `terms`) ---------------

# Lucene's English stop set: words too common to rank by.
ENGLISH_STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    )
)
# Lucene's stop set and the words of a question (who, how, do I, …): present in any English text.
FUNCTION_WORDS = ENGLISH_STOPWORDS | frozenset(
    (
        "can",
        "do",
        "does",
        "from",
        "how",
        "i",
        "my",
        "our",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "you",
        "your",
    )
)
# Bounded by bytes (S5): query words come from callers. 8 MiB holds ~50,000 ordinary words; a word longer
# than any English one (64+ chars) is stemmed each time instead of kept.
STEM_CACHE_BYTES = 8 * 1024 * 1024
_stem_cache: BoundedCache[str, str] = BoundedCache(STEM_CACHE_BYTES, max_entry_bytes=400)
_stemmer = None


def stem(word: str) -> str:
    """Snowball English (Porter2) stem of a lower-cased word; ASCII-letter words only (codes, numbers and
    other scripts stay as they are)."""
    cached = _stem_cache.get(word)
    if cached is not None:
        return cached
    global _stemmer
    if _stemmer is None:
        import snowballstemmer

        _stemmer = snowballstemmer.stemmer("english")
    out = _stemmer.stemWord(word) if word.isascii() and word.isalpha() else word
    _stem_cache.put(word, out)
    return out


def index_terms(text: str, cjk_unigrams: bool = False) -> list[str]:
    """Terms a search index stores and matches: English words minus stop words, Snowball-stemmed; CJK runs as
    character bigrams (plus each character when `cjk_unigrams`; a lone character is always kept)."""
    out: list[str] = []
    for run in _TOKEN_RE.findall(text.lower()):
        if is_cjk(run):
            if len(run) == 1:
                out.append(run)
                continue
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
            if cjk_unigrams:
                out.extend(run)
        elif run not in ENGLISH_STOPWORDS:
            out.append(stem(run))
    return out


def query_terms(text: str, cjk_unigrams: bool = False) -> list[str]:
    """`index_terms` of a query without repeats, first occurrence order."""
    return list(dict.fromkeys(index_terms(text, cjk_unigrams)))
