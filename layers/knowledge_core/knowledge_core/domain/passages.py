"""Splitting document bodies into passages (chunks) for retrieval; every backend uses this one splitter."""

from __future__ import annotations

import re

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
