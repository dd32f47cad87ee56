"""Intersecting groups (paper 002, Appendix A.2): z as several attributes, balanced marginal
by marginal towards ``U_intersect``, against answers computed by hand and scipy's SLSQP."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fairgames.filtering import BalancedFilter, FilterError
from fairgames.filtering.intersect import Intersecting
from fairgames.filtering.qp import sampling_for_total

# joint shares of (race, sex): (a, f), (a, m), (b, f), (b, m)
JOINT = [("a", "f", 0.5), ("a", "m", 0.3), ("b", "f", 0.15), ("b", "m", 0.05)]


def known_instance(n: int = 4000, seed: int = 0):
    """Features that reveal the joint group exactly (four separated clusters)."""
    rng = np.random.default_rng(seed)
    j = rng.choice(4, size=n, p=[s for *_, s in JOINT])
    Z = np.array([[JOINT[i][0], JOINT[i][1]] for i in j], dtype=object)
    X = 10.0 * np.eye(4)[j] + rng.normal(scale=0.1, size=(n, 4))
    return X, Z, j


def test_marginals_are_balanced_with_the_hand_computed_acceptance():
    """Cells = the joint groups (rows: their multi-hot vectors). Balanced marginals need
    q_af + q_am = q_af + q_bf = ½, so q = (t, ½ − t, ½ − t, t); the largest acceptance rate
    1/C, C = max_j q_j / r̂_j, is at t/r̂_bm = (½ − t)/r̂_bf. With the sample's r̂ that is the
    answer below (0.4 at the population's shares) — twice the yield of balancing the four
    joint groups (q = ¼ each: 1/C = 4 r̂_bm)."""
    X, Z, j = known_instance()
    f = BalancedFilter("qp_tree", random_state=0).fit(X, Z, feature_names=list("abcd"))
    assert f.groups_.tolist() == ["z0=a", "z0=b", "z1=f", "z1=m"]
    r = np.bincount(j, minlength=4) / len(j)
    t = 0.5 * r[3] / (r[2] + r[3])
    C = max(t / r[0], (0.5 - t) / r[1], (0.5 - t) / r[2], t / r[3])
    assert np.isclose(f.sampling_.acceptance, 1 / C, atol=1e-7)
    assert f.sampling_.exact
    rep = f.report(X, Z)
    np.testing.assert_allclose(rep["distribution_expected"], [0.5] * 4, atol=1e-7)
    assert rep["imbalance_expected"] < 1e-6 and rep["imbalance_base"] > 0.4
    assert rep["group_counts"] == [int((j < 2).sum()), int((j >= 2).sum()),
                                   int((j % 2 == 0).sum()), int((j % 2 == 1).sum())]
    joint = BalancedFilter("qp_tree").fit(X, j)           # the joint as one attribute
    assert np.isclose(joint.sampling_.acceptance, 4 * r.min(), atol=1e-7)
    assert f.sampling_.acceptance > 1.5 * joint.sampling_.acceptance


@pytest.mark.parametrize("seed", range(4))
def test_the_multi_hot_qp_matches_slsqp(seed):
    """Algorithm 1 on a random multi-hot table (rows: marginals of 2 + 3 groups) against
    SLSQP's min ‖qA − U_intersect‖ on the simplex."""
    rng = np.random.default_rng(seed)
    L = 3 + seed
    A = np.hstack([rng.dirichlet(np.ones(2) * 0.4, L), rng.dirichlet(np.ones(3) * 0.4, L)])
    U = np.array([0.5, 0.5, 1 / 3, 1 / 3, 1 / 3])
    rhat = rng.dirichlet(np.ones(L))
    s = sampling_for_total(A, rhat, U)
    res = minimize(lambda q: float(np.sum((q @ A - U) ** 2)), np.full(L, 1 / L),
                   bounds=[(0, 1)] * L, method="SLSQP",
                   constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 500})
    assert np.isclose(s.distance, np.sqrt(res.fun), atol=1e-5)
    kept = (rhat * s.rho) @ A / (rhat @ s.rho)          # Lemma 2's arithmetic, per marginal
    np.testing.assert_allclose(kept, s.distribution, atol=1e-9)


@pytest.mark.parametrize("proxy", ["alpha_beta", "relaxed"])
def test_the_tree_bounds_every_marginal_and_balances(proxy, tmp_path):
    """The (α, β)-tree on multi-hot z: every leaf's marginal within α of the base marginal
    (one constraint per column, A.2), imbalance below the base; save / load keep it."""
    rng = np.random.default_rng(3)
    X, Z, j = known_instance(1500, seed=3)
    X = X[:, :4] / 10 + rng.normal(scale=0.6, size=X.shape)      # a weaker signal
    alpha = 0.3
    f = BalancedFilter(proxy, alpha=alpha, tree_options={"T": 60, "min_leaf": 30}).fit(X, Z)
    assert f.proxy_.n_cells >= 2
    M = f.intersect_.members(Z)
    prior = M.mean(0)
    W = f.proxy_.memberships(X)
    A = (W.T @ M) / W.sum(0)[:, None]
    assert np.abs(A - prior).max() <= alpha + 1e-9
    rep = f.report(X, Z)
    assert rep["imbalance_expected"] < rep["imbalance_base"]
    f.save(tmp_path / "f.json")
    g = BalancedFilter.load(tmp_path / "f.json")
    assert g.intersect_ == f.intersect_
    assert np.isclose(g.report(X, Z)["imbalance_expected"], rep["imbalance_expected"])


def test_refusals_name_the_remedy():
    X, Z, _ = known_instance(400)
    with pytest.raises(FilterError, match="cannot balance intersecting groups"):
        BalancedFilter("naive_tree").fit(X, Z)
    with pytest.raises(FilterError, match="one distribution per attribute"):
        BalancedFilter("qp_tree", target=[0.5, 0.5, 0.2, 0.2]).fit(X, Z)
    f = BalancedFilter("qp_tree").fit(X, Z)
    with pytest.raises(FilterError, match="holds values the filter was not fitted on"):
        f.report(X[:1], np.array([["c", "f"]], dtype=object))
    with pytest.raises(FilterError, match="takes one value only"):
        Intersecting.fit(np.array([["a", "f"], ["b", "f"]], dtype=object), None, 2)


def test_a_given_target_is_honoured_per_attribute():
    X, Z, _ = known_instance()
    f = BalancedFilter("qp_tree", target=[0.6, 0.4, 0.5, 0.5]).fit(X, Z)
    np.testing.assert_allclose(f.sampling_.distribution, [0.6, 0.4, 0.5, 0.5], atol=1e-7)
