"""Byte-exact text budgeting: JSON-escaped sizes, code-point-safe cuts, titles and excerpts."""

from __future__ import annotations

import json

TITLE_MAX_CHARS = 256


def dumps(obj: object) -> str:
    """The one compact JSON encoding used for every byte budget (UTF-8, no ASCII escaping)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_size(obj: object) -> int:
    return len(dumps(obj).encode("utf-8"))


def escaped_size(text: str) -> int:
    """Bytes `text` occupies inside a compact UTF-8 JSON string, quotes excluded."""
    return len(dumps(text).encode("utf-8")) - 2


def cut_title(title: str) -> str:
    """At most 256 characters (code points), so a cut never splits one."""
    return title[:TITLE_MAX_CHARS]


def fit_text(text: str, budget: int) -> str:
    """Longest prefix of `text` whose JSON-escaped size is <= budget bytes, cut on a code point."""
    if budget <= 0:
        return ""
    # Every character escapes to >= 1 byte, so at most `budget` characters can fit.
    hi = min(len(text), budget)
    over = escaped_size(text[:hi]) - budget
    if over <= 0:
        return text[:hi]
    # Dropping `over` characters removes >= `over` bytes, so text[:lo] fits. JSON escapes each character on
    # its own, so sizes add up: search the short tail between lo and hi instead of re-encoding the prefix.
    lo = max(0, hi - over)
    room = budget - escaped_size(text[:lo])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        cost = escaped_size(text[lo:mid])
        if cost <= room:
            lo, room = mid, room - cost
        else:
            hi = mid
    return text[:lo]


def fit_bytes(body: bytes, start: int, budget: int) -> int:
    """End offset (exclusive) of the longest slice body[start:end] that is whole code points and whose
    JSON-escaped size is <= budget. `start` must be on a code point boundary."""
    end = _boundary_before(body, min(len(body), start + max(budget, 0)))
    return start + len(fit_text(body[start:end].decode("utf-8"), budget).encode("utf-8"))


def _boundary_before(body: bytes, pos: int) -> int:
    """Largest code point boundary <= pos."""
    pos = max(0, min(pos, len(body)))
    while 0 < pos < len(body) and (body[pos] & 0xC0) == 0x80:
        pos -= 1
    return pos


def excerpt(passage: str, query_terms: list[str], max_chars: int = 320) -> str:
    """A bounded, whitespace-normalised excerpt of `passage`, centred on the first query term it contains."""
    flat = " ".join(passage.split())
    if len(flat) <= max_chars:
        return flat
    lower = flat.lower()
    hits = [i for i in (lower.find(t) for t in query_terms if t) if i >= 0]
    first = min(hits) if hits else 0
    start = max(0, min(first - max_chars // 4, len(flat) - max_chars))
    piece = flat[start : start + max_chars]
    return ("…" if start > 0 else "") + piece + ("…" if start + max_chars < len(flat) else "")
