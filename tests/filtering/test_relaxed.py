"""The relaxed (α, β)-proxy of paper 002 §5 (``BalancedFilter("relaxed")``,
``fit_alpha_beta(relaxed=True)``) and the hull's monotonicity under soft splits, against
independent references: the cone projection's optimality conditions (Moreau: the residual
is normal to the cone), scipy's bounded least squares, the notes' identity
``d_rel = d_hull / √(1 + K d_hull²)`` (§2.9) with the hull distance from scipy's SLSQP."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import lsq_linear, minimize

from fairgames.filtering import BalancedFilter
from fairgames.filtering.abtree import cone_projection, fit_alpha_beta
from fairgames.filtering.metrics import posterior_table

FAST = {"T": 100, "min_leaf": 20}


def slsqp_hull_distance(A: np.ndarray, U: np.ndarray) -> float:
    """min ‖qA − U‖ on the simplex by SLSQP (another solver than the library's LP/BVLS)."""
    L = A.shape[0]
    res = minimize(lambda q: float(np.sum((q @ A - U) ** 2)), np.full(L, 1.0 / L),
                   jac=lambda q: 2 * A @ (q @ A - U), bounds=[(0, 1)] * L, method="SLSQP",
                   constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 500})
    return float(np.sqrt(res.fun))


def random_rows(rng: np.random.Generator, L: int, K: int) -> np.ndarray:
    return rng.dirichlet(np.full(K, 0.5), size=L)


@pytest.mark.parametrize("seed", range(6))
def test_cone_projection_meets_its_optimality_conditions(seed):
    """p = qA is the projection of U on the cone {qA : q ≥ 0} iff ⟨a_j, U − p⟩ ≤ 0 for every
    row and ⟨p, U − p⟩ = 0 (Moreau); its distance equals scipy's bounded least squares and
    the notes' identity with the hull distance (uniform U)."""
    rng = np.random.default_rng(seed)
    K, L = 3 + seed % 3, 2 + seed
    A, U = random_rows(rng, L, K), np.full(3 + seed % 3, 1 / (3 + seed % 3))
    p, d = cone_projection(A, U)
    r = U - p
    assert np.all(A @ r <= 1e-9) and abs(p @ r) <= 1e-9
    assert np.isclose(d, np.linalg.norm(r))
    ref = lsq_linear(A.T, U, bounds=(0, np.inf), tol=1e-12).x
    assert np.isclose(d, np.linalg.norm(ref @ A - U), atol=1e-7)
    d_h = slsqp_hull_distance(A, U)
    assert np.isclose(d, d_h / np.sqrt(1 + K * d_h ** 2), atol=1e-6)


@pytest.mark.parametrize("relaxed", [False, True])
def test_distance_never_grows_under_random_soft_splits(relaxed):
    """Splitting a leaf V with any h ∈ [0, 1]ⁿ makes R(V) a convex combination of its
    children's rows: the hull (and the cone) only grow, so the distance to U never grows
    (notes §2.3). Hull distance by SLSQP, independent of the library's QP."""
    rng = np.random.default_rng(7)
    n, K = 400, 4
    z = rng.choice(K, size=n, p=[0.55, 0.25, 0.15, 0.05])
    onehot, U = np.eye(K)[z], np.full(K, 1 / K)
    W = np.ones((n, 1))
    last = np.inf
    for _ in range(12):
        A, mass = posterior_table(W, z, K)
        d = cone_projection(A[mass > 0], U)[1] if relaxed else slsqp_hull_distance(
            A[mass > 0], U)
        assert d <= last + 1e-7
        last = d
        i = rng.integers(W.shape[1])
        h = rng.uniform(size=n) ** rng.uniform(0.2, 5) * (onehot @ rng.uniform(size=K))
        W = np.concatenate([W[:, :i], (W[:, i] * h)[:, None], (W[:, i] * (1 - h))[:, None],
                            W[:, i + 1:]], axis=1)


@pytest.fixture(scope="module")
def sample(make_data):
    return make_data(2000, seed=1, signal=1.5)


def test_relaxed_tree_progress_leaves_and_rho(sample):
    """The relaxed tree records relaxed distances (recomputed here from its leaves through the
    SLSQP hull distance and the identity), each accepted split shrinks them by 1 − γ, every
    leaf is α-disclosive, and the filter's ρ keeps the hull's closest point (uniform U: the
    normalised relaxed point IS the hull projection)."""
    X, z = sample
    alpha, gamma = 0.6, 0.1
    p = fit_alpha_beta(X, z, 3, alpha, gamma=gamma, relaxed=True, **FAST)
    d = np.array(p.distances)
    assert p.relaxed and len(p.splits) >= 2
    assert np.all(d[1:] <= (1 - gamma) * d[:-1] + 1e-12)
    A, mass = posterior_table(p.memberships(X), z, 3)
    d_h = slsqp_hull_distance(A, np.full(3, 1 / 3))
    assert np.isclose(d[-1], d_h / np.sqrt(1 + 3 * d_h ** 2), atol=1e-6)
    prior = np.bincount(z) / len(z)
    assert np.abs(A - prior).max() <= alpha + 1e-9
    f = BalancedFilter("relaxed", alpha=alpha, tree_options=FAST).fit(X, z)
    assert f.sampling_.method == "nnls"
    assert np.isclose(np.linalg.norm(f.sampling_.distribution - 1 / 3), d_h, atol=1e-6)
    kept = f.report(X, z)
    assert kept["imbalance_expected"] < kept["imbalance_base"]


def test_relaxed_alpha_zero_is_one_leaf(sample):
    X, z = sample
    f = BalancedFilter("relaxed", alpha=0.0, tree_options=FAST).fit(X, z)
    assert f.proxy_.n_cells == 1
    assert np.allclose(f.sampling_.distribution, np.bincount(z) / len(z))


def test_relaxed_filter_saves_and_loads(sample, tmp_path):
    X, z = sample
    f = BalancedFilter("relaxed", alpha=0.4, tree_options=FAST).fit(X, z)
    f.save(tmp_path / "f.json")
    g = BalancedFilter.load(tmp_path / "f.json")
    assert g.proxy == "relaxed" and g.proxy_.relaxed
    assert np.array_equal(g.acceptance_probabilities(X), f.acceptance_probabilities(X))


def test_relaxed_from_the_command_line_options():
    """``filter.proxy=relaxed`` through the pipeline (scripts/filter.py's path)."""
    from fairgames.filtering.pipeline import fit_filter

    cfg = {"data": {"name": "synthetic", "protected": "group", "n": 600}, "seed": 0,
           "filter": {"proxy": "relaxed", "alpha": 0.3, "tree_options": {"T": 50}}}
    run = fit_filter(cfg)
    assert run.filter.proxy == "relaxed" and run.filter.proxy_.relaxed
    assert run.reports["train"]["disclosivity"] <= 0.3 + 1e-9


def test_relaxed_judged_by_the_hull_distance(sample):
    """``relaxed_tests=False``: U′ from the cone in the costs, progress and stopping by the
    hull distance — the recorded distances are hull distances (SLSQP), shrinking by 1 − γ."""
    X, z = sample
    p = fit_alpha_beta(X, z, 3, 0.6, relaxed=True, relaxed_tests=False, **FAST)
    d = np.array(p.distances)
    assert len(p.splits) >= 1 and np.all(d[1:] <= 0.9 * d[:-1] + 1e-12)
    A, _ = posterior_table(p.memberships(X), z, 3)
    assert np.isclose(d[-1], slsqp_hull_distance(A, np.full(3, 1 / 3)), atol=1e-6)
