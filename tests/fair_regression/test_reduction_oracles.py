"""The best-response oracles against independent references: numpy least squares, the
logistic stationarity weight in closed form, brute-force pointwise minimisers, the CS LP
against its own hinge objective at other points of the box."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.optimize import linprog, minimize

from fairgames.fair_regression import GroupLossGame
from fairgames.fair_regression.discretize import prefix_sums, targets
from fairgames.fair_regression.fitting import Fitter, outputs
from fairgames.fair_regression.oracles import (
    CostSensitiveOracle,
    LeastSquaresOracle,
    RiskOracle,
    WeightedLossOracle,
    hinge_linear_program,
    pair_labels,
    stationary_weight,
)
from fairgames.fair_regression.sample import Sample
from fairgames.rates.losses import BOUNDED_LOGISTIC, SQUARED
from fairgames.rates.thresholds import threshold_grid


def _case(seed: int = 0, n: int = 150, d: int = 3, n_grid: int = 8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    # costs shaped like c_λ: rows that want low, middle or high predictions, tied to x
    pref = torch.sigmoid(x[:, 0] + 0.3 * torch.randn(n, generator=g, dtype=torch.float64))
    z = threshold_grid(n_grid)
    c_lam = (z[None, :] - pref[:, None]) + 0.1 * torch.randn(n, n_grid, generator=g,
                                                              dtype=torch.float64)
    return x, c_lam.clamp(-1, 1)


def _linear():
    return torch.nn.Linear(3, 1).double()


def _predict(model, x):
    with torch.no_grad():
        return outputs(model, x)


def test_ls_is_numpy_least_squares_to_the_targets_and_the_inner_loop_agrees():
    x, c_lam = _case()
    u = targets(c_lam).numpy()
    a = np.c_[x.numpy(), np.ones(len(x))]
    reference = a @ np.linalg.lstsq(a, u, rcond=None)[0]
    closed = _predict(LeastSquaresOracle(Fitter(_linear, x))(c_lam), x).numpy()
    np.testing.assert_allclose(closed, reference, atol=1e-10)
    # a module that is not nn.Linear takes the L-BFGS loop to the same optimum
    torch.manual_seed(0)
    looped = LeastSquaresOracle(Fitter(lambda: torch.nn.Sequential(_linear()), x))(c_lam)
    np.testing.assert_allclose(_predict(looped, x).numpy(), reference, atol=1e-5)


def test_weighted_ls_weights_rows_by_the_range_of_g():
    x, c_lam = _case(1)
    g = prefix_sums(c_lam)
    w = (g.amax(1) - g.amin(1)).numpy()
    u = targets(c_lam).numpy()
    a = np.c_[x.numpy(), np.ones(len(x))] * np.sqrt(w)[:, None]
    coef = np.linalg.lstsq(a, u * np.sqrt(w), rcond=None)[0]
    got = _predict(LeastSquaresOracle(Fitter(_linear, x), weighted=True)(c_lam), x).numpy()
    np.testing.assert_allclose(got, np.c_[x.numpy(), np.ones(len(x))] @ coef, atol=1e-10)


def test_stationary_weight_is_the_logistic_closed_form_and_makes_u_the_minimiser():
    u = torch.linspace(0.0125, 0.9875, 40, dtype=torch.float64)
    w = stationary_weight(BOUNDED_LOGISTIC, u)
    np.testing.assert_allclose(w.numpy(), torch.sigmoid(5.0 * (2 * u - 1)).numpy(), atol=1e-12)
    at = stationary_weight(BOUNDED_LOGISTIC, torch.tensor([0.6], dtype=torch.float64))
    assert float(at[0]) == pytest.approx(1 / (1 + math.exp(-1.0)), abs=1e-12)  # notes §5 #9
    np.testing.assert_allclose(stationary_weight(SQUARED, u).numpy(), u.numpy(), atol=1e-12)
    fine = torch.linspace(-0.5, 1.5, 20001, dtype=torch.float64)
    for ui, wi in zip(u[::7].tolist(), w[::7].tolist(), strict=True):
        values = ((1 - wi) * BOUNDED_LOGISTIC(fine, torch.zeros_like(fine))
                  + wi * BOUNDED_LOGISTIC(fine, torch.ones_like(fine)))
        assert float(fine[torch.argmin(values)]) == pytest.approx(ui, abs=2e-4)


def test_lr_with_the_squared_loss_is_ls_and_with_the_logistic_loss_hits_the_targets():
    x, c_lam = _case(2)
    ls = _predict(LeastSquaresOracle(Fitter(_linear, x))(c_lam), x)
    lr = _predict(RiskOracle(Fitter(_linear, x), SQUARED)(c_lam), x)
    np.testing.assert_allclose(lr.numpy(), ls.numpy(), atol=1e-10)
    # a linear model that can represent the targets exactly: the logistic pair fits them
    u = targets(c_lam)
    coef = torch.tensor([0.1, -0.05, 0.02], dtype=torch.float64)
    xs = x.clone()
    xs[:, 0] = (u - 0.5 - xs[:, 1:] @ coef[1:]) / coef[0]     # make u linear in xs
    fit = _predict(RiskOracle(Fitter(_linear, xs, steps=500), BOUNDED_LOGISTIC)(c_lam), xs)
    np.testing.assert_allclose(fit.numpy(), u.numpy(), atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_lr_with_the_logistic_loss_is_sklearns_weighted_two_copy_logistic_regression(seed):
    # the bounded logistic loss is the logistic loss of the score 5(2f − 1), an affine map
    # of f: on a linear model, sklearn's unpenalised logistic regression on the two copies
    # (labels 0 / 1, weights 1 − W₁ / W₁) is the same ERM
    from sklearn.linear_model import LogisticRegression

    x, c_lam = _case(seed, n=300)
    x = torch.cat([x, torch.nn.functional.one_hot(torch.arange(300) % 3, 3)], 1)  # rank-def.
    w1 = stationary_weight(BOUNDED_LOGISTIC, targets(c_lam))
    fitter = Fitter(lambda: torch.nn.Linear(6, 1).double(), x, steps=100)
    got = _predict(RiskOracle(fitter, BOUNDED_LOGISTIC)(c_lam), x)
    ref = LogisticRegression(penalty=None, tol=1e-12, max_iter=10_000).fit(
        np.r_[x.numpy(), x.numpy()], np.r_[np.zeros(300), np.ones(300)],
        sample_weight=np.r_[1 - w1.numpy(), w1.numpy()])
    ref_f = torch.as_tensor((ref.decision_function(x.numpy()) / 5 + 1) / 2)

    def objective(f):
        zeros, ones = torch.zeros_like(f), torch.ones_like(f)
        return float(((1 - w1) * BOUNDED_LOGISTIC(f, zeros)
                      + w1 * BOUNDED_LOGISTIC(f, ones)).mean())

    assert objective(got) == pytest.approx(objective(ref_f), rel=1e-8)
    assert objective(got) <= objective(ref_f) * (1 + 1e-12)   # at least as low as sklearn
    # warm-started from that optimum, a second call with other costs is still exact
    c2 = c_lam.flip(1)
    w2 = stationary_weight(BOUNDED_LOGISTIC, targets(c2))
    again = _predict(RiskOracle(fitter, BOUNDED_LOGISTIC)(c2), x)
    ref2 = LogisticRegression(penalty=None, tol=1e-12, max_iter=10_000).fit(
        np.r_[x.numpy(), x.numpy()], np.r_[np.zeros(300), np.ones(300)],
        sample_weight=np.r_[1 - w2.numpy(), w2.numpy()])
    w1 = w2
    assert objective(again) == pytest.approx(
        objective(torch.as_tensor((ref2.decision_function(x.numpy()) / 5 + 1) / 2)), rel=1e-8)


def _hinge(c_lam, scores):
    n_grid = c_lam.shape[1]
    sign, weight = pair_labels(c_lam)
    z = threshold_grid(n_grid)
    return float((weight * torch.relu(0.5 / n_grid - sign * (scores[:, None] - z))).sum()
                 / weight.sum())


def test_cs_lp_minimises_the_weighted_hinge_over_the_box():
    x, c_lam = _case(3, n=80)
    xa = torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], 1)
    model = CostSensitiveOracle(Fitter(_linear, x))(c_lam)
    beta = torch.cat([model.weight.detach()[0], model.bias.detach()])
    assert float(beta.abs().max()) <= 1 + 1e-9
    best = _hinge(c_lam, xa @ beta)
    g = torch.Generator().manual_seed(4)
    for _ in range(200):                               # no point of the box does better
        other = torch.rand(4, generator=g, dtype=torch.float64) * 2 - 1
        assert best <= _hinge(c_lam, xa @ other) + 1e-9
    # the implicit (no n·N rows) surrogate loop reaches the LP's optimum
    looped = CostSensitiveOracle(Fitter(lambda: torch.nn.Sequential(_linear()), x, steps=300),
                                 exact=False)(c_lam)
    assert _hinge(c_lam, _predict(looped, x)) == pytest.approx(best, abs=2e-3)
    with pytest.raises(ValueError, match="LP over linear models"):
        CostSensitiveOracle(Fitter(lambda: torch.nn.Sequential(_linear()), x), exact=True)


def _pair_row_lp(xa: np.ndarray, c_lam: torch.Tensor) -> float:
    """App. G's LP written directly: one slack and one row per weighted pair."""
    n_grid = c_lam.shape[1]
    sign, weight = pair_labels(c_lam)
    rows, cols = torch.nonzero(weight > 0, as_tuple=True)
    m, d = rows.numel(), xa.shape[1]
    s, z = sign[rows, cols].numpy(), threshold_grid(n_grid)[cols].numpy()
    cost = weight[rows, cols].numpy()
    a_ub = sp.hstack([sp.csr_matrix(-s[:, None] * xa[rows.numpy()]), -sp.identity(m)])
    res = linprog(np.r_[np.zeros(d), cost / cost.max()], A_ub=a_ub, b_ub=-0.5 / n_grid - s * z,
                  bounds=[(-1, 1)] * d + [(0, None)] * m, method="highs-ipm")
    assert res.status == 0
    return res.fun * cost.max() / m


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_per_row_cs_lp_has_the_pair_row_lps_optimum_and_an_optimal_beta(seed):
    # one-hot columns beside the intercept (rank-deficient, as the real sets), weightless
    # pairs (C = 0) and mixed signs within rows
    g = torch.Generator().manual_seed(seed)
    n, n_grid = 120, 10
    x = torch.cat([torch.rand(n, 3, generator=g, dtype=torch.float64),
                   torch.nn.functional.one_hot(torch.randint(0, 3, (n,), generator=g), 3)
                   .to(torch.float64)], 1)
    pref = torch.rand(n, generator=g, dtype=torch.float64)
    c_lam = (threshold_grid(n_grid)[None, :] - pref[:, None]
             + 0.3 * torch.randn(n, n_grid, generator=g, dtype=torch.float64)) * 1e-3
    c_lam[torch.rand(n, n_grid, generator=g) < 0.1] = 0.0
    xa = np.c_[x.numpy(), np.ones(n)]
    reference = _pair_row_lp(xa, c_lam)
    beta, value = hinge_linear_program(x, c_lam)
    m = int((c_lam != 0).sum())
    assert value == pytest.approx(reference, rel=1e-7)
    assert float(beta.abs().max()) <= 1 + 1e-9
    f = torch.as_tensor(xa) @ beta
    assert _hinge(c_lam, f) * pair_labels(c_lam)[1].sum().item() / m == pytest.approx(
        reference, rel=1e-7)


