"""Seeded random document metadata and §8 filters (every operator, nesting, absent keys) for the tests that
hold a compiled filter to the reference semantics (`domain.filters.matches`)."""

from __future__ import annotations

import random
from typing import Any

from knowledge_core.domain.filters import COMPARISONS, GROUPS, MAX_CONDITIONS, MAX_DEPTH

KEYS = ("region", "year", "score", "public", "tags", "team.name", "kind")
WORDS = ("eu", "eu-west", "us", "us-east", "apac", "hr", "policy", "Policy", "hr-internal", "")


def random_metadata(rng: random.Random) -> dict[str, Any] | None:
    """A document's metadata: some keys absent, values of every type (the same key of varying types)."""
    if rng.random() < 0.15:
        return None
    out: dict[str, Any] = {}
    for key in KEYS:
        if rng.random() < 0.35:
            continue
        out[key] = random_value(rng)
    return out


def random_value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.35:
        return rng.choice(WORDS)
    if roll < 0.6:
        return rng.choice([rng.randint(2019, 2026), rng.choice([0.5, -1.25, 2024.0, 1e3])])
    if roll < 0.75:
        return rng.random() < 0.5
    return rng.sample(WORDS, rng.randint(0, 3))


def _scalar(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(WORDS)
    if roll < 0.85:
        return rng.choice([rng.randint(2019, 2026), 0.5, 2024.0, -1.25])
    return rng.random() < 0.5


def random_condition(rng: random.Random) -> dict[str, Any]:
    op = rng.choice(COMPARISONS)
    key = rng.choice((*KEYS, "absent"))
    if op in ("equals", "notEquals"):
        value: Any = _scalar(rng)
    elif op in ("in", "notIn"):
        value = [_scalar(rng) for _ in range(rng.randint(0, 4))]
    elif op.startswith(("greater", "less")):
        value = rng.choice([rng.randint(2018, 2027), 0.5, 2024.0, -2])
    else:
        value = rng.choice(WORDS)[: rng.randint(0, 6)]
    return {op: {"key": key, "value": value}}


def random_filter(rng: random.Random, depth: int = 0, budget: list[int] | None = None) -> dict[str, Any]:
    """A valid filter: groups nest at most MAX_DEPTH deep, at most MAX_CONDITIONS conditions in all."""
    budget = budget if budget is not None else [MAX_CONDITIONS]
    if depth < MAX_DEPTH and budget[0] >= 2 and rng.random() < 0.45:
        width = rng.randint(2, min(4, budget[0]))
        budget[0] -= width  # every member needs at least one condition
        items = []
        for _ in range(width):
            budget[0] += 1
            items.append(random_filter(rng, depth + 1, budget))
        return {rng.choice(GROUPS): items}
    budget[0] -= 1
    return random_condition(rng)
