"""Algorithm 3 of paper 002 (fairgames.filtering.alpha_beta) against independent references:
an exact LP (scipy HiGHS) over the hull of a finite hypothesis set, Lemma 4's corrected
equivalence with Lemma 3's condition (1), and the paired-regression oracle's reduction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from fairgames.filtering.alpha_beta import (
    constraint_values,
    lemma3_f,
    lemma4_costs,
    paired_regression,
    play,
    project_l2_orthant,
)

EPS = 0.01  # the game's tolerance on normalised weights: objective and violation


def _instance(seed: int, n: int = 10, K: int = 3):
    rng = np.random.default_rng(seed)
    z = np.arange(n) % K if n >= K else rng.integers(0, K, n)
    z = rng.permutation(z)
    onehot = np.eye(K)[z]
    w = rng.uniform(0.2, 1.0, n)
    r = w @ onehot / w.sum()  # the leaf is α-disclosive itself, so h ≡ 0 is feasible
    b = rng.normal(size=n)
    return rng, onehot, w, r, b


def _lp(H: np.ndarray, onehot, w, r, b, alpha):
    """The exact optimum of Program (3) over mixtures of the rows of ``H`` (m × n, each a
    deterministic split on the sample): variables q on the simplex, h̄ = qH."""
    wn = w / w.sum()
    G = onehot - r
    K = onehot.shape[1]
    # constraint_values is affine in h̄: build its rows from h̄ = qH directly
    A = []
    for sign in (1.0, -1.0):
        A.append(H @ (wn[:, None] * (sign * G - alpha)))  # h = 1 side, K columns
    for sign in (1.0, -1.0):
        A.append(-(H @ (wn[:, None] * (sign * G - alpha))))  # h = 0 side, minus its constant
    A = np.concatenate(A, axis=1).T                                  # 4K × m
    const0 = np.concatenate([np.zeros(2 * K)] + [wn @ (s * G - alpha) for s in (1.0, -1.0)])
    res = linprog(H @ (wn * b), A_ub=A, b_ub=-const0, A_eq=np.ones((1, len(H))), b_eq=[1.0],
                  bounds=[(0, None)] * len(H), method="highs")
    assert res.status == 0
    return res.fun, res.x @ H


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_game_matches_lp_over_the_cube(seed, alpha):
    """H = every labelling of 10 points, so the mixtures are the whole cube [0, 1]^n and the
    oracle is exact (h_j = 1[cost_j < 0]): the game's mixture is ε-optimal and ε-feasible."""
    _, onehot, w, r, b = _instance(seed)
    n = len(w)
    cube = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(float)
    opt, _ = _lp(cube, onehot, w, r, b, alpha)

    def oracle(cost):
        return (cost < 0).astype(float), None

    g = play(oracle, onehot, w, r, b, alpha, T=4000, lambda_max=10.0)
    wn = w / w.sum()
    assert g.violation <= EPS
    assert abs(g.objective - opt) <= EPS, (g.objective, opt)
    assert np.isclose(constraint_values(g.h, wn, onehot - r, alpha).max(), g.violation) \
        or g.violation == 0.0


@pytest.mark.parametrize("seed", [3, 4])
def test_game_matches_lp_over_thresholds(seed):
    """H = thresholds on one feature, both orientations (a finite class whose hull is NOT the
    cube): the game with H's exact CSC oracle reaches the LP over mixtures of H."""
    rng, onehot, w, r, b = _instance(seed, n=30)
    x = rng.normal(size=30)
    cuts = np.concatenate([[-np.inf], np.sort(x)])
    H = np.vstack([(x[None, :] <= cuts[:, None]), (x[None, :] > cuts[:, None])]).astype(float)
    opt, _ = _lp(H, onehot, w, r, b, 0.1)

    def oracle(cost):
        return H[int(np.argmin(H @ cost))], None

    g = play(oracle, onehot, w, r, b, 0.1, T=4000, lambda_max=10.0)
    assert g.violation <= EPS
    assert abs(g.objective - opt) <= EPS, (g.objective, opt)


def test_large_alpha_leaves_the_constraint_inactive():
    """α ≥ 1 makes every split feasible: the game is the unconstrained CSC problem, whose
    optimum is h = 1[b < 0] (λ stays at 0, every round plays it)."""
    _, onehot, w, r, b = _instance(5, n=40)
    g = play(lambda c: ((c < 0).astype(float), None), onehot, w, r, b, 1.0, T=50)
    assert np.array_equal(g.h, (b < 0).astype(float))
    assert np.all(g.lam == 0) and g.violation == 0.0
    wn = w / w.sum()
    assert np.isclose(g.objective, wn @ np.minimum(b, 0))


def test_paired_regression_is_one_regression_of_the_cost():
    """Definition 14's two regressions (on y·w and (1−y)·w) predict 1 exactly where a single
    least-squares fit of the cost is negative (the fits are linear in their targets); checked
    against scikit-learn's LinearRegression."""
    from sklearn.linear_model import LinearRegression
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    cost = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(scale=0.5, size=200)
    h, (coef, icpt) = paired_regression(X)(cost)
    lr = LinearRegression().fit(X, cost)
    assert np.allclose(coef, lr.coef_) and np.isclose(icpt, lr.intercept_)
    assert np.array_equal(h, (lr.predict(X) < 0).astype(float))


def test_projection_is_the_euclidean_one():
    """Against the closest of many random feasible points (a projection is never beaten)."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        v = rng.normal(scale=2, size=6)
        p = project_l2_orthant(v, 1.5)
        assert np.all(p >= 0) and np.linalg.norm(p) <= 1.5 + 1e-12
        cand = np.abs(rng.normal(size=(5000, 6)))
        cand *= (rng.uniform(0, 1.5, 5000) / np.linalg.norm(cand, axis=1))[:, None]
        assert np.linalg.norm(v - p) <= np.linalg.norm(v - cand, axis=1).min() + 1e-12


def test_lemma4_corrected_equivalence():
    """Lemma 4 (sign corrected): Σ w h b ≤ 0 ⇔ Lemma 3's condition (1),
    ⟨R(V1) − R(V), U − U′⟩ ≥ ‖U − U′‖ f(γ), on random soft instances."""
    rng = np.random.default_rng(2)
    agree = 0
    for _ in range(500):
        K, n = 4, 30
        onehot = np.eye(K)[rng.integers(0, K, n)]
        w, h = rng.uniform(0.1, 1, n), rng.uniform(0, 1, n)
        U = np.full(K, 1 / K)
        Up = rng.dirichlet(np.ones(K))
        gamma = rng.uniform(0.01, 0.3)
        b = lemma4_costs(onehot, w, U, Up, gamma)
        rv, rv1 = w @ onehot / w.sum(), (w * h) @ onehot / (w * h).sum()
        cond = (rv1 - rv) @ (U - Up) >= np.linalg.norm(U - Up) * lemma3_f(
            gamma, float(np.linalg.norm(rv - Up)))
        agree += cond == ((w * h) @ b <= 0)
    assert agree == 500