def test_the_bgl_oracle_is_weighted_least_squares():
    x, _ = _case(5)
    g = torch.Generator().manual_seed(6)
    y = torch.rand(len(x), generator=g, dtype=torch.float64)
    w = torch.rand(len(x), generator=g, dtype=torch.float64)
    got = _predict(WeightedLossOracle(Fitter(_linear, x), y, SQUARED)(w), x).numpy()
    a = np.c_[x.numpy(), np.ones(len(x))]
    sw = np.sqrt(w.numpy())
    coef = np.linalg.lstsq(a * sw[:, None], y.numpy() * sw, rcond=None)[0]
    np.testing.assert_allclose(got, a @ coef, atol=1e-10)


def test_bgl_best_response_minimises_the_lagrangian():
    # L(f, λ) = Ê ℓ + Σ_a λ_a Ê[ℓ | A = a], minimised directly by scipy (no weights formula)
    x, _ = _case(7, n=200)
    g = torch.Generator().manual_seed(8)
    codes = (torch.rand(len(x), generator=g) < 0.2).long()           # unequal group sizes
    y = torch.where(codes == 1, 0.8 - 0.2 * x[:, 1], 0.3 + 0.1 * x[:, 0]).clamp(0, 1)
    sample = Sample.of(x, y, codes)
    lam = torch.tensor([0.3, 2.5], dtype=torch.float64)
    game = GroupLossGame(sample, SQUARED, 0.0, WeightedLossOracle(Fitter(_linear, x), y,
                                                                  SQUARED))
    got = _predict(game.best_response(lam), x).numpy()
    a, t, c = np.c_[x.numpy(), np.ones(len(x))], y.numpy(), codes.numpy()

    def lagrangian(beta):
        loss = 0.5 * (t - a @ beta) ** 2
        return loss.mean() + sum(float(lam[k]) * loss[c == k].mean() for k in (0, 1))

    ref = minimize(lagrangian, np.zeros(a.shape[1]), method="BFGS", options={"gtol": 1e-12}).x
    np.testing.assert_allclose(got, a @ ref, atol=1e-6)


