"""Result fusion of the agent tool (R-FUSE): filter, per-source topK, Reciprocal Rank Fusion (k = 60),
structured-source + content-fingerprint dedup, deterministic LEXICAL rerank, routing topK. Pure."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .analyzer import content_terms, count_terms_in

RRF_K = 60


def content_fingerprint(content: str) -> str:
    """sha256 of the whitespace-normalised content: re-chunking whitespace does not make new content."""
    return "sha256:" + hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


def _canonical(value: dict[str, Any] | None) -> str | None:
    return (
        None
        if value is None
        else json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    )


@dataclass(frozen=True)
class Hit:
    """A search hit rolled up to its parent document, as its source ranked it: what a backend returns and
    what fusion ranks (its best passage is the content a citation quotes)."""

    source_key: str
    doc_id: str
    title: str
    revision: str
    score: float  # the vendor's score, kept as is
    passage: str
    structured_source: dict[str, Any] | None = None
    version: str = ""  # models.stored_version of the parent document when the backend read it ("": unknown)
    passage_no: int | None = None  # its passage's number in the document as indexed, when the backend knows


Candidate = Hit  # fusion's name for a hit it ranks


@dataclass(frozen=True)
class RankedList:
    """What one source returned for one query, best first, and its own limits."""

    source_key: str
    candidates: list[Candidate]
    top_k: int
    min_score: float = 0.0


@dataclass
class Fused:
    candidate: Candidate  # the best-ranked member of its merge group
    rrf: float
    fusion_score: float = 0.0
    lexical: int = 0
    merged: list[Candidate] = field(default_factory=list)  # other members that carried the same content
    best_rank: int = 0

    @property
    def fingerprint(self) -> str:
        return content_fingerprint(self.candidate.passage)


def positive(candidate: Candidate, min_score: float) -> bool:
    """A positive match: a finite vendor score above zero and at least the source's threshold."""
    return math.isfinite(candidate.score) and candidate.score > 0 and candidate.score >= min_score


def lexical_matches(candidate: Candidate, query_terms: list[str]) -> int:
    """How many distinct query terms (English words, CJK bigrams: `analyzer.content_terms`, so "who", "do",
    "I" and "a" count for nothing) occur in the title or content."""
    return count_terms_in(candidate.title + "\n" + candidate.passage, query_terms)


def fuse(
    lists: list[RankedList],
    *,
    query: str,
    top_k: int,
    rerank: str = "NONE",
    visible: Callable[[Candidate], bool] | None = None,
    k: int = RRF_K,
) -> list[Fused]:
    """Filter (visibility = tenant + ACL + live status, positive match) before ranking, keep each source's
    best `top_k`, fuse by RRF, merge equal structured source + content, rerank, keep routing `top_k`.

    fusionScore = RRF / (number of lists x 1/(k+1)): 1.0 for a document ranked first by every list,
    always finite and in (0, 1]. Ties break on exact source key, then doc id."""
    kept: list[list[Candidate]] = []
    for ranked in lists:
        survivors = [
            c for c in ranked.candidates if positive(c, ranked.min_score) and (visible is None or visible(c))
        ]
        kept.append(survivors[: ranked.top_k])
    contributing = sum(1 for cands in kept if cands)
    if not contributing:
        return []
    groups: dict[object, Fused] = {}
    for cands in kept:
        for rank, cand in enumerate(cands, start=1):
            # Merge only equal structured source and content; never on a shared doc number alone.
            key: object = (
                (_canonical(cand.structured_source), content_fingerprint(cand.passage))
                if cand.structured_source is not None
                else (cand.source_key, cand.doc_id)
            )
            share = 1.0 / (k + rank)
            group = groups.get(key)
            if group is None:
                groups[key] = Fused(candidate=cand, rrf=share, best_rank=rank)
                continue
            group.rrf += share
            if (rank, cand.source_key) < (group.best_rank, group.candidate.source_key):
                group.merged.append(group.candidate)
                group.candidate, group.best_rank = cand, rank
            else:
                group.merged.append(cand)
    best = 1.0 / (k + 1) * contributing
    fused = list(groups.values())
    for item in fused:
        item.fusion_score = min(1.0, item.rrf / best)
    fused.sort(key=lambda f: (-f.rrf, f.candidate.source_key, f.candidate.doc_id))
    if rerank == "LEXICAL":
        terms = content_terms(query)
        for item in fused:
            item.lexical = lexical_matches(item.candidate, terms)
        fused.sort(key=lambda f: -f.lexical)  # stable: ties keep fusion order
    return fused[:top_k]
