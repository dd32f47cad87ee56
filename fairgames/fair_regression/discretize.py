"""Paper 003's discretisation (§4.1–4.2, App. A and F): cells, ℓ_α, the costs c and c_λ,
the prefix sums g_λ and the argmin targets U_i of the LS / LR oracles.

A prediction ``u`` falls in cell ``k(u) = #{z ∈ 𝒵 : z ≤ u}`` ∈ {0, …, N}, so ``⌊u⌋_α = k·α``
and ``1{u ≥ z_j} = 1{k(u) ≥ j}``: the cell of a prediction is exactly what the threshold
rates of :mod:`fairgames.rates.thresholds` see (``cells``, ``cell_values`` and ``rounded``
live there, beside the grid, and are re-exported here), and a prediction below 0 falls in
cell 0 (notes §5 #1–#2: we keep the paper's grid without 0 and
never clip the model; the rounding does it).

Decisions (notes §5):

* #3 no label cover: ``y̲ = y``, as the authors' code does; ``c(y, z)`` is defined for every
  y and the cover only enters the paper's complexity argument.
* #7 the argmin cell of ``g_λ`` breaks ties towards the lowest cell, and its target is the
  cell's midpoint ``kα + α/2`` (the point ℓ_α scores), except the top cell ``{u ≥ 1}``,
  whose target is 1 (ℓ(y, u) = ℓ(y, 1) there): every target lies inside its own cell.

Example:
    >>> import torch
    >>> from fairgames.rates.losses import SQUARED
    >>> cells(torch.tensor([-0.3, 0.0, 0.25, 0.6, 1.0, 1.7]), 4).tolist()
    [0, 0, 1, 2, 4, 4]
    >>> c = costs(SQUARED, torch.tensor([0.0, 1.0]), 2)      # z = 0.5, 1
    >>> c.tolist()                                           # N(ℓ(y, z+α/2) − ℓ(y, z−α/2))
    [[0.5, 0.4375], [-0.5, -0.0625]]
"""

from __future__ import annotations

import torch

from fairgames.rates.losses import Loss
from fairgames.rates.thresholds import cell_values, cells, rounded, threshold_grid

__all__ = ["cell_values", "cells", "clamped_loss", "costs", "discretized_loss",
           "lagrangian_costs", "predictor_cost", "prefix_sums", "rounded", "targets"]


