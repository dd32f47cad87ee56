"""benchmarks/speed/time_to_quality.py's scoring against independent references: fairlearn's
MetricFrame (pairwise and to-overall differences, sample-weighted for expected predictions)
and fairgames' own constraint values. Fast: no benchmark fit runs."""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pytest
import torch
from fairlearn.metrics import (
    MetricFrame,
    demographic_parity_difference,
    equal_opportunity_difference,
    selection_rate,
    true_positive_rate,
)
from sklearn.metrics import zero_one_loss

from benchmarks.speed import time_to_quality

ROOT = Path(__file__).resolve().parents[2]
TOL = 0.03


@pytest.fixture(scope="module")
def ttq():
    # registered: a sibling benchmark (step_budget) imports the script under the same name,
    # and doctest finds a module's examples through sys.modules
    return time_to_quality


def random_data(seed: int, n: int = 600, groups: int = 3):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(np.float64)
    g = rng.integers(0, groups, n)
    # a group-dependent predictor, so that the gaps are far from zero
    hard = (rng.random(n) < 0.2 + 0.5 * y + 0.1 * g).astype(np.float64)
    return y, g, hard


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hard_predictions_agree_with_metricframe(ttq, seed):
    y, g, pred = random_data(seed)
    tpr = MetricFrame(metrics=true_positive_rate, y_true=y, y_pred=pred, sensitive_features=g)
    ppr = MetricFrame(metrics=selection_rate, y_true=y, y_pred=pred, sensitive_features=g)
    assert ttq.error_rate(pred, y) == pytest.approx(zero_one_loss(y, pred))
    assert ttq.pairwise_gap(pred, y, g, "tpr") == pytest.approx(
        equal_opportunity_difference(y, pred, sensitive_features=g))
    assert ttq.pairwise_gap(pred, y, g, "tpr") == pytest.approx(
        tpr.difference(method="between_groups"))
    assert ttq.pairwise_gap(pred, y, g, "ppr") == pytest.approx(
        demographic_parity_difference(y, pred, sensitive_features=g))
    # fairgames' one-sided forms: the largest shortfall of a group's TPR below the overall
    # TPR; the largest distance of a group's selection rate from the overall one
    assert ttq.one_sided_violation(pred, y, g, "tpr", TOL) == pytest.approx(
        float((tpr.overall - tpr.by_group).max()) - TOL)
    assert ttq.one_sided_violation(pred, y, g, "ppr", TOL) == pytest.approx(
        ppr.difference(method="to_overall") - TOL)
    assert ttq.pairwise_gap(pred, y, g, "tpr") > 0.05     # the case is not degenerate


@pytest.mark.parametrize("seed", [0, 1])
def test_expected_predictions_agree_with_weighted_metricframe(ttq, seed):
    """A randomised classifier's expected rates: each row counted as ŷ = 1 with weight p and
    ŷ = 0 with weight 1 − p."""
    y, g, _ = random_data(seed)
    p = np.random.default_rng(seed + 10).random(len(y))
    yy, gg = np.concatenate([y, y]), np.concatenate([g, g])
    pred = np.concatenate([np.ones_like(p), np.zeros_like(p)])
    w = np.concatenate([p, 1.0 - p])
    params = {"sample_weight": w}
    tpr = MetricFrame(metrics=true_positive_rate, y_true=yy, y_pred=pred, sensitive_features=gg,
                      sample_params=params)
    ppr = MetricFrame(metrics=selection_rate, y_true=yy, y_pred=pred, sensitive_features=gg,
                      sample_params=params)
    assert ttq.error_rate(p, y) == pytest.approx(zero_one_loss(yy, pred, sample_weight=w))
    assert ttq.pairwise_gap(p, y, g, "tpr") == pytest.approx(
        tpr.difference(method="between_groups"))
    assert ttq.pairwise_gap(p, y, g, "ppr") == pytest.approx(
        ppr.difference(method="between_groups"))
    assert ttq.one_sided_violation(p, y, g, "tpr", TOL) == pytest.approx(
        float((tpr.overall - tpr.by_group).max()) - TOL)
    assert ttq.one_sided_violation(p, y, g, "ppr", TOL) == pytest.approx(
        ppr.difference(method="to_overall") - TOL)


@pytest.mark.parametrize("problem", ["equal_opportunity", "demographic_parity"])
def test_one_sided_form_is_fairgames_constraint(ttq, problem):
    """The benchmark's one-sided violation of a fairgames model equals the largest constraint
    value fairgames reports for it (same tolerance), and the cooper rows' true-rate form too."""
    from fairgames.data import make_synthetic
    from fairgames.train import fit

    splits = make_synthetic(n=900, d=4, seed=0)
    result = fit(torch.nn.Linear(4, 1), problem, splits, protected="group", tolerance=TOL,
                 trainer={"steps": 30, "log_every": 10, "snapshot_every": 5})
    rate = ttq.PROBLEMS[problem]
    for split, ds in splits.items():
        reported = result.results["solutions"]["final"][split]["constraints"]
        p = ttq.deployed_proba(result.model, ds.features)
        y, g = ds.labels.numpy(), ds.groups["group"].numpy()
        ours = ttq.one_sided_violation(p, y, g, rate, TOL)
        assert ours == pytest.approx(max(c["value"] for c in reported.values()), abs=1e-6)
        rows = ttq.constraint_rows(torch.from_numpy(p), torch.from_numpy(y).double(),
                                   ds.groups["group"], rate)
        assert float(rows.max()) == pytest.approx(ours + TOL - ttq.TOLERANCE, abs=1e-9)


def test_doctests(ttq):
    failed, attempted = doctest.testmod(ttq, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted >= 4 and failed == 0
