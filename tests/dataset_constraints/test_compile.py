"""Rate expressions compiled into MM's positive rows: their ramp values equal the expressions
evaluated with the ramp's probabilities (numpy, written out here), and what MM cannot play is
refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from fairgames.dataset_constraints.compile import (
    NotPlayableError,
    RowData,
    constraint_row,
    objective_row,
)
from fairgames.dataset_constraints.ramp import ramp_rates
from fairgames.rates import (
    error_rate,
    group,
    group_loss,
    positive_prediction_rate,
    true_positive_rate,
)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    n = 300
    return RowData(labels=(rng.random(n) < 0.4).astype(int),
                   groups={"sex": (rng.random(n) < 0.3).astype(int)},
                   group_names={"sex": ["Female", "Male"]},
                   weights=rng.uniform(0.5, 2.0, n)), rng.normal(size=n)


def _mean(v, w, m):
    return (v * w)[m].sum() / w[m].sum()


def test_rows_equal_the_expressions_under_the_ramp(data):
    d, z = data
    s, y, w = np.clip(0.5 + z, 0, 1), d.labels, d.weights
    female, male = d.groups["sex"] == 0, d.groups["sex"] == 1
    # ppr(Female) >= 0.8 ppr(Male): 0.8 ppr(Male) − ppr(Female) <= 0
    c = positive_prediction_rate(group("sex", "Female")) >= 0.8 * positive_prediction_rate(
        group("sex", "Male"))
    row = constraint_row(c, d)
    expected = 0.8 * _mean(s, w, male) - _mean(s, w, female)
    assert row.pos.min() >= 0 and row.neg.min() >= 0
    assert abs(ramp_rates(z, row.pos, row.neg) - row.bound - expected) <= 1e-12
    # error − 0.5 · tpr(Male) as an objective: a negative coefficient on a rate
    obj, constant = objective_row(error_rate() - 0.5 * true_positive_rate(group("sex", "Male")), d)
    err = _mean(y * (1 - s) + (1 - y) * s, w, np.ones(len(y), bool))
    tpr = _mean(s, w, male & (y == 1))
    assert abs(ramp_rates(z, obj.pos, obj.neg) + constant - (err - 0.5 * tpr)) <= 1e-12


def test_what_mm_cannot_play_is_refused(data):
    d, _ = data
    ratio = positive_prediction_rate(group("sex", "Female")) / positive_prediction_rate(
        group("sex", "Male"))
    with pytest.raises(NotPlayableError, match="ratio of rates"):
        constraint_row(ratio >= 0.8, d)
    with pytest.raises(NotPlayableError, match="group loss"):
        objective_row(group_loss("logistic", group("sex", "Male")), d)
    with pytest.raises(NotPlayableError, match="equality"):
        constraint_row(positive_prediction_rate() == 0.5, d)


def test_a_ratio_constraint_is_met_on_train_by_the_randomised_classifier():
    """End to end on synthetic data: ppr(group=0) >= 0.8 · ppr(group=1), which the
    unconstrained model breaks, holds for the ramp's expected rates (numpy)."""
    from fairgames.dataset_constraints.compile import minimize_rates

    rng = np.random.default_rng(7)
    n = 150
    g = (rng.random(n) < 0.5).astype(int)
    x = rng.normal(size=(n, 2)) + np.where(g == 1, 1.0, -1.0)[:, None] * np.array([1.0, 0.0])
    y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    data = RowData(y, {"g": g})
    fair = positive_prediction_rate(group("g", 0)) >= 0.8 * positive_prediction_rate(
        group("g", 1))
    free = minimize_rates(error_rate(), [], x, data, lam=0.05)
    s_free = np.clip(0.5 + x @ free.w, 0, 1)
    assert s_free[g == 0].mean() < 0.8 * s_free[g == 1].mean()       # the goal binds
    result = minimize_rates(error_rate(), [fair], x, data, lam=0.05)
    s = np.clip(0.5 + x @ result.w, 0, 1)
    assert s[g == 0].mean() >= 0.8 * s[g == 1].mean() - 1e-9
    err = np.mean(y * (1 - s) + (1 - y) * s) + 0.025 * result.w @ result.w
    assert abs(result.rounds[-1].objective - err) <= 1e-12
    hard = x @ result.w > 0          # the thresholded classifier: reported, not guaranteed
    print(f"randomised ratio {s[g == 0].mean() / s[g == 1].mean():.3f}, thresholded "
          f"{hard[g == 0].mean() / max(hard[g == 1].mean(), 1e-12):.3f}")


def test_rows_agree_with_the_library_evaluator_on_the_ramp_probabilities(data):
    """The library's own rate evaluator, given P(ŷ = 1) = σ(z), reads the same values."""
    import torch

    from fairgames.rates import Batch, RateEvaluator

    d, z = data
    c = (true_positive_rate(group("sex", "Female"))
         >= 0.9 * positive_prediction_rate(group("sex", "Male")))
    obj = error_rate(group("sex", "Male")) + 0.3 * error_rate()
    batch = Batch(scores=None, labels=torch.tensor(d.labels, dtype=torch.float64),
                  weights=torch.tensor(d.weights), groups={"sex": torch.tensor(d.groups["sex"])},
                  group_values={"sex": ["Female", "Male"]},
                  probabilities=torch.tensor(np.clip(0.5 + z, 0, 1)))
    values = RateEvaluator([obj, c.expression])(batch)
    row = constraint_row(c, d)
    assert abs(ramp_rates(z, row.pos, row.neg) - row.bound
               - float(c.expression.evaluate(values))) <= 1e-6   # it sums in float32
    orow, constant = objective_row(obj, d)
    assert abs(ramp_rates(z, orow.pos, orow.neg) + constant
               - float(obj.evaluate(values))) <= 1e-6
