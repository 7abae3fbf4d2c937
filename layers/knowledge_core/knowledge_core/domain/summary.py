"""A hint's summary (SPEC §2.3): the sentence window of its passage that best matches the query.

A passage is up to a few hundred tokens, a summary a few hundred bytes of the 4096-byte search response:
which part of the passage it shows decides whether it carries the answer. The passage is cut into
sentences (the splitter's boundaries: English `.!?;` before a space, CJK `。！？；`, and line breaks; the
closing quotes and Markdown emphasis after a sentence's end stay with it: `**Q: …?**`);
each sentence scores the query terms it contains (`analyzer.unique_terms`: words, CJK bigrams; English
stop words skipped), each term weighted by how rare it is among the passage's sentences (1 / the number of
sentences holding it), so a question word present everywhere counts little and the one sentence naming the
asked-about thing wins. The window grows from the best sentence to its neighbours (the following one
first: an answer tends to follow its cue) while it fits `max_bytes` of UTF-8, so an English summary holds
about three times the characters of a Chinese one in the same bytes; a best sentence longer than that is
cut around its first matching term. Cuts are on code points (Python strings), never inside one. No model:
deterministic and cheap on every door.

A summary is plain text for an agent, so a Markdown table in the passage is made legible first
(`legible_tables`): separator rows dropped, a row's first cell followed by `: ` and its other cells, each
named by its column's header when the passage holds the table's header and the table has more than two
columns (`Tier: API — Limit: 100; Burst: 20`), rows parted by `; `. The window is then chosen and cut
from that text, so the byte budget holds exactly.
"""

from __future__ import annotations

import re

from .analyzer import ENGLISH_STOPWORDS

# A shown sentence's end (a summary's, a reference quote's): English `.!?;` before a space, CJK `。！？；`,
# with the closing quotes and Markdown emphasis after it (`?**`). The splitter's own (passages.py) keeps
# quotes only: changing it re-splits every index.
SENTENCE_END = r"(?:[.!?;](?=\s)|[。！？；!?])[\"'”’)）」』\]*_]*"
_SENTENCE = re.compile(SENTENCE_END + r"\s*|\n+")
_ELLIPSIS = "…"
_ELLIPSIS_BYTES = len(_ELLIPSIS.encode("utf-8"))


_TABLE_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_TABLE_SEPARATOR_CELL = re.compile(r":?-+:?")
_ROW_END = re.compile(r"[.!?;:。！？；：,，]$")


def _cells(line: str) -> list[str] | None:
    """A Markdown table row's cells (outer pipes dropped, `\\|` unescaped); None for a non-table line."""
    stripped = line.strip()
    if not stripped.startswith("|"):
        return None
    inner = stripped[1:-1] if stripped.endswith("|") and len(stripped) > 1 else stripped[1:]
    return [c.strip().replace("\\|", "|") for c in _TABLE_CELL_SPLIT.split(inner)]


def _is_separator(cells: list[str]) -> bool:
    return bool(cells) and all(_TABLE_SEPARATOR_CELL.fullmatch(c.replace(" ", "")) for c in cells)


def _row_text(cells: list[str], header: list[str] | None) -> str:
    """One row as text: `first: second` (two columns, or no header), `first — H2: second; H3: third` when
    the header names the columns; empty cells skipped."""
    first, rest = cells[0], cells[1:]
    if header is not None and len(cells) > 2:
        named = [
            f"{header[i + 1]}: {c}" if i + 1 < len(header) and header[i + 1] else c
            for i, c in enumerate(rest)
            if c
        ]
        tail = "; ".join(named)
        return f"{first} — {tail}" if first and tail else first or tail
    values = [c for c in rest if c]
    if not first:
        return "; ".join(values)
    return f"{first}: {'; '.join(values)}" if values else first


def legible_tables(text: str) -> str:
    """`text` with each Markdown table row rewritten as plain text (the module docstring has the rule); other
    lines, and lines inside fenced code, unchanged."""
    lines = text.split("\n")
    parsed: list[list[str] | None] = []
    fenced = False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        parsed.append(None if fenced else _cells(line))
    if all(cells is None for cells in parsed):
        return text
    rows = [c is not None and not _is_separator(c) for c in parsed]  # lines that show as a row
    out: list[str] = []
    header: list[str] | None = None
    for i, cells in enumerate(parsed):
        if cells is None:
            header = None
            out.append(lines[i])
            continue
        if not rows[i]:
            continue
        after = next((j for j in range(i + 1, len(parsed)) if parsed[j] is None or rows[j]), None)
        if i + 1 < len(parsed) and parsed[i + 1] is not None and not rows[i + 1]:
            header = cells  # the row above a separator names the columns of the rows below
            if len(cells) > 2 and after is not None and rows[after]:
                continue  # each row below names its cells with it
        row = _row_text(cells, header if cells is not header else None)
        if not row:
            continue
        more = after is not None and rows[after]
        out.append(row + (";" if more and not _ROW_END.search(row) else ""))
    return "\n".join(out)


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


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


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


def focused_excerpt(passage: str, query_terms: list[str], max_bytes: int) -> str:
    """The best-matching sentence window of `passage`, whitespace-normalised, at most `max_bytes` of UTF-8
    with an ellipsis on each cut side (the module docstring has the rule)."""
    passage = legible_tables(passage)
    flat = _flat(passage)
    if _size(flat) <= max_bytes:
        return flat
    room = max_bytes - 2 * _ELLIPSIS_BYTES
    if room <= 0:
        return ""
    pieces = [p for p in (_flat(s) for s in sentences(passage)) if p]
    weights = _weights(pieces, query_terms)
    scores = [sum(w for t, w in weights.items() if t in p.lower()) for p in pieces]
    best = max(range(len(pieces)), key=lambda i: (scores[i], -i)) if pieces else 0
    if not pieces or _size(pieces[best]) > room:
        return _around(flat, pieces[best] if pieces else "", weights, room)
    sizes = [_size(p) + 1 for p in pieces]
    lo, hi, size = best, best + 1, sizes[best]
    grown = True
    while grown:
        grown = False
        if hi < len(pieces) and size + sizes[hi] <= room:  # the following sentence first
            size, hi, grown = size + sizes[hi], hi + 1, True
        if lo > 0 and size + sizes[lo - 1] <= room:
            size, lo, grown = size + sizes[lo - 1], lo - 1, True
    window = " ".join(pieces[lo:hi])
    return (_ELLIPSIS if lo > 0 else "") + window + (_ELLIPSIS if hi < len(pieces) else "")


def _fit(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` within `max_bytes` of UTF-8 (whole code points)."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def _around(flat: str, sentence: str, weights: dict[str, float], room: int) -> str:
    """About `room` bytes of `flat` from a little before the best sentence's first matching term (a
    sentence too long to show whole, or a passage without sentence breaks)."""
    at = max(flat.find(sentence), 0) if sentence else 0
    lower = flat.lower()
    found = [i for i in (lower.find(t, at) for t in weights) if i >= 0]
    first = min(found) if found else at
    lead = _fit(flat[:first][::-1], room // 4)[::-1]  # a quarter of the room before the term
    start = first - len(lead)
    piece = _fit(flat[start:], room)
    if start > 0 and start + len(piece) == len(flat):  # the end fits: as much before it as there is room
        piece = _fit(flat[::-1], room)[::-1]
        start = len(flat) - len(piece)
    return (_ELLIPSIS if start > 0 else "") + piece + (_ELLIPSIS if start + len(piece) < len(flat) else "")
