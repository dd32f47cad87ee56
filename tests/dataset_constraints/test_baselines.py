"""Paper 001's baselines against independent references: numpy's covariance, sklearn's
logistic regression, and scipy's direct solve of the SVM quadratic programs."""

import numpy as np
import pytest
from scipy.optimize import minimize

from fairgames.dataset_constraints.baselines import (
    pseudo_example,
    pseudo_example_svm_fit,
    svm_fit,
    svm_objective,
    zafar_fit,
)


def _data(n=400, d=4, seed=0, groups=2):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, groups, n)
    x = rng.normal(size=(n, d)) + 0.8 * z[:, None]
    y = (x @ np.linspace(1.0, -0.5, d) + 0.7 * rng.normal(size=n) > 0.5).astype(int)
    return x, y, z


def _cov(z_col, scores):
    return np.cov(z_col, scores, bias=True)[0, 1]


def test_zafar_c_zero_gives_zero_covariance_and_meets_c_on_train():
    x, y, z = _data()
    free = zafar_fit(x, y, z, None)
    assert abs(_cov(z, free.decision_function(x))) > 0.05   # the constraint has work to do
    fit = zafar_fit(x, y, z, 0.0)
    assert fit.info["success"], fit.info["message"]
    assert abs(_cov(z, fit.decision_function(x))) <= 1e-6
    for c in (0.01, 0.05):
        fit = zafar_fit(x, y, z, c)
        assert abs(_cov(z, fit.decision_function(x))) <= c + 1e-8
        assert fit.info["objective"] >= free.info["objective"] - 1e-6


def test_zafar_one_constraint_per_one_hot_column():
    x, y, z = _data(groups=3, seed=3)
    fit = zafar_fit(x, y, z, 0.0)
    scores = fit.decision_function(x)
    for k in range(3):
        assert abs(_cov((z == k).astype(float), scores)) <= 1e-6
    assert len(fit.info["covariances"]) == 3


@pytest.mark.parametrize("l2", [1.0, 0.1])
def test_zafar_loose_c_is_sklearn_logistic_regression(l2):
    linear_model = pytest.importorskip("sklearn.linear_model")
    x, y, z = _data(seed=1)
    xb = np.concatenate([np.ones((len(x), 1)), x], axis=1)
    ref = linear_model.LogisticRegression(C=1.0 / l2, fit_intercept=False, tol=1e-12,
                                          max_iter=10000).fit(xb, y)
    fit = zafar_fit(xb, y, z, 1e6, l2=l2, intercept=False)
    np.testing.assert_allclose(fit.w, ref.coef_[0], atol=1e-4)


def _qp_svm(x, y, C=1.0, x_f=None, c=None):
    """min ½‖w‖² + C Σ ξ s.t. ξ_i ≥ 1 − y_i wᵀx_i, ξ ≥ 0 (and wᵀx_f ≤ c): scipy, directly."""
    n, d = x.shape
    ys = np.where(y == 1, 1.0, -1.0)
    yx = ys[:, None] * x

    def f(v):
        return 0.5 * v[:d] @ v[:d] + C * v[d:].sum(), np.concatenate([v[:d], C * np.ones(n)])

    cons = [{"type": "ineq", "fun": lambda v: v[d:] + yx @ v[:d] - 1.0,
             "jac": lambda v: np.concatenate([yx, np.eye(n)], axis=1)}]
    if x_f is not None:
        cons.append({"type": "ineq", "fun": lambda v: np.array([c - x_f @ v[:d]]),
                     "jac": lambda v: np.concatenate([-x_f, np.zeros(n)])[None, :]})
    v0 = np.concatenate([np.zeros(d), np.ones(n)])
    res = minimize(f, v0, jac=True, method="SLSQP", constraints=cons,
                   bounds=[(None, None)] * d + [(0, None)] * n,
                   options={"ftol": 1e-11, "maxiter": 2000})
    assert res.success, res.message
    return res.x[:d], res.fun


def test_unconstrained_svm_is_the_direct_qp():
    pytest.importorskip("sklearn")
    x, y, _ = _data(n=60, d=3, seed=2)
    w_qp, obj_qp = _qp_svm(x, y)
    fit = svm_fit(x, y, tol=1e-10)
    assert abs(svm_objective(fit.w, x, y) - obj_qp) <= 1e-5 * abs(obj_qp)


@pytest.mark.parametrize("c", [0.0, 0.3])
def test_pseudo_example_svm_is_the_direct_qp(c):
    pytest.importorskip("sklearn")
    x, y, z = _data(n=60, d=3, seed=4)
    x_f = pseudo_example(x, z == 1)
    free = svm_fit(x, y, tol=1e-10)
    assert free.w @ x_f > c + 0.1            # the constraint binds
    w_qp, obj_qp = _qp_svm(x, y, x_f=x_f, c=c)
    fit = pseudo_example_svm_fit(x, y, x_f, c, tol=1e-10)
    assert fit.info["multiplier"] > 0
    assert abs(fit.info["objective"] - obj_qp) <= 1e-5 * abs(obj_qp)
    assert fit.w @ x_f <= c + 1e-5
    np.testing.assert_allclose(fit.w, w_qp, atol=1e-3)


def test_pseudo_example_is_the_scaled_mean_difference():
    x, _, z = _data(n=50, seed=5)
    m = z == 1
    n_m, n_f = m.sum(), (~m).sum()
    want = n_m * n_f / (n_m + n_f) * (x[m].mean(0) - x[~m].mean(0))
    np.testing.assert_allclose(pseudo_example(x, m), want, rtol=1e-12)


def test_loose_hinge_bound_is_the_unconstrained_svm():
    pytest.importorskip("sklearn")
    x, y, z = _data(n=80, d=3, seed=6)
    free = svm_fit(x, y, tol=1e-10)
    fit = pseudo_example_svm_fit(x, y, pseudo_example(x, z == 1), c=1e6, tol=1e-10)
    assert fit.info["multiplier"] == 0.0
    np.testing.assert_allclose(fit.w, free.w, atol=1e-8)


def test_bad_inputs_name_the_remedy():
    x, y, z = _data(n=20)
    with pytest.raises(ValueError, match="must be >= 0"):
        zafar_fit(x, y, z, -1.0)
    with pytest.raises(ValueError, match="must be >= 0"):
        pseudo_example_svm_fit(x, y, x[0], -0.5)
    with pytest.raises(ValueError, match="labels must be 0/1"):
        zafar_fit(x, y * 2 - 1, z, 0.1)
    with pytest.raises(ValueError, match="both groups"):
        pseudo_example(x, np.ones(20, bool))


def test_path_point_solves_the_bound_it_reaches():
    """A weight on the path is the constrained SVM at c = wᵀx_f (KKT): the direct QP at that
    c has the same objective."""
    pytest.importorskip("sklearn")
    from fairgames.dataset_constraints.baselines import pseudo_example_svm_path

    x, y, z = _data(n=60, d=3, seed=4)
    x_f = pseudo_example(x, z == 1)
    (fit,) = pseudo_example_svm_path(x, y, x_f, [0.2], tol=1e-10)
    c = fit.info["c"]
    assert c < svm_fit(x, y, tol=1e-10).w @ x_f - 0.1          # the weight moved the bound
    _, obj_qp = _qp_svm(x, y, x_f=x_f, c=c)
    assert abs(fit.info["objective"] - obj_qp) <= 1e-5 * abs(obj_qp)
