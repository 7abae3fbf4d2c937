"""Shared helpers for benchmarks: interleaved timing and ratio reports (this machine is noisy)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def interleaved(
    subject: Callable[[], object], baseline: Callable[[], object], rounds: int, warmup: int = 20
) -> tuple[list[float], list[float]]:
    """Alternate subject and baseline calls so drift and noise hit both alike; seconds per call."""
    for _ in range(warmup):
        subject()
        baseline()
    s, b = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subject()
        t1 = time.perf_counter()
        baseline()
        t2 = time.perf_counter()
        s.append(t1 - t0)
        b.append(t2 - t1)
    return s, b


def report(
    name: str, subject: list[float], baseline: list[float], baseline_name: str, target: str = ""
) -> dict:
    sp50, sp99 = percentile(subject, 50) * 1000, percentile(subject, 99) * 1000
    bp50, bp99 = percentile(baseline, 50) * 1000, percentile(baseline, 99) * 1000
    ratio = sp50 / bp50 if bp50 else float("inf")
    print(
        f"{name:<34} p50 {sp50:8.3f} ms  p99 {sp99:8.3f} ms | {baseline_name:<28} p50 {bp50:8.3f} ms "
        f"p99 {bp99:8.3f} ms | ratio p50 {ratio:5.2f}x {target}"
    )
    return {
        "name": name,
        "p50_ms": sp50,
        "p99_ms": sp99,
        "baseline": baseline_name,
        "baseline_p50_ms": bp50,
        "baseline_p99_ms": bp99,
        "ratio_p50": ratio,
        "mean_ms": statistics.fmean(subject) * 1000,
    }


def in_blocks(
    subjects: dict[Any, Callable[[int], object]], rounds: int, block: int, warm: int = 3
) -> dict[Any, list[float]]:
    """Time every subject `rounds` times (seconds per call), taking turns in blocks of `block` calls after
    `warm` untimed ones, so the machine's drift hits every subject alike while each is timed warm (one call
    per turn would time each subject cold). A subject is called with the round's number."""
    samples: dict[Any, list[float]] = {key: [] for key in subjects}
    for start in range(0, rounds, block):
        for key, call in subjects.items():
            for _ in range(warm):  # a subject idle while the others ran: caches and wake-ups first
                call(start)
            for i in range(start, min(start + block, rounds)):
                t0 = time.perf_counter()
                call(i)
                samples[key].append(time.perf_counter() - t0)
    return samples
