"""Algorithm 4 of paper 002 (fairgames.filtering.abtree) and ``BalancedFilter("alpha_beta")``:
the paper's exact checks (α = 0 → one leaf and the base rates; Theorem 2's bound; a hull
distance that never grows; every leaf α-disclosive) against numpy recomputations."""

from __future__ import annotations

import numpy as np
import pytest

from fairgames.filtering import BalancedFilter, FilterError
from fairgames.filtering.abtree import fit_alpha_beta, theorem2_rounds
from fairgames.filtering.metrics import posterior_table

FAST = {"T": 100}


@pytest.fixture(scope="module")
def sample(make_data):
    return make_data(2000, seed=1, signal=1.5)


def test_alpha_zero_keeps_one_leaf_and_the_base_rates(sample):
    """α = 0: no split can be accepted (a 0-disclosive split leaves the hull as it is), so the
    proxy is one leaf and the filter keeps every row: the base rates (Figs 3–4)."""
    X, z = sample
    f = BalancedFilter("alpha_beta", alpha=0.0, tree_options=FAST).fit(X, z)
    assert f.proxy_.n_cells == 1 and f.proxy_.splits == ()
    prior = np.bincount(z) / len(z)
    assert np.allclose(f.sampling_.distribution, prior, atol=1e-12)
    assert np.isclose(f.sampling_.acceptance, 1.0)
    assert np.allclose(f.acceptance_probabilities(X), 1.0)


def test_theorem2_bound_and_geometric_progress(sample):
    """Every accepted split shrinks the hull distance by at least 1 − γ (so it never grows),
    the first distance is at most √2, and the accepted splits stay within Theorem 2's
    ⌈(ln β − ln √2) / ln(1 − γ)⌉ = 26 at γ = β = 0.1."""
    X, z = sample
    gamma, beta = 0.1, 0.1
    p = fit_alpha_beta(X, z, 3, 0.6, gamma=gamma, beta_stop=beta, T=100, min_leaf=20)
    d = np.array(p.distances)
    assert len(p.splits) >= 2                       # the check below is not vacuous
    assert theorem2_rounds(beta, gamma) == 26
    assert len(p.splits) <= 26
    assert d[0] <= np.sqrt(2) and np.all(d[1:] <= (1 - gamma) * d[:-1] + 1e-12)
    # the recorded distance is that of the leaves' rows, recomputed here from the tree
    A, mass = posterior_table(p.memberships(X), z, 3)
    assert len(d) == len(p.splits) + 1 and n_leaves_ok(p)
    f = BalancedFilter("alpha_beta", alpha=0.6,
                       tree_options={"T": 100, "min_leaf": 20}).fit(X, z)
    assert np.isclose(f.sampling_.distance, d[-1], atol=1e-7)
    assert np.allclose(f.posterior_, A) and np.allclose(f.cell_mass_, mass)


def n_leaves_ok(p) -> bool:
    return p.n_cells == len(p.splits) + 1 and len(set(p.paths)) == p.n_cells


@pytest.mark.parametrize(("alpha", "min_leaf"), [(0.1, 80), (0.3, 80), (0.6, 500)])
def test_every_leaf_is_alpha_disclosive_and_large_enough(sample, alpha, min_leaf):
    """In sample, each leaf's row lies within α of the base rates (Def 5, soft weights) and
    holds at least min_leaf rows of mass (Theorem 3's minimum; at 500 it rejects a split of
    a 360-row child that 300 accepts)."""
    X, z = sample
    p = fit_alpha_beta(X, z, 3, alpha, T=100, min_leaf=min_leaf)
    W = p.memberships(X)
    A, _ = posterior_table(W, z, 3)
    prior = np.bincount(z) / len(z)
    assert p.n_cells >= 2
    assert np.abs(A - prior).max() <= alpha + 1e-9
    assert W.sum(0).min() >= min_leaf - 1e-9
    assert np.allclose(W.sum(1), 1.0)


def test_balances_better_than_the_base_rates_and_saves(sample, tmp_path):
    """The filter's kept distribution is closer to uniform than the base rates (measured on
    the rows, in expectation); a saved filter reloads to the same acceptance probabilities."""
    X, z = sample
    f = BalancedFilter("alpha_beta", alpha=0.3, tree_options=FAST).fit(X, z)
    p = f.acceptance_probabilities(X)
    kept = np.bincount(z, weights=p, minlength=3) / p.sum()
    base = np.bincount(z) / len(z)
    u = np.full(3, 1 / 3)
    assert np.linalg.norm(kept - u) < 0.5 * np.linalg.norm(base - u)
    assert np.isclose(np.linalg.norm(kept - u), f.report(X, z)["imbalance_expected"])
    f.save(tmp_path / "f.json")
    g = BalancedFilter.load(tmp_path / "f.json")
    assert np.array_equal(g.acceptance_probabilities(X), p)
    assert g.get_params()["alpha"] == 0.3 and g.proxy_.paths == f.proxy_.paths


def test_bad_alpha_and_options_are_refused(sample):
    X, z = sample
    with pytest.raises(FilterError, match="alpha must lie in"):
        BalancedFilter("alpha_beta", alpha=1.5).fit(X, z)
    with pytest.raises(FilterError, match="unknown tree options"):
        BalancedFilter("alpha_beta", tree_options={"depth": 3}).fit(X, z)
