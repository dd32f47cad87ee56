"""The churn stand-in's committed result (benchmarks/results/reproduce_001_churn.json): its
figures and goals follow from its per-seed rows."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks.reproduce import reproduce_001_churn as bench

RESULT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / \
    "reproduce_001_churn.json"


def test_the_committed_goals_follow_from_the_seeds():
    result = json.loads(RESULT.read_text())
    rows = result["seeds"]
    assert len(rows) >= 5                                  # issue 47: at least 5 seeds
    churn = statistics.fmean(r["student_test_churn"] for r in rows)
    gap = statistics.fmean(r["student_test_error"] - r["unconstrained_test_error"] for r in rows)
    goals = result["goals"]
    assert goals["mean_test_churn"]["value"] == pytest.approx(churn, abs=1e-5)
    assert goals["mean_test_churn"]["met"] == (churn <= 0.025)
    assert goals["error_gap_to_unconstrained"]["value"] == pytest.approx(gap, abs=1e-5)
    assert goals["error_gap_to_unconstrained"]["met"] == (gap <= 0.002)
    figures, again = bench.summary(rows)
    assert again == goals and figures["mean_error_gap"] == result["figures"]["mean_error_gap"]
    assert result["tfco"]["test_error"] == 0.1410


def test_churn_of_adds_the_tolerance_back():
    assert bench.churn_of({"value": 0.0029}, 0.025) == pytest.approx(0.0279)
