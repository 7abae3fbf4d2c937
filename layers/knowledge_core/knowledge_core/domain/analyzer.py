"""Query/document analysis shared by the embedded backend and the router: English terms and CJK bigrams."""

from __future__ import annotations

import re

# Runs of letters/digits (Latin and other alphabetic scripts), or runs of CJK ideographs / kana / hangul.
_TOKEN_RE = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+"
    r"|[^\W_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+",
    re.UNICODE,
)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def is_cjk(text: str) -> bool:
    return bool(_CJK_RE.match(text))


def terms(text: str) -> list[str]:
    """Lower-cased English/alphanumeric words and CJK character bigrams (a lone CJK character stays a unigram)."""
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


def unique_terms(text: str) -> list[str]:
    """`terms` without repeats, first occurrence order."""
    return list(dict.fromkeys(terms(text)))
