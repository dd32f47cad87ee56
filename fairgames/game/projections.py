"""Euclidean projections the players use, computed on the device without a host sync.

Every projection here is a fixed sequence of tensor ops (sort, cumsum, gather, where): no
Python branch reads a tensor value, so a step that projects never waits for the device.

Example:
    >>> import torch
    >>> project_l1_ball_nonnegative(torch.tensor([3.0, 1.0, -2.0]), 2.0).tolist()
    [2.0, 0.0, 0.0]
    >>> project_l1_ball_nonnegative(torch.tensor([0.5, -1.0]), 2.0).tolist()
    [0.5, 0.0]
"""

from __future__ import annotations

import math

import torch


def project_l1_ball_nonnegative(x: torch.Tensor, radius: float) -> torch.Tensor:
    """Projection of ``x`` [n] onto ``{λ >= 0, Σ λ <= radius}`` (the multipliers' set Λ).

    The KKT conditions give ``λ = max(x - τ, 0)`` with the smallest ``τ >= 0`` such that the
    sum is at most ``radius``; ``τ > 0`` only depends on the positive part of ``x``, and is
    found by the sort-and-threshold rule of the simplex projection (Held et al.; Duchi et al.
    2008): with ``u`` sorted descending, ``τ = (Σ_{i≤ρ} u_i − radius)/ρ`` at the last ``ρ``
    with ``u_ρ > (Σ_{i≤ρ} u_i − radius)/ρ``, which is also the largest of the partial values
    ``(Σ_{i≤j} u_i − radius)/j`` (they rise up to ``ρ`` and fall after it), so one ``max``
    finds it. When the positive part already fits, ``τ`` is negative and is clamped to zero.
    ``radius = inf`` is the plain non-negative orthant.
    """
    if x.dim() != 1:
        raise ValueError(f"expected a vector, got shape {tuple(x.shape)}")
    pos = x.clamp_min(0.0)
    if math.isinf(radius) or x.numel() == 0:
        return pos
    if not radius > 0:
        raise ValueError(f"the radius must be positive, got {radius}")
    tau = _threshold(pos, radius)
    return (pos - tau.clamp_min(0.0)).clamp_min(0.0)


def project_simplex(x: torch.Tensor, total: float = 1.0) -> torch.Tensor:
    """Projection of ``x`` [n] onto ``{λ >= 0, Σ λ = total}``."""
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"expected a non-empty vector, got shape {tuple(x.shape)}")
    return (x - _threshold(x, total)).clamp_min(0.0)


# (n, device, dtype) → [1, 2, ..., n]: made once, not per projection.
_COUNTS: dict[tuple[int, torch.device, torch.dtype], torch.Tensor] = {}


def _threshold(x: torch.Tensor, total: float) -> torch.Tensor:
    """``max_j (Σ_{i≤j} u_i − total)/j`` over ``u = sort(x)`` descending: the threshold τ of
    the simplex projection (a device scalar)."""
    key = (x.numel(), x.device, x.dtype)
    k = _COUNTS.get(key)
    if k is None:
        k = _COUNTS[key] = torch.arange(1, x.numel() + 1, device=x.device, dtype=x.dtype)
    u, _ = torch.sort(x, descending=True)
    return ((torch.cumsum(u, 0) - total) / k).max()


def project_box(x: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Projection onto the box ``[lower, upper]`` (element-wise)."""
    return torch.minimum(torch.maximum(x, lower), upper)
