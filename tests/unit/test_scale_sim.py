"""R-BUDGET at scale (docs/scale.md): the discrete-event model of bench/scale_sim.py at a tiny size — no
design ever overspends, a finite root budget is spent exactly to its limit, escrow is all returned (also
from a sub-agent that crashed holding it), and both ways of lifting the root item beat today's throughput."""

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
SMALL = scale_sim.Workload(sub_agents=8, workers_per_sub=4, seconds=0.5, shards=8, escrow_slice=16, seed=3)


def test_r_budget_sharded_root_and_escrow_lift_throughput_without_overspend() -> None:
    runs = scale_sim.compare(SMALL)
    assert all(r.overspend == 0 and r.spends > 0 for r in runs.values())
    today = runs[scale_sim.TODAY].spends_per_second
    assert runs[scale_sim.SHARDED].spends_per_second > 1.5 * today
    assert runs[scale_sim.ESCROW].spends_per_second > 1.5 * today


@pytest.mark.parametrize("design", scale_sim.DESIGNS)
def test_r_budget_finite_root_is_spent_exactly_to_its_limit(design: str) -> None:
    budget = 1_000
    report = scale_sim.simulate(
        scale_sim.Workload(
            design=design,
            sub_agents=8,
            workers_per_sub=2,
            shards=8,
            escrow_slice=16,
            root_limit=budget,
            sub_limit=200,  # 8 x 200 > 1,000: some sub-agents stop on their own limit, the rest on the root's
            max_units=3,
            crashed_subs=1,
            lease_seconds=0.2,
            seed=5,
        )
    )
    assert report.overspend == 0
    assert report.spent + report.unspent == budget and report.refused > 0
    if design == scale_sim.ESCROW:  # simulate() also checks every sub-agent's escrow == spent at the end
        assert report.acquired == report.spent + report.returned and report.reclaims > 0
    else:  # exact refusals: none while the tree still had the units, and all of it spent
        assert report.premature == 0 and report.spent == budget


def test_r_budget_shares_add_up_to_the_root_limit() -> None:
    for limit in (0, 1, 63, 64, 50_000, 50_001):
        parts = scale_sim.shares(limit, 64)
        assert sum(parts) == limit and max(parts) - min(parts) <= 1
