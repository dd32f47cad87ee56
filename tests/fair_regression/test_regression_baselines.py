"""Paper 003's regression baselines against independent references: numpy least squares,
Johnson et al.'s residualisation for SEO, scipy for the bounded logistic fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from fairgames.baselines import BaselineError
from fairgames.data import load
from fairgames.fair_regression.baselines import SEO, BoundedLogisticRegression, LeastSquares


@pytest.fixture(scope="module")
def law():
    s = load("law", paper="003").train
    idx = torch.from_numpy(np.random.default_rng(0).choice(len(s.labels), 1500, replace=False))
    return s.features[idx], s.labels[idx].double(), s.groups["race_white"][idx], s


def _design(x):
    return np.c_[x.numpy().astype(np.float64), np.ones(len(x))]


def test_least_squares_is_numpy_lstsq(law):
    x, y, _, _ = law
    a = _design(x)
    reference = a @ np.linalg.lstsq(a, y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(LeastSquares().fit(x, y).predict(x).numpy(), reference,
                               atol=1e-9)


def test_seo_paper_is_the_residualised_regression_with_zero_group_covariance(law):
    x, y, a, _ = law
    pred = SEO().fit(x, y, a).predict(x).numpy()
    g = a.numpy().astype(float)
    assert abs(np.cov(pred, g)[0, 1]) < 1e-10
    # Johnson et al.: regress each feature on [1, A], OLS of y on the residuals
    base = np.c_[np.ones(len(g)), g]
    feats = x.numpy().astype(np.float64)
    resid = feats - base @ np.linalg.lstsq(base, feats, rcond=None)[0]
    r = np.c_[resid, np.ones(len(g))]
    reference = r @ np.linalg.lstsq(r, y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(pred, reference, atol=1e-8)
    # it costs loss against plain least squares, which is correlated with the group
    plain = LeastSquares().fit(x, y).predict(x).numpy()
    assert abs(np.cov(plain, g)[0, 1]) > 1e-4
    assert ((pred - y.numpy()) ** 2).mean() > ((plain - y.numpy()) ** 2).mean()


def test_seo_code_variant_drops_the_group_columns_coefficient(law):
    x, y, a, splits = law
    col = splits.feature_names.index("race_white=white")
    ours = SEO("code", group_columns=[col]).fit(x, y, a)
    full = LeastSquares().fit(x, y)
    expected = full.predict(x).numpy() - float(full.coef[col]) * x[:, col].double().numpy()
    np.testing.assert_allclose(ours.predict(x).numpy(), expected, atol=1e-9)
    with pytest.raises(BaselineError, match="group_columns"):
        SEO("code")


def test_bounded_logistic_regression_matches_scipy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g)
    y = torch.bernoulli(torch.sigmoid(x[:, 0] - 0.5 * x[:, 1]), generator=g).double()
    ours = BoundedLogisticRegression().fit(x, y).predict(x).numpy()
    a, t = _design(x), y.numpy()

    def objective(beta):
        m = 5.0 * (2 * t - 1) * (2 * (a @ beta) - 1)
        return np.logaddexp(0, -m).mean()

    ref = minimize(objective, np.zeros(a.shape[1]), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(ours, a @ ref, atol=1e-5)
    # on fractional targets: the cross-entropy form, still a finite minimiser
    soft = torch.sigmoid(x[:, 0]).double()
    fit = BoundedLogisticRegression().fit(x, soft).predict(x).numpy()
    s = soft.numpy()

    def cross_entropy(beta):
        m = 5.0 * (2 * (a @ beta) - 1)
        return (s * np.logaddexp(0, -m) + (1 - s) * np.logaddexp(0, m)).mean()

    ref = minimize(cross_entropy, np.zeros(a.shape[1]), method="BFGS",
                   options={"gtol": 1e-10}).x
    np.testing.assert_allclose(fit, a @ ref, atol=1e-5)
    with pytest.raises(BaselineError, match=r"targets must lie in \[0, 1\]"):
        BoundedLogisticRegression().fit(x, y * 3)


def test_module_reproduces_predict_and_unfitted_is_an_error(law):
    x, y, a, _ = law
    m = SEO().fit(x, y, a)
    with torch.no_grad():
        np.testing.assert_allclose(m.module()(x.double())[:, 0].numpy(), m.predict(x).numpy(),
                                   atol=1e-9)
    with pytest.raises(BaselineError, match="not fitted"):
        LeastSquares().predict(x)
