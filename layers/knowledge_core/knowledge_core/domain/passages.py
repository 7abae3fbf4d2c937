"""Splitting document bodies into passages (chunks) for retrieval; every backend uses this one splitter.

A body is Markdown (the extractors turn HTML, DOCX and PDF into Markdown with their headings kept). The
splitter reads it as blocks — ATX headings, paragraphs, lists, tables, fenced code — and cuts passages that
never cross a heading: each passage carries its heading path (section › subsection, the document's title
left out: it travels beside), which matching and embedding see (`Passage.indexed`) and the cited text does
not repeat. A passage is always one contiguous slice of the body (`start`/`end`), so its pages (PDF) follow
from offsets. No passage is only a heading: a heading with no text under it yields none.

Size is counted in tokens of the embedding models' WordPiece vocabularies, by a pure-Python upper estimate
(`estimate_tokens`: a run of ASCII letters is ceil(n/3) tokens, a run of digits ceil(n/2), every other
non-space character — a CJK character, a punctuation mark — one), so the split is the same with or without
a model installed, on every backend. On XQuAD and the demo corpus the real token count of a paragraph is at
most 1.1 × the estimate for both bge tokenizers (tests/unit/test_passages.py checks every passage of the
demo corpus and XQuAD against the real tokenizers when they are installed): a passage's heading path and
text stay within PASSAGE_TOKENS (400) estimated tokens, which leaves the title room inside the models'
512-token window.

Blocks pack into a passage while they fit; a list, table or code block that fits is never cut (it starts
a new passage instead). A longer block is cut on sentence boundaries (English `.!?;` before a space, CJK
`。！？；` anywhere, closing quotes kept), a longer sentence on line breaks, then on spaces, then — CJK
runs without punctuation — on characters. Consecutive passages cut from one block share up to
PASSAGE_OVERLAP tokens of whole sentences (chosen on the tuning splits: docs/archive/quality-log.md).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

PASSAGE_TOKENS = 400
PASSAGE_OVERLAP = 0
MIN_TEXT_TOKENS = 64  # room kept for text however long a heading path is
HEADING_SEPARATOR = " › "

# One match per estimated token: a run of ASCII letters cut in threes, of digits in twos, any other
# non-space character alone (one C-level findall instead of a Python loop over the runs).
_TOKEN_PIECE = re.compile(r"[A-Za-z]{1,3}|[0-9]{1,2}|[^\sA-Za-z0-9]")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+")
_SENTENCE_END = re.compile(r"(?:[.!?;](?=\s)|[。！？；!?])[\"'”’)）」』\]]*\s*")
_LINE_END = re.compile(r"\n")
_SPACE_END = re.compile(r"\s+")
_EMPHASIS = re.compile(r"[*_`]+")
_COLONS = (":", "：")


def estimate_tokens(text: str) -> int:
    """An upper estimate of the WordPiece tokens of `text` (the rule is in the module docstring)."""
    return len(_TOKEN_PIECE.findall(text))


@dataclass(frozen=True)
class Passage:
    """One passage: the cited text (`body[start:end]`) and the heading path above it."""

    text: str
    headings: tuple[str, ...] = ()
    start: int = 0
    end: int = 0

    @property
    def heading_path(self) -> str:
        return HEADING_SEPARATOR.join(self.headings)

    @property
    def indexed(self) -> str:
        """What matching and embedding see besides the title: the heading path, then the text."""
        return f"{self.heading_path}\n{self.text}" if self.headings else self.text


@dataclass(frozen=True)
class StoredPassage:
    """One indexed passage of a document as a backend keeps it: its number, cited text, heading path and
    pages (what a reference quoting a passage in context reads of its neighbours)."""

    number: int
    text: str
    heading_path: str = ""
    pages: tuple[int, ...] = ()


def stored_passages(body: str, title: str, structured_source: dict[str, Any] | None) -> list[StoredPassage]:
    """A document's passages as every backend indexes them (`document_passages`), numbered, with pages."""
    passages = document_passages(body, title, structured_source)
    pages = pages_of(passages, page_starts_of(structured_source))
    return [
        StoredPassage(n, p.text, p.heading_path, tuple(on))
        for n, (p, on) in enumerate(zip(passages, pages, strict=True))
    ]


def indexed_text(heading_path: str | None, text: str) -> str:
    """`Passage.indexed` from a stored heading path and text (the backends keep both)."""
    return f"{heading_path}\n{text}" if heading_path else text


@dataclass(frozen=True)
class _Block:
    kind: str  # heading | para | list | table | code
    start: int
    end: int
    level: int = 0
    heading: str = ""


def _lines(body: str) -> Iterator[tuple[int, str]]:
    pos = 0
    for line in body.split("\n"):
        yield pos, line
        pos += len(line) + 1


