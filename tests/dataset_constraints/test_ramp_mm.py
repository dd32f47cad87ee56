"""The ramp's convex bounds, the exact inner SVM solve and Algorithm 1 (paper 001), against
numpy / scipy references and the MM guarantees (monotone objective, feasible iterates)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize as scipy_minimize

from fairgames.dataset_constraints.mm import (
    InfeasibleStartError,
    RampProblem,
    RateRow,
    error_row,
    minimize,
    ratio_row,
    solve_bound_problem,
)
from fairgames.dataset_constraints.ramp import bound_n, bound_p, ramp
from fairgames.dataset_constraints.svm import solve_hinge


def test_bounds_majorise_the_ramp_and_are_tight_at_the_reference_point():
    rng = np.random.default_rng(1)
    z, z_ref = rng.normal(scale=1.5, size=(2, 100_000))
    sigma = np.clip(0.5 + z, 0, 1)                 # the ramp, written out independently
    sigma_neg = np.clip(0.5 - z, 0, 1)
    assert (bound_p(z, z_ref) >= sigma - 1e-15).all()
    assert (bound_n(z, z_ref) >= sigma_neg - 1e-15).all()
    np.testing.assert_allclose(bound_p(z_ref, z_ref), np.clip(0.5 + z_ref, 0, 1), atol=1e-15)
    np.testing.assert_allclose(bound_n(z_ref, z_ref), np.clip(0.5 - z_ref, 0, 1), atol=1e-15)
    # convex in z: midpoint below the chord
    z2 = rng.normal(size=z.size)
    mid = bound_p((z + z2) / 2, z_ref)
    assert (mid <= (bound_p(z, z_ref) + bound_p(z2, z_ref)) / 2 + 1e-15).all()
    np.testing.assert_allclose(ramp(z), sigma)


def test_hinge_solve_matches_a_scipy_solve_of_its_dual_qp():
    rng = np.random.default_rng(2)
    q, c, lam = rng.normal(size=(60, 3)), rng.uniform(0, 1, 60), 0.3
    fit = solve_hinge(q, c, lam, tol=1e-10)

    def neg_dual(a):        # −(Σ a/2 − ‖Σ a q‖² / 2λ) and its gradient
        s = a @ q
        return -(a.sum() / 2 - s @ s / (2 * lam)), -(0.5 - q @ s / lam)

    ref = scipy_minimize(neg_dual, np.zeros(60), jac=True, method="L-BFGS-B",
                         bounds=list(zip(np.zeros(60), c, strict=True)),
                         options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
    assert fit.primal - fit.dual <= 1e-10
    assert abs(fit.dual - (-ref.fun)) <= 1e-7
    primal = c @ np.maximum(0, 0.5 - q @ fit.w) + lam / 2 * fit.w @ fit.w
    assert abs(primal - fit.primal) <= 1e-12


def _fair_problem(n=80, kappa=0.8, lam=0.05, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.random(n) < 0.5
    x = rng.normal(size=(n, 2)) + np.where(g, 0.8, -0.8)[:, None] * np.array([1.0, 0.0])
    y = (x[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(float)
    return RampProblem(x, error_row(y), (ratio_row(~g, g, kappa),), lam=lam), x, y, g


def test_mm_rounds_decrease_stay_feasible_and_converge():
    problem, *_ = _fair_problem()
    result = minimize(problem, max_rounds=30, tol=1e-7)
    assert result.start == "zero" and result.stopped == "tolerance"
    rounds = result.rounds
    for before, after in zip(rounds, rounds[1:], strict=False):
        assert after.gap <= 1e-6
        assert after.objective <= before.objective + after.gap
        assert max(after.constraints) <= after.gap
    # recomputed independently: the ramp rates on the subsets, with numpy
    x, g = problem.features, problem.constraints[0]
    z = x @ result.w
    assert g.pos @ np.clip(0.5 + z, 0, 1) + g.neg @ np.clip(0.5 - z, 0, 1) <= 1 + 1e-9
    again = minimize(problem, start=result.w, max_rounds=1)
    assert abs(again.rounds[1].objective - rounds[-1].objective) < 1e-7
    assert rounds[-1].objective < rounds[0].objective - 0.05     # it did learn something


@pytest.mark.slow
def test_mm_against_an_exhaustive_search_in_two_dimensions():
    problem, *_ = _fair_problem(n=120, lam=0.01, seed=3)
    result = minimize(problem, max_rounds=30, tol=1e-7)
    radii = np.geomspace(1e-2, 30, 300)
    angles = np.linspace(0, 2 * np.pi, 720, endpoint=False)
    grid = (radii[:, None, None] * np.stack([np.cos(angles), np.sin(angles)], -1)).reshape(-1, 2)
    best = min(problem.objective_value(w) for w in grid if problem.feasible(w))
    # reported, not asserted: MM reaches a local optimum of a non-convex problem
    print(f"MM objective {result.rounds[-1].objective:.6f}, exhaustive {best:.6f}, "
          f"gap {result.rounds[-1].objective - best:+.2e} after {len(result.rounds) - 1} rounds")


def test_kappa_must_be_positive():
    with pytest.raises(ValueError, match="needs κ > 0"):
        ratio_row(np.array([True, False]), np.array([False, True]), 0.0)


def test_an_infeasible_problem_is_refused_with_a_remedy():
    x = np.array([[1.0, 0.5], [-1.0, -0.5]])     # symmetric: ppr = 1/2 for every w
    everyone = np.array([True, True])
    problem = RampProblem(x, error_row(np.array([1.0, 0.0])),
                          (ratio_row(everyone, everyone, 2.0),), lam=0.1)
    with pytest.raises(InfeasibleStartError, match="loosen the constraints"):
        minimize(problem)
    feasible = RampProblem(x, problem.objective, (ratio_row(everyone, everyone, 0.5),), 0.1)
    with pytest.raises(InfeasibleStartError, match="the given start"):
        minimize(RampProblem(x, problem.objective, problem.constraints, 0.1),
                 start=np.zeros(2))
    assert minimize(feasible).start == "zero"


def test_phase_one_finds_a_start_when_zero_is_infeasible():
    rng = np.random.default_rng(4)
    x = np.abs(rng.normal(size=(80, 2))) + 0.1     # all in the positive quadrant
    y = (rng.random(80) < 0.5).astype(float)
    at_least_90 = RateRow(np.zeros(80), np.full(80, 1 / 80), 0.1, name="ppr>=0.9")
    problem = RampProblem(x, error_row(y), (at_least_90,), lam=0.01)
    assert not problem.feasible(np.zeros(2))
    result = minimize(problem)
    assert result.start == "phase_one"
    assert all(max(r.constraints) <= 1e-9 for r in result.rounds)
    assert np.clip(0.5 + x @ result.w, 0, 1).mean() >= 0.9 - 1e-9


def test_bound_problem_certificate_brackets_a_scipy_solve():
    problem, *_ = _fair_problem(n=60, seed=5)
    start = minimize(problem, max_rounds=1).w
    solve = solve_bound_problem(problem, start)
    assert solve.lower <= solve.upper + 1e-12 and solve.gap <= 1e-6
    # the bound problem's value at its own solution equals the ramp objective's upper bound
    assert problem.objective_value(solve.w) <= solve.upper + 1e-12


def test_problem_three_is_the_ramp_bounds_summed():
    """The hinge pieces built for Problem 3 sum to Σ pos·σ̌_p + neg·σ̌_n (ramp.py's bounds)."""
    from fairgames.dataset_constraints.mm import _bounds

    problem, *_ = _fair_problem(n=50, seed=6)
    rng = np.random.default_rng(6)
    w_ref, w = rng.normal(size=(2, 2))
    z_ref, z = problem.features @ w_ref, problem.features @ w
    values = _bounds(problem, w_ref).values(w)
    for k, row in enumerate((problem.objective, *problem.constraints)):
        expected = row.pos @ bound_p(z, z_ref) + row.neg @ bound_n(z, z_ref)
        assert abs(values[k] - expected) <= 1e-12
