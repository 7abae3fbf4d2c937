"""Which passage of a ranked document a hit shows (issue 24: its summary and the agent tool's reference).

A backend's hit carries its document's best passage by BM25. With a query vector, the shown passage is the
document's passage that best blends the two signals instead, among its CITE_PASSAGES best passages by BM25:

    score = CITE_BM25_WEIGHT · bm25 / best bm25 of the document + (1 − CITE_BM25_WEIGHT) · cosine

(the cosine of the passage with the query vector of its model, as fusion uses it). The document's rank and
score do not change — only which of its passages is cited. A document whose passages have no vector of the
query's models, or whose best BM25 passage is not the one its hit shows (a document found by the dense
stage alone shows its nearest passage), keeps its passage. Both knobs were chosen on the tuning split of the
long-document task only (bench/QUALITY.md: the first reference holds the answer 0.920 → 0.933; CITE_PASSAGES
3 and above are equal there).

What the agent tool's reference quotes is that passage **in its context** (`in_context`): the passage, then
the whole sentences (or lines: lists, tables, PDF text) after and before it in turns, the next one first,
while the quote stays within REFERENCE_CHARS characters and inside the passage's section (never across a
heading). A passage is sized for the embedding models' 512-token window, so a Chinese passage holds about
400 characters against an English one's 1,000–1,400: the answer to a Chinese question is often in the
sentences beside the passage that matched. Chosen on the tuning split of the long-document task (bench/
QUALITY.md): the Chinese first reference holds the answer 0.910 → 0.955, the English one 0.969 → 0.973 (its
passages are mostly as long as the window already)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from .fusion import Hit
from .models import Document
from .passages import Passage, hit_source, page_starts_of, pages_of

CITE_PASSAGES = 3
CITE_BM25_WEIGHT = 0.3
REFERENCE_CHARS = 1000

# Where a quote may end: after a sentence's end (closing quotes kept) or at a line's end; the heading lines a
# quote never crosses.
_SENTENCE_STOP = re.compile(r"(?:[.!?;](?=\s)|[。！？；!?])[\"'”’)）」』\]]*")
_LINE_END = re.compile(r"\n")
_HEADING_LINE = re.compile(r"^ {0,3}#{1,6}[ \t].*$", re.MULTILINE)


def cited_passage(candidates: Sequence[tuple[float, float | None]]) -> int:
    """The index of the passage to cite among a document's (BM25 score, cosine) passages, best BM25 first;
    0 (the best BM25 passage) when any cosine is missing or no BM25 score is positive."""
    if not candidates or candidates[0][0] <= 0 or any(c is None for _, c in candidates):
        return 0
    best = candidates[0][0]
    scores = [CITE_BM25_WEIGHT * b / best + (1.0 - CITE_BM25_WEIGHT) * (c or 0.0) for b, c in candidates]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def cite(hit: Hit, candidates: Sequence[tuple[Hit, float | None]]) -> Hit:
    """`hit` showing the passage `cited_passage` picks among its document's `candidates` (as a backend's
    `passage_candidates` returns them: best BM25 first, each a copy of the hit with that passage and its
    BM25 score, with its cosine); `hit` itself when its passage is not the first candidate's."""
    if not candidates or candidates[0][0].passage != hit.passage:
        return hit
    chosen = candidates[cited_passage([(h.score, c) for h, c in candidates])][0]
    if chosen.passage == hit.passage:
        return hit
    return replace(hit, passage=chosen.passage, structured_source=chosen.structured_source)


def context_span(body: str, start: int, end: int, max_chars: int = REFERENCE_CHARS) -> tuple[int, int]:
    """The span of `body` a reference quotes around its passage `body[start:end]` (module docstring): whole
    sentences or lines after and before it in turns, the next first, while the span is at most `max_chars`
    long (surrounding whitespace left out) and crosses no heading line; a direction ends at the first unit
    that does not fit."""
    if end - start >= max_chars:
        return start, end
    low, high = max(0, end - max_chars), min(len(body), start + max_chars)
    low_edge, high_edge = low == 0, high == len(body)  # an edge a unit may end or begin at
    for heading in _HEADING_LINE.finditer(body, low, high):
        if heading.start() >= end:
            high, high_edge = heading.start(), True
            break
        if heading.end() <= start:
            low, low_edge = heading.end(), True
    ends = _units(body, end, high, high_edge)
    # (a unit may begin right at `low`: its end before it is looked for a little earlier)
    starts = [_skip_space(body, e) for e in _units(body, max(0, low - 8), start, False)] + [low] * low_edge
    starts = sorted({x for x in starts if low <= x < start and body[x:start].strip()})
    lo, hi = start, end
    forward, backward = iter(ends), iter(reversed(starts))  # nearest first
    grow_forward = grow_backward = True
    while grow_forward or grow_backward:
        if grow_forward:
            nxt = next(forward, None)
            grow_forward = nxt is not None and len(body[lo:nxt].strip()) <= max_chars
            hi = nxt if grow_forward and nxt is not None else hi
        if grow_backward:
            prv = next(backward, None)
            grow_backward = prv is not None and len(body[prv:hi].strip()) <= max_chars
            lo = prv if grow_backward and prv is not None else lo
    while lo < hi and body[lo].isspace():
        lo += 1
    while hi > lo and body[hi - 1].isspace():
        hi -= 1
    return lo, hi


def _units(body: str, start: int, end: int, edge: bool) -> list[int]:
    """The offsets in (start, end] where a sentence or a line ends, each after some text (a sentence's end
    followed by a line's end is one end); `end` itself when it is an edge (the body's end, a heading)."""
    found = sorted(
        {m.end() for m in _SENTENCE_STOP.finditer(body, start, end)}
        | {m.start() for m in _LINE_END.finditer(body, start, end)}
        | ({end} if edge else set())
    )
    out: list[int] = []
    for e in found:
        if e > start and body[out[-1] if out else start : e].strip():
            out.append(e)
    return out


def _skip_space(body: str, at: int) -> int:
    while at < len(body) and body[at].isspace():
        at += 1
    return at


def in_context(hit: Hit, document: Document | None, max_chars: int = REFERENCE_CHARS) -> Hit:
    """`hit` quoting its passage in context (`context_span`), with the pages of that quote; `hit` itself
    when its document is not the revision it was found in (never a newer body under the hit) or the
    passage is not found in the body."""
    if document is None or document.revision != hit.revision:
        return hit
    start = document.body.find(hit.passage) if hit.passage else -1
    if start < 0:
        return hit
    lo, hi = context_span(document.body, start, start + len(hit.passage), max_chars)
    if (lo, hi) == (start, start + len(hit.passage)):
        return hit
    pages = pages_of([Passage("", (), lo, hi)], page_starts_of(document.structured_source))[0]
    return replace(
        hit, passage=document.body[lo:hi], structured_source=hit_source(document.structured_source, pages)
    )
