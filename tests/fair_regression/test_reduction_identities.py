"""Paper 003's exact identities (notes §3.5 #1) on random data, against direct references:
Lemma 1 / Eq. 15, c ∈ [−1, 1], Eq. 6, Eq. 12, the g_λ prefix sums, the closed-form Best_λ."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fairgames.fair_regression import best_lambda
from fairgames.fair_regression.discretize import (
    cells,
    clamped_loss,
    costs,
    discretized_loss,
    lagrangian_costs,
    predictor_cost,
    prefix_sums,
    targets,
)
from fairgames.rates.losses import BOUNDED_LOGISTIC, SQUARED

LOSSES = [SQUARED, BOUNDED_LOGISTIC]


def _data(seed: int, n: int = 300, groups: int = 3):
    g = torch.Generator().manual_seed(seed)
    y = torch.rand(n, generator=g, dtype=torch.float64)
    y[:10] = torch.tensor([0.0, 1.0, 0.5, 0.25, 0.125, 1.0, 0.0, 0.75, 0.375, 0.9])
    # predictions spill outside [0, 1] and hit grid points exactly
    u = torch.rand(n, generator=g, dtype=torch.float64) * 1.4 - 0.2
    u[:6] = torch.tensor([0.0, 1.0, 0.25, 0.5, 1.25, -0.1])
    codes = torch.randint(0, groups, (n,), generator=g)
    return y, u, codes


def _indicators(u: torch.Tensor, n_grid: int) -> np.ndarray:
    """h_f(x, z) = 1{f(x) ≥ z} on the grid, by direct comparison (numpy)."""
    z = np.arange(1, n_grid + 1) / n_grid
    return (u.numpy()[:, None] >= z[None, :]).astype(float)


@pytest.mark.parametrize("loss", LOSSES, ids=lambda x: x.name)
@pytest.mark.parametrize("n_grid", [4, 40])
def test_lemma_1_cost_is_the_discretized_loss_minus_a_constant(loss, n_grid):
    y, u, _ = _data(0)
    alpha = 1.0 / n_grid
    c = costs(loss, y, n_grid).numpy()
    h = _indicators(u, n_grid)
    cost_direct = float((c * h).mean(1).mean())              # Ê E_Z[c(Y, Z) h_f(X, Z)]
    # ℓ_α from the definition: ℓ(y, ⌊u⌋_α + α/2), ⌊u⌋_α = α·floor(u/α) clipped to [0, 1]
    floor = np.clip(np.floor(u.numpy() / alpha + 1e-12) * alpha, 0.0, 1.0)
    point = torch.from_numpy(np.minimum(floor + alpha / 2, 1.0))
    loss_alpha = loss(point, y).numpy()
    offset = loss(torch.full_like(y, alpha / 2), y).numpy()
    assert cost_direct == pytest.approx(float((loss_alpha - offset).mean()), abs=1e-12)
    assert float(predictor_cost(torch.from_numpy(c), u)) == pytest.approx(cost_direct, abs=1e-12)
    np.testing.assert_allclose(discretized_loss(loss, y, u, n_grid).numpy(), loss_alpha,
                               atol=1e-12)


@pytest.mark.parametrize("loss", LOSSES, ids=lambda x: x.name)
def test_costs_lie_in_minus_one_one_and_discretization_error_is_at_most_alpha(loss):
    y, u, _ = _data(1)
    for n_grid in (2, 10, 40):
        c = costs(loss, y, n_grid)
        assert float(c.abs().max()) <= 1.0 + 1e-12
        # Eq. 6 on u ∈ [0, 1] and beyond (ℓ(y, u) = ℓ(y, 1) for u ≥ 1)
        exact = clamped_loss(loss, y, u.clamp(min=0.0))
        gap = (exact - discretized_loss(loss, y, u.clamp(min=0.0), n_grid)).abs()
        assert float(gap.max()) <= 1.0 / n_grid + 1e-12


def test_eq_12_direct_lagrangian_equals_the_c_lambda_form():
    y, u, codes = _data(2)
    n_grid, groups = 8, 3
    g = torch.Generator().manual_seed(3)
    lam_plus = torch.rand(groups, n_grid, generator=g, dtype=torch.float64)
    lam_minus = torch.rand(groups, n_grid, generator=g, dtype=torch.float64)
    c = costs(SQUARED, y, n_grid)
    h = _indicators(u, n_grid)
    cost = (c.numpy() * h).mean()
    p = np.bincount(codes.numpy(), minlength=groups) / len(codes)
    gamma = np.stack([h[codes.numpy() == a].mean(0) for a in range(groups)]) - h.mean(0)
    eps = 0.05
    direct = cost + float((lam_plus.numpy() * (gamma - eps)).sum()
                          + (lam_minus.numpy() * (-gamma - eps)).sum())
    c_lam = lagrangian_costs(c, codes, lam_plus - lam_minus, torch.from_numpy(p))
    via_c_lam = float((c_lam.numpy() * h).mean()) - eps * float((lam_plus + lam_minus).sum())
    assert via_c_lam == pytest.approx(direct, abs=1e-12)


def test_prefix_sums_equal_the_indicator_sum_and_targets_are_their_argmin():
    y, u, codes = _data(4)
    n_grid = 12
    g = torch.Generator().manual_seed(5)
    c_lam = torch.randn(len(y), n_grid, generator=g, dtype=torch.float64)
    gl = prefix_sums(c_lam)
    h = _indicators(u, n_grid)
    direct = (c_lam.numpy() * h).sum(1) / n_grid            # (1/N) Σ_z c_λ(z) h_f(x, z)
    np.testing.assert_allclose(gl.gather(1, cells(u, n_grid)[:, None])[:, 0].numpy(), direct,
                               atol=1e-12)
    # U_i minimises g_λ over a fine grid of u ∈ [0, 1] (brute force)
    fine = torch.linspace(0, 1, 2001, dtype=torch.float64)
    values = (c_lam.numpy()[:, None, :] * _indicators(fine, n_grid)[None]).sum(2) / n_grid
    best = values.min(1)
    u_star = targets(c_lam)
    at_target = (c_lam.numpy() * _indicators(u_star, n_grid)).sum(1) / n_grid
    np.testing.assert_allclose(at_target, best, atol=1e-12)


def test_closed_form_best_lambda_equals_brute_force_over_the_ball_vertices():
    g = torch.Generator().manual_seed(6)
    for trial in range(50):
        m = 1 + trial % 7
        values = torch.randn(m, generator=g, dtype=torch.float64) - 0.3 * (trial % 3)
        bound = 0.5 + trial / 10
        vertices = [torch.zeros(m, dtype=torch.float64)] + [
            bound * torch.eye(m, dtype=torch.float64)[j] for j in range(m)]
        brute = max(float(v @ values) for v in vertices)
        lam = best_lambda(values, bound)
        assert float(lam @ values) == pytest.approx(brute, abs=1e-12)
        assert float(lam.sum()) <= bound + 1e-12 and bool((lam >= 0).all())
    # and no point of the ball beats it (random interior points)
    values = torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64)
    best = float(best_lambda(values, 3.0) @ values)
    for w in itertools.product(np.linspace(0, 1, 6), repeat=3):
        lam = torch.tensor(w, dtype=torch.float64)
        lam = 3.0 * lam / max(1.0, float(lam.sum()))
        assert float(lam @ values) <= best + 1e-12