def _kind_of(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith("|"):
        return "table"
    if _LIST_ITEM.match(line):
        return "list"
    return "para"


def _blocks(body: str) -> list[_Block]:
    """The body's Markdown blocks in order, with their offsets (horizontal rules dropped)."""
    out: list[_Block] = []
    kind, start, end = "", 0, 0
    fence = ""

    def close() -> None:
        nonlocal kind
        if kind:
            out.append(_Block(kind, start, end))
        kind = ""

    for pos, line in _lines(body):
        if fence:
            end = pos + len(line)
            if line.strip().startswith(fence):
                fence = ""
                close()
            continue
        if not line.strip():
            close()
            continue
        opened = _FENCE.match(line)
        heading = _HEADING.match(line)
        if opened:
            close()
            kind, start, end, fence = "code", pos, pos + len(line), opened.group(1)
        elif heading:
            close()
            text = _EMPHASIS.sub("", heading.group(2)).strip()
            out.append(_Block("heading", pos, pos + len(line), len(heading.group(1)), text))
        elif _RULE.match(line):
            close()
        else:
            line_kind = _kind_of(line)
            continues = (
                kind == line_kind
                or (kind == "list" and line[:1] in " \t")
                or (kind == "para" and line_kind == "para")
            )
            if not continues:
                close()
                kind, start = line_kind, pos + (len(line) - len(line.lstrip()))
            end = pos + len(line.rstrip())
    close()
    return out


def _pieces(body: str, start: int, end: int, pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    """body[start:end] cut after each match of `pattern` (the match stays with the piece before it)."""
    out: list[tuple[int, int]] = []
    cursor = start
    for m in pattern.finditer(body, start, end):
        if m.end() > cursor and body[cursor : m.end()].strip():
            out.append((cursor, m.end()))
            cursor = m.end()
    if body[cursor:end].strip():
        out.append((cursor, end))
    return out


_CUTS = (_SENTENCE_END, _LINE_END, _SPACE_END)


def _units(body: str, start: int, end: int, budget: int, level: int = 0) -> list[tuple[int, int]]:
    """body[start:end] as pieces of at most `budget` estimated tokens, cut as coarsely as possible:
    sentences, then lines, then spaces, then characters."""
    if estimate_tokens(body[start:end]) <= budget:
        return [(start, end)]
    if level == len(_CUTS):
        out, cursor, n = [], start, 0
        for i in range(start, end):
            n += estimate_tokens(body[i])
            if n > budget:
                out.append((cursor, i))
                cursor, n = i, estimate_tokens(body[i])
        return [*out, (cursor, end)]
    pieces = _pieces(body, start, end, _CUTS[level])
    if len(pieces) <= 1:
        return _units(body, start, end, budget, level + 1)
    return [u for a, b in pieces for u in _units(body, a, b, budget, level + 1)]


@dataclass
class _Packer:
    """Greedy packing of one section's units into passages of at most `budget` estimated tokens."""

    body: str
    headings: tuple[str, ...]
    budget: int
    overlap: int
    out: list[Passage]
    units: list[tuple[int, int, int, int]]  # start, end, tokens, block number

    def add(self, start: int, end: int, block: int) -> None:
        tokens = estimate_tokens(self.body[start:end])
        if self.units and sum(u[2] for u in self.units) + tokens + 1 > self.budget:
            carried = self._carry(block)
            moved = [] if carried else self._lead_in(block)
            self.units = self.units[: len(self.units) - len(moved)]
            self.flush()
            self.units = carried or moved
        self.units.append((start, end, tokens, block))

    def _carry(self, block: int) -> list[tuple[int, int, int, int]]:
        """Trailing units of the block being cut, up to `overlap` tokens (overlap only inside a block): they
        start the next passage too, so they are returned to be repeated, not moved."""
        carried: list[tuple[int, int, int, int]] = []
        for unit in reversed(self.units[1:]):
            if unit[3] != block or sum(u[2] for u in carried) + unit[2] > self.overlap:
                break
            carried.insert(0, unit)
        return carried

    def _lead_in(self, block: int) -> list[tuple[int, int, int, int]]:
        """A last unit that introduces what follows ("Other gotchas:") goes with it, never alone."""
        last = self.units[-1]
        if (
            len(self.units) > 1
            and last[3] != block
            and self.body[last[0] : last[1]].rstrip().endswith(_COLONS)
        ):
            return [last]
        return []

    def flush(self) -> None:
        if self.units:
            start, end = self.units[0][0], self.units[-1][1]
            self.out.append(Passage(self.body[start:end].strip(), self.headings, start, end))
        self.units = []


def _path(stack: list[tuple[int, str]], title: str) -> tuple[str, ...]:
    key = title.strip().casefold()
    return tuple(text for _, text in stack if text and text.casefold() != key)


def split_structured(
    body: str,
    title: str = "",
    size: int = PASSAGE_TOKENS,
    overlap: int = PASSAGE_OVERLAP,
    breaks: Sequence[int] = (),
) -> list[Passage]:
    """The passages of `body` (module docstring); a heading equal to `title` stays out of the paths.
    `breaks`: offsets where a new passage must begin (a PDF's page starts), so that a passage lies on the
    pages its hit names ("p. 2", not "pp. 1–2" for two short pages packed together)."""
    cuts = sorted(b for b in breaks if b > 0)
    out: list[Passage] = []
    stack: list[tuple[int, str]] = []
    packer: _Packer | None = None
    for number, block in enumerate(_blocks(body)):
        if block.kind == "heading":
            if packer is not None:
                packer.flush()
                packer = None
            stack = [(lvl, text) for lvl, text in stack if lvl < block.level] + [(block.level, block.heading)]
            continue
        if packer is None:
            headings = _path(stack, title)
            budget = max(size - estimate_tokens(HEADING_SEPARATOR.join(headings)), MIN_TEXT_TOKENS)
            packer = _Packer(body, headings, budget, overlap, out, [])
        # Lists, tables and code are cut between lines (rows, items) before anything finer.
        first = 0 if block.kind == "para" else 1
        for start, end in _units(body, block.start, block.end, packer.budget, first):
            if packer.units and _crosses(cuts, packer.units[0][0], start):
                packer.flush()
            packer.add(start, end, number)
    if packer is not None:
        packer.flush()
    if not out and body.strip():  # only headings: the text is all there is to find
        start = len(body) - len(body.lstrip())
        return [Passage(body.strip(), (), start, start + len(body.strip()))]
    return out or [Passage("")]


def _crosses(cuts: Sequence[int], begun: int, start: int) -> bool:
    """Whether a break lies after where the current passage began and at or before `start`."""
    i = bisect.bisect_right(cuts, begun)
    return i < len(cuts) and cuts[i] <= start


def document_passages(body: str, title: str, structured_source: dict[str, Any] | None) -> list[Passage]:
    """A stored document's passages, as every backend indexes them: cut at its pages' starts (PDF)."""
    return split_structured(body, title, breaks=page_starts_of(structured_source))


def split_passages(body: str, size: int = PASSAGE_TOKENS, overlap: int = PASSAGE_OVERLAP) -> list[str]:
    """The cited texts of `split_structured(body)` (callers that need only the texts, or their count)."""
    return [p.text for p in split_structured(body, size=size, overlap=overlap)]


def pages_of(passages: Sequence[Passage], page_starts: list[int]) -> list[list[int]]:
    """Per passage the 1-based pages its slice of the body spans, given the offset where each page starts
    (PDF, I-INGEST); empty lists when the document has no pages."""
    if not page_starts:
        return [[] for _ in passages]
    out: list[list[int]] = []
    for p in passages:
        first = bisect.bisect_right(page_starts, p.start)
        last = bisect.bisect_right(page_starts, max(p.start, p.end - 1))
        out.append(list(range(max(first, 1), max(last, 1) + 1)))
    return out


def passage_pages(body: str, passages: Sequence[str | Passage], page_starts: list[int]) -> list[list[int]]:
    """Per passage of `body` (as `split_passages` or `split_structured` cut it), the 1-based pages it
    spans, given the offset in `body` where each page starts (PDF, I-INGEST); empty lists when the
    document has no pages. Texts are located in the body in order (a Passage carries its offsets)."""
    if not page_starts:
        return [[] for _ in passages]
    located: list[Passage] = []
    cursor = 0
    for passage in passages:
        if isinstance(passage, Passage):
            located.append(passage)
            continue
        probe = passage.split("\n\n", 1)[0][:80]
        found = body.find(probe, cursor) if probe else -1
        start = found if found >= 0 else cursor
        located.append(Passage(passage, (), start, max(start + 1, start + len(passage))))
        cursor = start + 1
    return pages_of(located, page_starts)


def page_starts_of(structured_source: dict[str, Any] | None) -> list[int]:
    starts = (structured_source or {}).get("page_starts")
    return [int(s) for s in starts] if isinstance(starts, list) else []


_NOT_FOR_HITS = ("page_starts", "sync_origin")


def hit_source(structured_source: dict[str, Any] | None, pages: list[int] | None) -> dict[str, Any] | None:
    """What a hit (and a citation) carries of its document's `structured_source`: without the page
    offsets and the sync's origin digest (bookkeeping of ingestion, never an agent's business), with the
    pages of the passage that matched (`"pages": [12]`)."""
    if structured_source is None:
        return None
    out = {k: v for k, v in structured_source.items() if k not in _NOT_FOR_HITS}
    if pages:
        out["pages"] = pages
    return out


def page_label(structured_source: dict[str, Any] | None) -> str:
    """ "p. 12" or "pp. 12–13" for a hit whose passage has pages, else ""."""
    pages = (structured_source or {}).get("pages") or []
    if not pages:
        return ""
    return f"p. {pages[0]}" if len(pages) == 1 else f"pp. {pages[0]}–{pages[-1]}"