def test_the_library_linear_model_gets_the_closed_form_and_the_cached_fit_equals_numpy():
    from fairgames.models import LinearModel

    g = torch.Generator().manual_seed(3)
    x = torch.rand(60, 3, generator=g)
    u = torch.rand(60, generator=g, dtype=torch.float64)
    fitter = Fitter(lambda: LinearModel(3), x)
    assert fitter.linear
    ref, *_ = np.linalg.lstsq(np.c_[x.double().numpy(), np.ones(60)], u.numpy(), rcond=None)
    expected = x.double().numpy() @ ref[:3] + ref[3]
    first = outputs(fitter.squared(u), x).detach().double().numpy()   # cached pseudo-inverse
    again = outputs(fitter.squared(u.flip(0)), x).detach().double().numpy()
    unit = outputs(fitter.squared(u, torch.ones(60)), x).detach().double().numpy()  # lstsq
    assert np.allclose(first, expected, atol=1e-5) and np.allclose(unit, expected, atol=1e-5)
    assert not np.allclose(again, expected, atol=1e-3)          # a new target, a new fit
    assert not Fitter(lambda: LinearModel(3, output="unit"), x).linear
    assert not Fitter(lambda: torch.nn.Sequential(torch.nn.Linear(3, 1)), x).linear


@pytest.mark.parametrize("seed", [0, 1])
def test_the_pair_product_gram_equals_numpys_weighted_gram(seed):
    """Design.gram through the rows' pair products (one-hot columns, a dense column, empty
    rows, all-zero columns) equals numpy's aᵀ diag(w) a, and the sparse product's fallback
    above the budget does too."""
    from fairgames.fair_regression.fitting import Design, pair_products

    rng = np.random.default_rng(seed)
    n = 300
    onehot = np.eye(7)[rng.integers(0, 7, n)] * (rng.random((n, 1)) < 0.9)  # some rows empty
    a = np.hstack([onehot, rng.normal(size=(n, 1)) * (rng.random((n, 1)) < 0.3),
                   np.zeros((n, 2))])
    a[:5] = 0.0
    w = rng.random(n)
    reference = a.T @ (a * w[:, None])
    design = Design(torch.from_numpy(a))
    assert design.pairs is not None
    np.testing.assert_allclose(design.gram(torch.from_numpy(w)).numpy(), reference,
                               rtol=1e-13, atol=1e-13)
    design.pairs = pair_products(design.csr, budget=10)
    assert design.pairs is None
    np.testing.assert_allclose(design.gram(torch.from_numpy(w)).numpy(), reference,
                               rtol=1e-13, atol=1e-13)


