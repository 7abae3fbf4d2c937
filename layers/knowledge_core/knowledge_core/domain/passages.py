"""Splitting document bodies into passages (chunks) for retrieval; every backend uses this one splitter."""

from __future__ import annotations

import bisect
import re
from typing import Any

PASSAGE_CHARS = 800
PASSAGE_OVERLAP = 100
_PARAGRAPH = re.compile(r"\n\s*\n")


def split_passages(body: str, size: int = PASSAGE_CHARS, overlap: int = PASSAGE_OVERLAP) -> list[str]:
    """Paragraphs packed up to `size` characters; a longer paragraph is windowed with `overlap`."""
    passages: list[str] = []
    current = ""
    for para in (p.strip() for p in _PARAGRAPH.split(body)):
        if not para:
            continue
        if len(para) > size:
            if current:
                passages.append(current)
                current = ""
            step = size - overlap
            passages.extend(para[i : i + size] for i in range(0, max(len(para) - overlap, 1), step))
            continue
        if current and len(current) + 2 + len(para) > size:
            passages.append(current)
            current = para
        else:
            current = f"{current}\n\n{para}" if current else para
    if current:
        passages.append(current)
    return passages or [""]


def passage_pages(body: str, passages: list[str], page_starts: list[int]) -> list[list[int]]:
    """Per passage of `body` (as `split_passages` cut it), the 1-based pages it spans, given the offset in
    `body` where each page starts (PDF, I-INGEST); empty lists when the document has no pages."""
    if not page_starts:
        return [[] for _ in passages]
    out: list[list[int]] = []
    cursor = 0
    for passage in passages:
        probe = passage.split("\n\n", 1)[0][:80]
        found = body.find(probe, cursor) if probe else -1
        start = found if found >= 0 else cursor
        end = max(start + 1, start + len(passage))
        first = bisect.bisect_right(page_starts, start)
        last = bisect.bisect_right(page_starts, end - 1)
        out.append(list(range(max(first, 1), max(last, 1) + 1)))
        cursor = start + 1
    return out


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
