"""Exact threshold rates and KS disparity (paper 003) against a brute-force numpy reference:
random data with ties, example weights, mixtures and a group with no weight."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.rates import thresholds
from fairgames.rates.thresholds import (
    ks_disparity,
    threshold_grid,
    threshold_rates,
)


def _reference_rates(s: np.ndarray, g: np.ndarray, G: int, z: np.ndarray,
                     w: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ_r q_r Σ_i w_i 1{s_ri ≥ z} over each group (NaN when empty) and overall."""
    hit = (s[:, :, None] >= z[None, None, :]).astype(float)       # [R, n, N]
    mix = np.einsum("r,rnz->nz", q, hit)                          # [n, N]
    groups = np.full((G, z.size), np.nan)
    for a in range(G):
        if w[g == a].sum() > 0:
            groups[a] = (w[g == a, None] * mix[g == a]).sum(0) / w[g == a].sum()
    overall = (w[:, None] * mix).sum(0) / w.sum()
    return groups, overall


def _reference_ks(s, g, G, w, q) -> float:
    z = np.unique(s)
    groups, overall = _reference_rates(s, g, G, z, w, q)
    keep = [a for a in range(G) if w[g == a].sum() > 0]
    return float(np.abs(groups[keep] - overall).max())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pairs_per_chunk", [None, 7])
def test_threshold_rates_and_ks_equal_brute_force(seed, pairs_per_chunk, monkeypatch):
    """Also with the members counted one at a time (a chunk of 7 pairs), as a mixture of
    thousands of members is, and with thresholds given out of order and repeated."""
    if pairs_per_chunk is not None:
        monkeypatch.setattr(thresholds, "PAIRS_PER_CHUNK", pairs_per_chunk)
    rng = np.random.default_rng(seed)
    R, n, G = int(rng.integers(1, 4)), int(rng.integers(5, 60)), 3
    # scores on a coarse lattice, so ties within and across members are common
    s = rng.integers(-2, 12, size=(R, n)) / 10.0
    g = rng.integers(0, G, size=n)
    g[g == 2] = 1 if seed % 2 else 2          # on odd seeds group 2 is absent
    w = rng.uniform(0.0, 2.0, size=n) * (rng.uniform(size=n) > 0.2)
    q = rng.dirichlet(np.ones(R))
    z = threshold_grid(10).numpy()
    t = threshold_rates(torch.tensor(s), torch.tensor(g), G, torch.tensor(z),
                        weights=torch.tensor(w), member_weights=torch.tensor(q))
    ref_groups, ref_overall = _reference_rates(s, g, G, z, w, q)
    np.testing.assert_allclose(t.overall.numpy(), ref_overall, atol=1e-12)
    np.testing.assert_allclose(t.groups.numpy(), ref_groups, atol=1e-12)   # NaN rows match
    ks = ks_disparity(torch.tensor(s), torch.tensor(g), G, weights=torch.tensor(w),
                      member_weights=torch.tensor(q))
    assert ks == pytest.approx(_reference_ks(s, g, G, w, q), abs=1e-12)
    # the grid's disparity can only be below the supremum over every z
    assert t.disparity() <= ks + 1e-12
    shuffled = torch.tensor(np.r_[z[::-1], z[3]])
    again = threshold_rates(torch.tensor(s), torch.tensor(g), G, shuffled,
                            weights=torch.tensor(w), member_weights=torch.tensor(q))
    np.testing.assert_allclose(again.overall.numpy(), np.r_[ref_overall[::-1], ref_overall[3]],
                               atol=1e-12)
    assert again.thresholds.tolist() == shuffled.tolist()


def test_one_predictor_is_a_mixture_of_one():
    s = torch.tensor([0.3, 0.3, 0.7, 1.0, 0.0])
    g = torch.tensor([0, 1, 1, 0, 1])
    a = threshold_rates(s, g, 2, threshold_grid(5))
    b = threshold_rates(s[None], g, 2, threshold_grid(5), member_weights=torch.ones(1))
    assert torch.equal(a.groups, b.groups) and torch.equal(a.overall, b.overall)


def test_grid_holds_one_and_not_zero():
    z = threshold_grid(40)
    assert z.numel() == 40 and float(z[0]) == pytest.approx(1 / 40) and float(z[-1]) == 1.0


@pytest.mark.parametrize("bad, match", [
    (dict(scores=torch.tensor([0.1, float("nan")])), "NaN"),
    (dict(codes=torch.tensor([0, 5])), "group codes must lie"),
    (dict(codes=torch.tensor([0])), r"group codes must be \[2\]"),
    (dict(weights=torch.tensor([0.0, 0.0])), "no example weight"),
    (dict(weights=torch.tensor([1.0, -1.0])), "non-negative"),
])
def test_bad_input_is_named(bad, match):
    args = dict(scores=torch.tensor([0.1, 0.9]), codes=torch.tensor([0, 1]), weights=None)
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        threshold_rates(args["scores"], args["codes"], 2, threshold_grid(4),
                        weights=args["weights"])


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_grid_size_must_be_a_positive_integer(size):
    with pytest.raises(ValueError, match="positive whole number"):
        threshold_grid(size)