def test_newton_started_at_its_optimum_stops_at_the_objectives_resolution():
    """From the optimum, with a zero gradient tolerance, Newton's line search cannot tell two
    points apart (the predicted decrease is below float64 rounding of the mean loss): it must
    stop within a few loss evaluations (it used to halve 40 times a step), and leave the
    optimum no worse — the result still matches sklearn's logistic regression."""
    from sklearn.linear_model import LogisticRegression

    from fairgames.fair_regression.fitting import newton, with_intercept

    g = torch.Generator().manual_seed(3)
    x = torch.randn(400, 3, generator=g, dtype=torch.float64)
    y = (x[:, 0] + torch.randn(400, generator=g, dtype=torch.float64) > 0).to(torch.float64)
    a = with_intercept(x)
    calls = []

    def bce(f):
        calls.append(1)
        return torch.nn.functional.softplus(f) - y * f

    beta = newton(a, bce, torch.zeros(4, dtype=torch.float64))
    calls.clear()
    again = newton(a, bce, beta, tolerance=0.0)
    assert len(calls) <= 6
    ref = LogisticRegression(penalty=None, tol=1e-12, max_iter=10_000).fit(x.numpy(), y.numpy())
    expected = np.r_[ref.coef_.ravel(), ref.intercept_]
    np.testing.assert_allclose(again.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert float(bce(a @ again).mean()) <= float(bce(a @ beta).mean()) + 1e-15
