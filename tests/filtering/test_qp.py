"""Algorithm 1 (paper 002) against independent references: Lemma 2 exactness computed by
numpy from ρ and A; the relaxed/hull identity of the notes (§2.9); the acceptance floor
against a direct LP in the ρ variables; the QP against scipy's trust-constr (another
solver than the SLSQP it uses); zero-mass cells dropped."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, linprog, minimize, nnls

from fairgames.filtering import FilterError, equal_count_probabilities, sampling_probabilities


def _table_with_target_inside(rng, L, K, target):
    """A random posterior table whose hull holds ``target``: rows target + s·D with D of zero
    row sums and zero q0-weighted mean, so q0·A = target exactly."""
    q0 = rng.dirichlet(np.ones(L))
    D = rng.normal(size=(L, K))
    D -= D.mean(1, keepdims=True)
    D -= q0 @ D
    s = 0.9 * np.min(target / np.abs(D).max())  # keeps every entry positive
    return target + s * D


def _kept_distribution(A, rhat, rho):
    """Pr[z = k | accept] = Σ_j r̂_j ρ_j A_jk / Σ_j r̂_j ρ_j (the arithmetic of Lemma 2)."""
    joint = (rhat * rho) @ A
    return joint / joint.sum()


@pytest.mark.parametrize("seed", range(20))
def test_lemma_2_the_kept_distribution_is_the_target_when_it_lies_in_the_hull(seed):
    rng = np.random.default_rng(seed)
    L, K = rng.integers(3, 12), rng.integers(2, 6)
    target = rng.dirichlet(np.ones(K)) if seed % 2 else np.full(K, 1 / K)
    A = _table_with_target_inside(rng, L, K, target)
    rhat = rng.dirichlet(np.ones(L))
    s = sampling_probabilities(A, rhat, target)
    assert s.exact and s.method == "lp"
    np.testing.assert_allclose(_kept_distribution(A, rhat, s.rho), target, atol=1e-8)
    assert s.rho.max() == pytest.approx(1.0) and s.rho.min() >= 0
    assert s.acceptance == pytest.approx(float(rhat @ s.rho))


def _max_exact_acceptance(A, rhat, target):
    """Independent formulation in ρ: max Σ r̂_j ρ_j s.t. Σ_j r̂_j ρ_j (A_jk − U_k) = 0,
    0 ≤ ρ ≤ 1."""
    res = linprog(-rhat, A_eq=(rhat[:, None] * (A - target)).T, b_eq=np.zeros(A.shape[1]),
                  bounds=[(0, 1)] * len(rhat), method="highs")
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("seed", range(10))
def test_the_exact_solution_has_the_largest_acceptance_rate_of_a_direct_lp(seed):
    rng = np.random.default_rng(100 + seed)
    L, K = 8, 3
    A = _table_with_target_inside(rng, L, K, np.full(K, 1 / K))
    rhat = rng.dirichlet(np.ones(L))
    best = _max_exact_acceptance(A, rhat, np.full(K, 1 / K))
    assert sampling_probabilities(A, rhat).acceptance == pytest.approx(best, rel=1e-7)
    # a floor below the best stays exact; one above it cannot be exact but is honoured
    low = sampling_probabilities(A, rhat, min_acceptance=0.5 * best)
    assert low.exact and low.acceptance >= 0.5 * best - 1e-9
    high = sampling_probabilities(A, rhat, min_acceptance=min(1.0, 1.5 * best))
    assert not high.exact and high.acceptance >= min(1.0, 1.5 * best) - 1e-9
    assert high.method == "qp+lp" and high.distance > 1e-6


def _reference_qp(A, target, cap):
    """min ‖qA − U‖² on the simplex ∩ box by another solver (trust-constr, not SLSQP), with
    the problem written in p = qA's Hessian form."""
    L = len(A)
    res = minimize(lambda q: float(np.sum((q @ A - target) ** 2)), np.full(L, 1 / L),
                   jac=lambda q: 2 * A @ (q @ A - target), hess=lambda q: 2 * A @ A.T,
                   method="trust-constr", bounds=Bounds(np.zeros(L), cap),
                   constraints=[LinearConstraint(np.ones((1, L)), 1, 1)],
                   options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    return float(np.linalg.norm(np.clip(res.x, 0, cap) @ A - target))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("floor", [None, 0.3])
def test_the_qp_distance_matches_another_solvers(seed, floor):
    rng = np.random.default_rng(200 + seed)
    L, K = 5, 4
    A = rng.dirichlet(np.full(K, 0.7), size=L) * 0.5 + np.eye(K)[0] * 0.5  # U outside C(A)
    rhat = rng.dirichlet(np.ones(L))
    target = rng.dirichlet(np.ones(K))
    s = sampling_probabilities(A, rhat, target, min_acceptance=floor)
    cap = np.ones(L) if floor is None else rhat / floor
    ref = _reference_qp(A, target, cap)
    assert not s.exact
    assert s.distance == pytest.approx(ref, abs=1e-5)
    assert s.distance <= ref + 1e-6  # the LP refinement moves p* by ≤ 1e-7 a coordinate
    np.testing.assert_allclose(_kept_distribution(A, rhat, s.rho), s.distribution, atol=1e-9)
    if floor is not None:
        assert s.acceptance >= floor - 1e-9


@pytest.mark.parametrize("seed", range(10))
def test_relaxed_and_hull_distances_obey_the_identity_for_uniform_target(seed):
    # notes §2.9: rows on the simplex and U uniform ⇒ d_rel = d_h / sqrt(1 + K d_h²), and the
    # normalised relaxed point is the hull projection
    rng = np.random.default_rng(300 + seed)
    L, K = rng.integers(2, 6), rng.integers(3, 7)
    A = rng.dirichlet(np.full(K, 0.5), size=L)
    rhat = rng.dirichlet(np.ones(L))
    U = np.full(K, 1 / K)
    hull = sampling_probabilities(A, rhat)
    q_rel = nnls(A.T, U)[0]                    # scipy's NNLS, the unnormalised relaxation
    d_rel = np.linalg.norm(q_rel @ A - U)
    d_h = hull.distance
    assert d_rel == pytest.approx(d_h / np.sqrt(1 + K * d_h ** 2), abs=1e-6)
    relaxed = sampling_probabilities(A, rhat, relaxed=True)
    np.testing.assert_allclose(relaxed.distribution, hull.distribution, atol=1e-5)


def test_zero_mass_cells_are_dropped_and_listed():
    A = np.array([[0.9, 0.1], [0.0, 0.0], [0.2, 0.8]])
    rhat = np.array([0.5, 0.0, 0.5])
    s = sampling_probabilities(A, rhat)
    assert s.dropped == (1,) and s.rho[1] == 0 and s.q[1] == 0
    np.testing.assert_allclose(_kept_distribution(A, rhat, s.rho), [0.5, 0.5], atol=1e-9)
    assert equal_count_probabilities(A, rhat).dropped == (1,)


def test_equal_count_keeps_the_same_expected_count_of_every_cell():
    rng = np.random.default_rng(5)
    A, rhat = rng.dirichlet(np.ones(3), size=3), np.array([0.7, 0.2, 0.1])
    s = equal_count_probabilities(A, rhat)
    kept = rhat * s.rho
    np.testing.assert_allclose(kept, kept[0])
    assert s.acceptance == pytest.approx(3 * 0.1)
    np.testing.assert_allclose(s.distribution, A.mean(0))


@pytest.mark.parametrize("target, words", [
    ([0.5, 0.6], "summing to 1"), ([1.2, -0.2], "non-negative"), ([1.0], "over the 2 groups")])
def test_a_target_that_is_not_a_distribution_is_refused(target, words):
    with pytest.raises(FilterError, match="target must be a distribution") as e:
        sampling_probabilities(np.eye(2), np.array([0.5, 0.5]), target)
    assert words in str(e.value) and "give 2 shares" in str(e.value)


@pytest.mark.parametrize("floor", [0.0, 1.5])
def test_a_floor_outside_0_1_is_refused(floor):
    with pytest.raises(FilterError, match=r"min_acceptance must lie in \(0, 1\]"):
        sampling_probabilities(np.eye(2), np.array([0.5, 0.5]), min_acceptance=floor)


def test_a_floor_of_one_keeps_every_row():
    rng = np.random.default_rng(9)
    A, rhat = rng.dirichlet(np.ones(3), size=6), rng.dirichlet(np.ones(6))
    s = sampling_probabilities(A, rhat, min_acceptance=1.0)
    np.testing.assert_allclose(s.rho, 1.0)
    np.testing.assert_allclose(s.distribution, rhat @ A)   # the prior: nothing filtered