def clamped_loss(loss: Loss, y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``ℓ(y, u)`` with the paper's convention ``ℓ(y, u) = ℓ(y, 1)`` for ``u ≥ 1`` (Eq. 5),
    broadcasting ``y`` against ``u``.

    Example:
        >>> import torch
        >>> from fairgames.rates.losses import SQUARED
        >>> clamped_loss(SQUARED, torch.tensor([0.0]), torch.tensor([1.5])).tolist()
        [0.5]
    """
    y, u = torch.broadcast_tensors(y, u.clamp(max=1.0))
    return loss(u.reshape(-1), y.reshape(-1)).reshape(u.shape)


def discretized_loss(loss: Loss, y: torch.Tensor, u: torch.Tensor,
                     grid_size: int) -> torch.Tensor:
    """``ℓ_α(y, u) = ℓ(y, ⌊u⌋_α + α/2)`` (Eq. 5, with ``y̲ = y``); ``|ℓ − ℓ_α| ≤ α`` (Eq. 6).

    Example:
        >>> import torch
        >>> from fairgames.rates.losses import SQUARED
        >>> discretized_loss(SQUARED, torch.tensor([0.0]), torch.tensor([0.3]), 4).tolist()
        [0.0703125]
    """
    return clamped_loss(loss, y.to(torch.float64), rounded(u, grid_size))


def costs(loss: Loss, y: torch.Tensor, grid_size: int) -> torch.Tensor:
    """``c(y, z) = N(ℓ(y, z + α/2) − ℓ(y, z − α/2))`` ``[n, N]`` (Eq. 9), in [−1, 1] for a
    1-Lipschitz ℓ; at ``z = 1`` the ``u ≥ 1`` convention applies.

    Example:
        >>> import torch
        >>> from fairgames.rates.losses import SQUARED
        >>> costs(SQUARED, torch.tensor([0.5]), 2).tolist()
        [[0.0, 0.1875]]
    """
    n = grid_size
    z = threshold_grid(n, dtype=torch.float64, device=y.device)
    y = y.to(torch.float64)[:, None]
    alpha = 1.0 / n
    return n * (clamped_loss(loss, y, z + alpha / 2) - clamped_loss(loss, y, z - alpha / 2))


def lagrangian_costs(c: torch.Tensor, codes: torch.Tensor, lam: torch.Tensor,
                     proportions: torch.Tensor) -> torch.Tensor:
    """``c_λ(y, a, z) = c(y, z) + Nλ_{a,z}/p_a − Σ_{a'} Nλ_{a',z}`` ``[n, N]`` (Eq. 12), with
    ``lam = λ⁺ − λ⁻`` ``[G, N]`` and ``proportions`` ``p_a`` ``[G]``. The N appears because
    ``E_Z`` weighs each threshold 1/N while the constraint sum does not (Eq. 37).

    Example:
        >>> import torch
        >>> c = torch.zeros(2, 1, dtype=torch.float64)
        >>> lam = torch.tensor([[0.1], [0.0]], dtype=torch.float64)
        >>> lagrangian_costs(c, torch.tensor([0, 1]), lam, torch.tensor([0.5, 0.5])).tolist()
        [[0.1], [-0.1]]
    """
    n = c.shape[1]
    lam = lam.to(c.device, c.dtype)
    per_group = (n * lam / proportions.to(c.device, c.dtype)[:, None]
                 - n * lam.sum(0, keepdim=True))
    return c + per_group[codes.to(c.device)]


def prefix_sums(c_lam: torch.Tensor) -> torch.Tensor:
    """``g_λ(y, a, u)`` for u in each cell: ``g[:, k] = (1/N) Σ_{j ≤ k} c_λ[:, j]``
    ``[n, N + 1]`` (``g[:, 0] = 0``), so ``(1/N) Σ_z c_λ(z)·1{u ≥ z} = g[:, k(u)]`` (App. F).

    Example:
        >>> import torch
        >>> prefix_sums(torch.tensor([[1.0, -3.0]])).tolist()
        [[0.0, 0.5, -1.0]]
    """
    n = c_lam.shape[1]
    zero = torch.zeros(c_lam.shape[0], 1, dtype=c_lam.dtype, device=c_lam.device)
    return torch.cat([zero, c_lam.cumsum(1) / n], 1)


def argmin_cells(g: torch.Tensor) -> torch.Tensor:
    """The argmin cell of each row of ``g`` ``[n, N + 1]``; ties go to the lowest cell
    (``torch.argmin`` returns the first minimum).

    Example:
        >>> import torch
        >>> argmin_cells(torch.tensor([[0.0, -1.0, -1.0], [0.0, 1.0, 2.0]])).tolist()
        [1, 0]
    """
    return torch.argmin(g, dim=1)


def targets(c_lam: torch.Tensor) -> torch.Tensor:
    """The LS / LR oracles' targets ``U_i ∈ argmin_u g_λ(Y_i, A_i, u)`` (§4.4): the value of
    the argmin cell (:func:`cell_values`, ties to the lowest cell).

    Example:
        >>> import torch
        >>> targets(torch.tensor([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0]])).tolist()
        [0.25, 0.75, 1.0]
    """
    return cell_values(argmin_cells(prefix_sums(c_lam)), c_lam.shape[1])


def predictor_cost(c: torch.Tensor, u: torch.Tensor, weights: torch.Tensor | None = None,
                   *, prefix: torch.Tensor | None = None) -> torch.Tensor:
    """``cost^(h_f) = Ê[(1/N) Σ_z c(Y, z)·1{f(X) ≥ z}]`` (Eq. 10) from the costs ``c``
    ``[n, N]`` and predictions ``u`` ``[n]``, by one gather of the prefix sums (a 0-dim
    tensor, no host read). Lemma 1: it equals ``loss_α(f) − Ê ℓ(Y, α/2)``. ``prefix``:
    ``prefix_sums(c)`` when the caller keeps it (``c`` is fixed over a run).

    Example:
        >>> import torch
        >>> float(predictor_cost(torch.tensor([[0.5, 0.25]]), torch.tensor([0.7])))
        0.25
    """
    g = prefix_sums(c) if prefix is None else prefix
    per_row = g.gather(1, cells(u, c.shape[1])[:, None])[:, 0]
    if weights is None:
        return per_row.mean()
    return (per_row * weights).sum() / weights.sum()
