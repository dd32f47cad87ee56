"""benchmarks/speed/step_budget.py: its summary against a plain recount of hand-made rows, and its
committed results agree with their own runs. Fast: no fit runs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks.speed import step_budget

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sb():
    return step_budget


def _row(problem, setting, seed, err, viol):
    return {"problem": problem, "setting": setting, "seed": seed, "cpu_s": 1.0 + seed,
            "test_error": err, "test_gap": err / 10, "train_violation": viol}


def test_summary_means_and_counts_feasible_seeds(sb):
    rows = [_row("eo", "200:0.025", 0, 0.14, -1e-7), _row("eo", "200:0.025", 1, 0.16, 0.02),
            _row("eo", "500:0.01", 0, 0.15, 0.0)]
    table = {(t["problem"], t["setting"]): t for t in sb.summarize(rows)}
    short = table[("eo", "200:0.025")]
    assert short["test_error"] == pytest.approx(0.15)
    assert short["cpu_s"] == pytest.approx(1.5)
    assert short["train_violation_max"] == 0.02
    assert (short["feasible_seeds"], short["seeds"]) == (1, 2)
    assert table[("eo", "500:0.01")]["feasible_seeds"] == 1


def test_committed_summary_is_its_runs(sb):
    data = json.loads((ROOT / "benchmarks" / "results" / "step_budget.json").read_text())
    for t in data["summary"]:
        runs = [r for r in data["runs"]
                if (r["problem"], r["setting"]) == (t["problem"], t["setting"])]
        assert t["seeds"] == len(runs) == 5
        assert t["test_error"] == pytest.approx(statistics.mean(r["test_error"] for r in runs))
        assert t["feasible_seeds"] == sum(r["train_violation"] <= sb.FEASIBLE_BELOW
                                          for r in runs)
