"""The churn-scenario benchmark (benchmarks/reproduce/reproduce_001_churn_recall.py): its
figures against numpy on hand-made predictions, and its committed result's goals follow from
its per-seed rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.reproduce import reproduce_001_churn_recall as bench

RESULT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / \
    "reproduce_001_churn_recall.json"


def test_figures_against_counts():
    rng = np.random.default_rng(0)
    n = 500
    y = rng.integers(0, 2, n).astype(float)
    src = rng.integers(0, 3, n)
    p, base = rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)
    got = bench.figures_of(p, y, src, base)
    d1, d2, d3 = src == 0, src == 1, src == 2
    errors = np.sum(p[d1] != y[d1]) / d1.sum()
    fps = np.sum((p[d2] == 1) & (y[d2] == 0)) / d2.sum()
    assert got["objective"] == pytest.approx(errors + fps, abs=1e-6)
    assert got["recall_d2"] == pytest.approx(
        np.sum((p == 1) & (y == 1) & d2) / np.sum((y == 1) & d2), abs=1e-6)
    assert got["churn_d3"] == pytest.approx(np.mean(p[d3] != base[d3]), abs=1e-6)


def test_the_committed_goals_follow_from_the_rows():
    result = json.loads(RESULT.read_text())
    rows = result["seeds"]
    assert result["goals"] == bench.evaluate(rows)
    for r in rows:
        reference = r["bias_shifted"]["train"]["churn_d3"]
        # the bias-shifted baseline meets the recall floor on train (its definition)
        assert r["bias_shifted"]["train"]["recall_d2"] >= r["deployed_recall_d2_train"]
        assert r["deployed"]["train"]["churn_d3"] == 0.0
        assert [o["share"] for o in r["ours"]] == list(bench.SHARES)
        for o in r["ours"]:                  # targets between 25 % and 100 % of its churn
            assert o["target"] == pytest.approx(o["share"] * reference, abs=1e-6)
    assert result["config"]["steps"] == bench.STEPS
    figures = dict(result["figures"])
    assert figures.pop("seconds") < 600                 # under 10 min at one thread
    assert figures == bench.summary_figures(rows)
