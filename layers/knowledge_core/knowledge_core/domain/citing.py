"""Which passage of a ranked document a hit shows (its summary and the agent tool's reference).

A backend's hit carries its document's best passage by BM25. With a query vector, the shown passage is the
document's passage that best blends the two signals instead, among its CITE_PASSAGES best passages by BM25:

    score = CITE_BM25_WEIGHT · bm25 / best bm25 of the document + (1 − CITE_BM25_WEIGHT) · cosine

(the cosine of the passage with the query vector of its model, as fusion uses it). The document's rank and
score do not change — only which of its passages is cited. A document whose passages have no vector of the
query's models, or whose best BM25 passage is not the one its hit shows (a document found by the dense
stage alone shows its nearest passage), keeps its passage. Both knobs were chosen on the tuning split of the
long-document task only (docs/archive/quality-log.md: the first reference holds the answer 0.920 → 0.933;
CITE_PASSAGES 3 and above are equal there).

What the agent tool's reference quotes is that passage **in its context** (`in_context`): its section's
passages around it (as the backend keeps them, NEIGHBOUR_RADIUS on each side, joined as paragraphs), of
which the text after and before it in turns, the next first — the rest of a paragraph or a whole paragraph
where it fits, else one sentence or line (lists, tables, PDF text) — while the quote stays within
REFERENCE_CHARS characters (`context_span`); and only when the whole quote fits what the call may still
spend (`fitting_quotes`), else the passage alone, so that a budget's cut never keeps the context before a
passage instead of the passage. A passage is sized for the embedding models' 512-token window, so a Chinese
passage holds about 400 characters against an English one's 1,000–1,400: the answer to a Chinese question
is often in the sentences beside the passage that matched. Chosen on the tuning split of the long-document
task (docs/archive/quality-log.md): the Chinese first reference holds the answer 0.910 → 0.958, the English
one 0.969 → 0.973 (its passages are mostly as long as the window already)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import replace

from .fusion import Hit
from .passages import StoredPassage
from .summary import SENTENCE_END

CITE_PASSAGES = 3
CITE_BM25_WEIGHT = 0.3
REFERENCE_CHARS = 1000

# Where a quote may end: after a sentence's end (summary.SENTENCE_END: closing quotes and Markdown emphasis
# kept) or at a line's end; the heading lines a quote never crosses. An end is looked for _MARKS chars
# beyond a window, so one cut by the window's edge is seen whole.
_MARKS = 8
_SENTENCE_STOP = re.compile(SENTENCE_END)
_LINE_END = re.compile(r"\n")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_UNIT_ENDS, _PARAGRAPH_ENDS = "unit", "paragraph"
_PARAGRAPH = "\n\n"  # between two passages of a quote
NEIGHBOUR_RADIUS = 4  # passages read on each side of a quoted one (a FAQ's 200-character answers fill 1,000)
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
    return replace(
        hit, passage=chosen.passage, structured_source=chosen.structured_source, passage_no=chosen.passage_no
    )


def context_span(body: str, start: int, end: int, max_chars: int = REFERENCE_CHARS) -> tuple[int, int]:
    """The span of `body` a reference quotes around its passage `body[start:end]` (module docstring): after
    and before it in turns, the next first, the rest of a paragraph or a whole paragraph where it fits, else
    one sentence or line of it, while the span is at most `max_chars` long (surrounding whitespace left out)
    and crosses no heading line; a direction ends when not even one sentence or line fits."""
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
    ends = [_units(body, end, high, high_edge, kind) for kind in (_PARAGRAPH_ENDS, _UNIT_ENDS)]
    starts = [_starts(body, low, start, low_edge, kind) for kind in (_PARAGRAPH_ENDS, _UNIT_ENDS)]
    lo, hi = start, end
    grow_forward = grow_backward = True
    while grow_forward or grow_backward:
        if grow_forward:  # the rest of the paragraph, else its next sentence or line
            options = [next((e for e in kind if e > hi), None) for kind in ends]
            fits = [e for e in options if e is not None and len(body[lo:e].strip()) <= max_chars]
            grow_forward = bool(fits)
            hi = fits[0] if fits else hi
        if grow_backward:
            options = [next((x for x in reversed(kind) if x < lo), None) for kind in starts]
            fits = [x for x in options if x is not None and len(body[x:hi].strip()) <= max_chars]
            grow_backward = bool(fits)
            lo = fits[0] if fits else lo
    while lo < hi and body[lo].isspace():
        lo += 1
    while hi > lo and body[hi - 1].isspace():
        hi -= 1
    return lo, hi


def _units(body: str, start: int, end: int, edge: bool, kind: str) -> list[int]:
    """The offsets in (start, end] where a unit of `kind` ends (a sentence or a line: _UNIT_ENDS; a
    paragraph: _PARAGRAPH_ENDS), each after some text (a sentence's end followed by a line's end is one
    end); `end` itself when it is an edge (the body's end, a heading)."""
    found = {m.start() for m in _BLANK_LINE.finditer(body, start, end)}
    if kind == _UNIT_ENDS:
        stops = _SENTENCE_STOP.finditer(body, start, min(len(body), end + _MARKS))
        found |= {m.end() for m in stops if m.end() <= end}
        found |= {m.start() for m in _LINE_END.finditer(body, start, end)}
    if edge:
        found.add(end)
    out: list[int] = []
    for e in sorted(found):
        if e > start and body[out[-1] if out else start : e].strip():
            out.append(e)
    return out


def _starts(body: str, low: int, start: int, edge: bool, kind: str) -> list[int]:
    """The offsets in [low, start) where a unit of `kind` begins: after the end of one (the space after it
    skipped; an end just before `low` is looked for too), and `low` itself when it is an edge."""
    after_ends = {_skip_space(body, e) for e in _units(body, max(0, low - _MARKS), start, False, kind)}
    return sorted(x for x in after_ends | ({low} if edge else set()) if low <= x < start)


def _skip_space(body: str, at: int) -> int:
    while at < len(body) and body[at].isspace():
        at += 1
    return at


def in_context(hit: Hit, neighbours: Sequence[StoredPassage], max_chars: int = REFERENCE_CHARS) -> Hit:
    """`hit` quoting its passage in context: `context_span` over the consecutive passages of its section
    among `neighbours` (its document's passages around it, as the backend keeps them), joined as
    paragraphs, with the pages of the passages the quote touches; `hit` itself when its passage is not
    among them (another revision, or gone)."""
    at = next(
        (i for i, p in enumerate(neighbours) if p.text == hit.passage and hit.passage_no in (None, p.number)),
        None,
    )
    if at is None:
        return hit
    cited = neighbours[at]

    def joins(i: int, j: int) -> bool:  # two passages side by side, both of the cited passage's section
        return (
            neighbours[j].number == neighbours[i].number + 1
            and neighbours[i].heading_path == neighbours[j].heading_path == cited.heading_path
        )

    first, last = at, at
    while first > 0 and joins(first - 1, first):
        first -= 1
    while last + 1 < len(neighbours) and joins(last, last + 1):
        last += 1
    run = neighbours[first : last + 1]
    starts = list(itertools.accumulate((len(p.text) + len(_PARAGRAPH) for p in run[:-1]), initial=0))
    text = _PARAGRAPH.join(p.text for p in run)
    start = starts[at - first]
    lo, hi = context_span(text, start, start + len(cited.text), max_chars)
    if (lo, hi) == (start, start + len(cited.text)):
        return hit
    pages = sorted(
        {n for p, s in zip(run, starts, strict=True) if s < hi and s + len(p.text) > lo for n in p.pages}
    )
    structured = hit.structured_source
    if structured is not None:
        structured = {k: v for k, v in structured.items() if k != "pages"} | (
            {"pages": pages} if pages else {}
        )
    return replace(hit, passage=text[lo:hi], structured_source=structured)


def fitting_quotes(pairs: Sequence[tuple[Hit, Hit]], source_max_chars: int, remaining: int) -> list[Hit]:
    """Per reference in rank order (the hit quoting its passage alone, the hit quoting it in context), the
    one it quotes: in context when that whole quote fits both its source's `sourceMaxChars` share left and
    the chain's `remaining` chars left after the references before it; else the passage alone, which the
    budget cuts as before (its beginning kept). Identical content a tree cited already spends nothing; it is
    counted here all the same (so a quote in context is never cut, at worst not taken)."""
    left: dict[str, int] = {}
    out: list[Hit] = []
    for alone, quoted in pairs:
        room = max(0, min(left.get(alone.source_key, source_max_chars), remaining))
        chosen = quoted if len(quoted.passage) <= room else alone
        used = min(len(chosen.passage), room)
        left[alone.source_key] = left.get(alone.source_key, source_max_chars) - used
        remaining -= used
        out.append(chosen)
    return out
