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
    2008). When the positive part already fits, the computed ``τ`` is negative and is clamped
    to zero. ``radius = inf`` is the plain non-negative orthant.
    """
    if x.dim() != 1:
        raise ValueError(f"expected a vector, got shape {tuple(x.shape)}")
    pos = x.clamp_min(0.0)
    if math.isinf(radius) or x.numel() == 0:
        return pos
    if not radius > 0:
        raise ValueError(f"the radius must be positive, got {radius}")
    u, _ = torch.sort(pos, descending=True)
    css = torch.cumsum(u, 0)
    k = torch.arange(1, x.numel() + 1, device=x.device, dtype=x.dtype)
    # u sorted descending makes the condition true on a prefix: rho = its length (>= 1 when
    # the sum exceeds the radius, since u_1 - (u_1 - radius) = radius > 0).
    rho = (u - (css - radius) / k > 0).sum().clamp_min(1)
    tau = (css.gather(0, (rho - 1).reshape(1)) - radius) / rho.to(x.dtype)
    return (pos - tau.clamp_min(0.0)).clamp_min(0.0)


def project_simplex(x: torch.Tensor, total: float = 1.0) -> torch.Tensor:
    """Projection of ``x`` [n] onto ``{λ >= 0, Σ λ = total}``."""
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"expected a non-empty vector, got shape {tuple(x.shape)}")
    u, _ = torch.sort(x, descending=True)
    css = torch.cumsum(u, 0)
    k = torch.arange(1, x.numel() + 1, device=x.device, dtype=x.dtype)
    rho = (u - (css - total) / k > 0).sum().clamp_min(1)
    tau = (css.gather(0, (rho - 1).reshape(1)) - total) / rho.to(x.dtype)
    return (x - tau).clamp_min(0.0)


def project_box(x: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Projection onto the box ``[lower, upper]`` (element-wise)."""
    return torch.minimum(torch.maximum(x, lower), upper)
