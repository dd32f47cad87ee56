"""The inner SVM's solvers (paper 001's Problem 3 with fixed multipliers): smoothed Newton (the
default), L-BFGS-B on the dual and D's coordinate ascent agree, each with a certified gap, on
the weighted hinge whose pieces MM builds (±x rows, error weights, λ = 1/n)."""

from __future__ import annotations

import numpy as np
import pytest

from fairgames.dataset_constraints.svm import hinge_primal, solve_hinge


def _pieces(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    x = (rng.random((n, d)) < 0.3).astype(float)
    y = rng.random(n) < 0.3
    q = np.concatenate([-x, x])
    c = np.concatenate([np.where(y, 0.0, 1.0), np.where(y, 1.0, 0.0)]) / n
    return q, c, 1.0 / n


@pytest.mark.parametrize("solver", ["newton", "lbfgsb"])
def test_each_solver_and_coordinate_ascent_agree_within_their_certified_gaps(solver):
    q, c, lam = _pieces(120, 6, 0)
    fast = solve_hinge(q, c, lam, tol=1e-9, solver=solver)
    slow = solve_hinge(q, c, lam, tol=1e-9, solver="cd", max_epochs=20_000)
    for fit in (fast, slow):
        assert fit.primal - fit.dual <= 1e-9
        assert (fit.alpha >= 0).all() and (fit.alpha <= c).all()         # dual-feasible
        np.testing.assert_allclose(fit.w, fit.alpha @ q / lam, rtol=1e-12, atol=1e-12)
        assert fit.primal == pytest.approx(hinge_primal(q, c, lam, fit.w), abs=1e-15)
    # λ-strong convexity: (λ/2)‖w − w*‖² ≤ P(w) − P* ≤ gap, for both — so they are close
    bound = 2 * np.sqrt(2 * 1e-9 / lam)
    assert np.linalg.norm(fast.w - slow.w) <= bound
    assert abs(fast.primal - slow.primal) <= 2e-9


def test_the_default_solver_is_newton_and_an_unknown_one_is_refused():
    q, c, lam = _pieces(40, 3, 1)
    fit = solve_hinge(q, c, lam, tol=1e-9)
    ref = solve_hinge(q, c, lam, tol=1e-9, solver="newton")
    np.testing.assert_array_equal(fit.w, ref.w)
    with pytest.raises(ValueError, match="solvers are newton, lbfgsb, cd"):
        solve_hinge(q, c, lam, solver="simplex")
