"""A hint's summary (SPEC §2.3, issue 24): the sentence window of its passage that best matches the query.

A passage is up to a few hundred tokens, a summary at most SUMMARY_MAX_CHARS characters: which part of the
passage it shows decides whether it carries the answer. The passage is cut into sentences (the splitter's
boundaries: English `.!?;` before a space, CJK `。！？；`, and line breaks); each sentence scores the query
terms it contains (`analyzer.unique_terms`: words, CJK bigrams; English stop words skipped), each term
weighted by how rare it is among the passage's sentences (1 / the number of sentences holding it), so a
question word present everywhere counts little and the one sentence naming the asked-about thing wins.
The window grows from the best sentence to its neighbours (the following one first: an answer tends to
follow its cue) while it fits, then is cut, never inside a code point (Python strings cut on code points),
around the best sentence when that alone is longer. No model: deterministic and cheap on every door.
"""

from __future__ import annotations

import re

from .analyzer import ENGLISH_STOPWORDS

_SENTENCE = re.compile(r"(?:[.!?;](?=\s)|[。！？；!?])[\"'”’)）」』\]]*\s*|\n+")


def sentences(text: str) -> list[str]:
    """`text` cut after each sentence end or line break (pieces keep their punctuation)."""
    out: list[str] = []
    cursor = 0
    for m in _SENTENCE.finditer(text):
        if text[cursor : m.end()].strip():
            out.append(text[cursor : m.end()])
        cursor = m.end()
    if text[cursor:].strip():
        out.append(text[cursor:])
    return out


def _weights(pieces: list[str], terms: list[str]) -> dict[str, float]:
    """Each query term found in the passage, weighted 1 / (sentences holding it)."""
    lowered = [p.lower() for p in pieces]
    out: dict[str, float] = {}
    for term in terms:
        if not term or term in ENGLISH_STOPWORDS or (term.isascii() and len(term) < 2):
            continue
        holding = sum(1 for p in lowered if term in p)
        if holding:
            out[term] = 1.0 / holding
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def focused_excerpt(passage: str, query_terms: list[str], max_chars: int) -> str:
    """The best-matching sentence window of `passage`, whitespace-normalised, at most `max_chars`
    characters plus an ellipsis on each cut side (the module docstring has the rule)."""
    flat = _flat(passage)
    if len(flat) <= max_chars:
        return flat
    if max_chars <= 0:
        return ""
    pieces = [_flat(p) for p in sentences(passage)]
    pieces = [p for p in pieces if p]
    weights = _weights(pieces, query_terms)
    scores = [sum(w for t, w in weights.items() if t in p.lower()) for p in pieces]
    best = max(range(len(pieces)), key=lambda i: (scores[i], -i)) if pieces else 0
    if not pieces or len(pieces[best]) > max_chars:
        return _around(flat, pieces[best] if pieces else "", weights, max_chars)
    lo, hi, size = best, best + 1, len(pieces[best])
    grown = True
    while grown:
        grown = False
        if hi < len(pieces) and size + 1 + len(pieces[hi]) <= max_chars:  # the following sentence first
            size, hi, grown = size + 1 + len(pieces[hi]), hi + 1, True
        if lo > 0 and size + 1 + len(pieces[lo - 1]) <= max_chars:
            size, lo, grown = size + 1 + len(pieces[lo - 1]), lo - 1, True
    window = " ".join(pieces[lo:hi])
    return ("…" if lo > 0 else "") + window + ("…" if hi < len(pieces) else "")


def _around(flat: str, sentence: str, weights: dict[str, float], max_chars: int) -> str:
    """A `max_chars` cut of `flat` around the best sentence's first matching term (a sentence too long
    to show whole, or a passage without sentence breaks)."""
    at = flat.find(sentence) if sentence else 0
    lower = flat.lower()
    found = [i for i in (lower.find(t, max(at, 0)) for t in weights) if i >= 0]
    first = min(found) if found else max(at, 0)
    start = max(0, min(first - max_chars // 4, len(flat) - max_chars))
    piece = flat[start : start + max_chars]
    return ("…" if start > 0 else "") + piece + ("…" if start + max_chars < len(flat) else "")
