"""R-BUDGET at scale (docs/scale.md): the discrete-event model of bench/scale_sim.py at a tiny size — neither
today's ledger nor sharded root counters ever overspend, a finite root budget is spent exactly to its
limit, and sharding the root lifts the throughput of one tree above today's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    # bench/ is a folder of scripts, not a package: load the module from its file.
    path = Path(__file__).resolve().parents[2] / "bench" / "scale_sim.py"
    spec = importlib.util.spec_from_file_location("scale_sim", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


scale_sim = _load()
SMALL = scale_sim.Workload(sub_agents=8, workers_per_sub=4, seconds=0.5, shards=8, seed=3)


def test_r_budget_sharded_root_lifts_throughput_without_overspend() -> None:
    today, sharded = scale_sim.compare(SMALL)
    assert today.overspend == 0 and sharded.overspend == 0
    assert today.spends > 0 and sharded.spends > 0
    assert sharded.spends_per_second > 1.5 * today.spends_per_second


@pytest.mark.parametrize("design", [scale_sim.TODAY, scale_sim.SHARDED])
def test_r_budget_finite_root_is_spent_exactly_to_its_limit(design: str) -> None:
    budget = 1_000
    report = scale_sim.simulate(
        scale_sim.Workload(
            design=design,
            sub_agents=8,
            workers_per_sub=2,
            shards=8,
            root_limit=budget,
            sub_limit=200,  # 8 x 200 > 1,000: some sub-agents stop on their own limit, the rest on the root's
            max_units=3,
            seed=5,
        )
    )
    assert report.overspend == 0
    assert report.spent == budget and report.unspent == 0
    assert report.refused > 0


def test_r_budget_shares_add_up_to_the_root_limit() -> None:
    for limit in (0, 1, 63, 64, 50_000, 50_001):
        parts = scale_sim.shares(limit, 64)
        assert sum(parts) == limit and max(parts) - min(parts) <= 1
