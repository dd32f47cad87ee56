"""FC (Agarwal et al. 2018's grid-search reduction under demographic parity) against independent
references: fairlearn's GridSearch with sklearn's LogisticRegression, the paper-003 code's cost
formula, and the expected sweep of the selection-rate gap along the grid."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from fairlearn.reductions import DemographicParity, GridSearch
from sklearn.linear_model import LogisticRegression as SkLR

from fairgames.baselines import BaselineError, LogisticRegression
from fairgames.fair_regression.baselines import FairClassification
from fairgames.fair_regression.baselines.fair_classification import relabel
from fairgames.rates.thresholds import threshold_rates

C = 10.0
SK = {"C": C, "tol": 1e-10, "max_iter": 10_000}


def _problem(n=600, groups=2, seed=0):
    """The group shifts the label's log-odds and is a feature; float32-exact features."""
    gen = np.random.default_rng(seed)
    g = gen.integers(0, groups, n)
    z = gen.normal(size=(n, 2))
    x = np.c_[z, g == 1, g == 2][:, : 2 + max(groups - 1, 1)].astype(np.float32)
    logit = 2 * z[:, 0] - z[:, 1] + 1.5 * (2 * (g >= 1) - 1) - 0.5 * (g == 2)
    y = (gen.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    return x.astype(np.float64), y, g


def _fairlearn_scores(x, y, g, columns):
    """fairlearn's GridSearch on the grid ``columns`` (dicts {(sign, group): λ}); scores [L, n]."""
    dp = DemographicParity()
    dp.load_data(x, pd.Series(y), sensitive_features=pd.Series(g))
    grid = pd.DataFrame(0.0, index=dp.index, columns=range(len(columns)))
    for j, col in enumerate(columns):
        for (sign, group), value in col.items():
            grid.loc[(sign, "all", group), j] = value
    gs = GridSearch(SkLR(**SK), DemographicParity(), grid=grid)
    gs.fit(x, y, sensitive_features=g)
    return np.stack([_positive_proba(m, x) for m in gs.predictors_])


def _positive_proba(model, x):
    """P(1) of a fitted sklearn classifier; a one-class DummyClassifier has one column."""
    classes = list(model.classes_)
    return model.predict_proba(x)[:, classes.index(1)] if 1 in classes else np.zeros(len(x))


def _selection_rates(scores, g, groups):
    t = threshold_rates(torch.as_tensor(scores), torch.as_tensor(g), groups,
                        torch.tensor([0.5]))
    return t.groups[:, 0]


def test_weighted_logistic_is_sklearn_with_sample_weight():
    x, y, _ = _problem(seed=1)
    w = np.random.default_rng(2).exponential(size=len(y))
    ours = LogisticRegression(l2=1 / (C * len(y))).fit(x, y, w).predict_proba(x).numpy()
    sk = SkLR(**SK).fit(x, y, sample_weight=w).predict_proba(x)[:, 1]
    np.testing.assert_allclose(ours, sk, atol=1e-5)
    # the weights matter: unweighted is a different model
    plain = LogisticRegression(l2=1 / (C * len(y))).fit(x, y).predict_proba(x).numpy()
    assert np.abs(plain - ours).max() > 1e-2
    with pytest.raises(BaselineError, match="negative"):
        LogisticRegression().fit(x, y, -w)
    with pytest.raises(BaselineError, match="all zero"):
        LogisticRegression().fit(x, y, 0 * w)
    with pytest.raises(BaselineError, match="rows"):
        LogisticRegression().fit(x, y, w[:-1])


def test_scalar_grid_is_fairlearn_gridsearch_on_group_1s_rows():
    x, y, g = _problem()
    lambdas = np.linspace(-0.5, 0.5, 5)
    p0 = float((g == 0).mean())
    # the code's gap λ ↔ fairlearn's λ⁺ / λ⁻ = |λ| / p_0 on group 1's rows
    columns = [{("+" if lam > 0 else "-", 1): abs(lam) / p0} for lam in lambdas]
    reference = _fairlearn_scores(x, y, g, columns)
    fc = FairClassification(lambdas, C=C).fit(x, y, g)
    ours = fc.predict_proba(x).numpy()
    assert ours.shape == (5, len(y)) and len(fc.models) == 5
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    for j in range(5):
        torch.testing.assert_close(_selection_rates(ours[j], g, 2),
                                   _selection_rates(reference[j], g, 2), rtol=0, atol=0)
        np.testing.assert_array_equal(fc.predict_proba(x, index=j).numpy(), ours[j])
    # the grid really moves the models: the ends select group 1 very differently
    ends = _selection_rates(ours[0], g, 2) - _selection_rates(ours[-1], g, 2)
    assert float(ends[1]) > 0.3


def test_per_group_grid_is_fairlearn_gridsearch_with_three_groups():
    x, y, g = _problem(groups=3, seed=3)
    lambdas = np.array([[0.0, 0.0, 0.0], [0.3, -0.2, 0.0], [-0.4, 0.1, 0.25]])
    columns = [{("+" if v > 0 else "-", a): abs(v) for a, v in enumerate(row) if v}
               for row in lambdas]
    reference = _fairlearn_scores(x, y, g, columns)
    ours = FairClassification(lambdas, C=C).fit(x, y, g).predict_proba(x).numpy()
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    with pytest.raises(BaselineError, match=r"\[L, 3\]"):
        FairClassification([0.1, 0.2]).fit(x, y, g)
    with pytest.raises(BaselineError, match="one multiplier per group"):
        FairClassification(lambdas[:, :2]).fit(x, y, g)


def test_scalar_lambda_costs_are_the_paper_codes():
    """grid_class.py's lambda_response: cost1 = (1 − y) + λ(a/p1 − (1 − a)/p0), cost0 = y."""
    x, y, a = _problem(seed=4)
    p1, p0 = (a == 1).mean(), (a == 0).mean()
    fc = FairClassification([-0.3, 0.2, 0.7]).fit(x, y, a)
    for lam, mult in zip([-0.3, 0.2, 0.7], fc.multipliers, strict=True):
        cost1 = (1 - y) + lam * (a / p1 - (1 - a) / p0)
        labels, weights = relabel(torch.as_tensor(y), torch.as_tensor(a), mult,
                                  torch.tensor([p0, p1]))
        np.testing.assert_array_equal(labels.numpy(), (y > cost1).astype(float))
        np.testing.assert_allclose(weights.numpy(), np.abs(y - cost1), atol=1e-12)


def test_lambda_zero_is_the_unconstrained_logistic_regression():
    x, y, g = _problem(seed=5)
    ours = FairClassification([0.0], C=C).fit(x, y, g).predict_proba(x, index=0).numpy()
    np.testing.assert_allclose(ours, SkLR(**SK).fit(x, y).predict_proba(x)[:, 1], atol=1e-5)


def test_selection_rate_gap_sweeps_down_through_zero_along_the_grid():
    x, y, g = _problem(seed=6)
    lambdas = np.linspace(-0.5, 0.5, 11)
    scores = FairClassification(lambdas).fit(x, y, g).predict_proba(x)
    gaps = np.array([float(r[1] - r[0]) for r in (_selection_rates(s, g, 2) for s in scores)])
    assert gaps[0] > 0.3 and gaps[-1] < -0.3                  # the ends have opposite signs
    assert (np.diff(gaps) <= 1e-12).all()                     # monotone along the grid
    assert np.abs(gaps).min() < 0.1 and 0 < np.abs(gaps).argmin() < len(gaps) - 1


def test_targets_are_thresholded():
    x, y, g = _problem(seed=7)
    soft = np.clip(0.5 * y + 0.4 * np.random.default_rng(8).random(len(y)), 0, 1)
    at = FairClassification([0.0, 0.3], threshold=0.6).fit(x, soft, g).predict_proba(x)
    binary = FairClassification([0.0, 0.3]).fit(x, (soft >= 0.6), g).predict_proba(x)
    torch.testing.assert_close(at, binary, rtol=0, atol=0)
    # a 0/1 target is used as is, whatever the threshold in (0, 1]
    one = FairClassification([0.2], threshold=1.0).fit(x, y, g).predict_proba(x)
    half = FairClassification([0.2]).fit(x, y, g).predict_proba(x)
    torch.testing.assert_close(one, half, rtol=0, atol=0)


def test_a_one_class_relabelling_gives_the_constant_model_as_fairlearn_does():
    x, y, g = _problem(seed=9)
    g = (np.arange(len(y)) % 10 < 3).astype(int)              # p_1 = 0.3
    y[g == 0] = 1.0                                           # group 0 is all positive
    # λ = −0.5: shift_1 = λ/p_1 < −1 and shift_0 = −λ/p_0 < 1, so every relabelled label is 1
    lambdas = [-0.5, 0.0]
    fc = FairClassification(lambdas, C=C).fit(x, y, g)
    scores = fc.predict_proba(x).numpy()
    np.testing.assert_array_equal(scores[0], np.ones(len(y)))
    assert 0 < scores[1].min() < scores[1].max() < 1          # λ = 0 is a fitted model
    reference = _fairlearn_scores(x, y, g, [{("-", 1): 0.5 / 0.7}, {}])
    np.testing.assert_allclose(scores, reference, atol=1e-5)


def test_bad_input_is_refused_with_the_remedy():
    x, y, g = _problem(n=50, seed=10)
    fc = FairClassification()
    with pytest.raises(BaselineError, match="both classes"):
        fc.fit(x, np.full(50, 0.2), g)
    with pytest.raises(BaselineError, match="both classes"):
        FairClassification(threshold=0.1).fit(x, np.full(50, 0.2), g)
    with pytest.raises(BaselineError, match="NaN"):
        fc.fit(x, np.where(np.arange(50) == 3, np.nan, y), g)
    with pytest.raises(BaselineError, match="NaN"):
        fc.fit(np.where(np.arange(50)[:, None] == 3, np.nan, x), y, g)
    with pytest.raises(BaselineError, match="rows"):
        fc.fit(x, y[:-1], g)
    with pytest.raises(BaselineError, match="rows"):
        fc.fit(x, y, g[:-1])
    with pytest.raises(BaselineError, match="at least two groups"):
        fc.fit(x, y, np.zeros(50))
    with pytest.raises(BaselineError, match=r"\[0, 1\]"):
        fc.fit(x, 2 * y, g)
    with pytest.raises(BaselineError, match="not fitted"):
        fc.predict_proba(x)
    with pytest.raises(BaselineError, match="out of range"):
        FairClassification([0.0]).fit(x, y, g).predict_proba(x, index=1)
    with pytest.raises(BaselineError, match="threshold"):
        FairClassification(threshold=0.0)
    with pytest.raises(BaselineError, match="C must"):
        FairClassification(C=0.0)
    with pytest.raises(BaselineError, match="NaN"):
        FairClassification([0.0, float("nan")])
    with pytest.raises(BaselineError, match="non-empty"):
        FairClassification([])
