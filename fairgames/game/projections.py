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


def project_tv_simplex(x: torch.Tensor, center: torch.Tensor,
                       radius: torch.Tensor | float) -> torch.Tensor:
    """Euclidean projection of each row of ``x`` ``[G, n]`` (or ``[n]``) onto
    ``{p >= 0, Σ p = 1, ‖p − c‖₁ <= radius}`` for a distribution ``c = center``: the TV ball
    of paper 004 (``radius = 2γ``) intersected with the simplex.

    With multipliers ``μ >= 0`` (ℓ₁ term) and ``ν`` (sum), the KKT point is, per entry,
    ``p = max(0, c + S_μ(x + ν − c))`` (``S_μ`` the soft threshold), i.e.
    ``p = max(0, median(x − θ_up, c, x − θ_dn))`` with ``θ_up = μ − ν >= θ_dn = −μ − ν``.
    The mass moved up, ``U(θ_up) = Σ (x − c − θ_up)⁺``, depends on ``θ_up`` only; the mass
    moved down, ``D(θ_dn) = Σ min(c, (θ_dn − x + c)⁺)``, on ``θ_dn`` only; ``Σ p = 1`` is
    ``U = D`` and the ball ``U + D <= radius``. So either the simplex projection (``μ = 0``)
    lies in the ball, or the ball is active and ``U = D = radius/2``: ``θ_up`` is the
    threshold of the simplex projection rule on ``x − c`` and ``θ_dn`` the root of the
    piecewise-linear ``D``, found exactly from its sorted breakpoints. Sorts, cumulative
    sums and gathers in float64; no Python branch reads a tensor (no host sync).

    Example:
        >>> c = torch.tensor([0.5, 0.5, 0.0])
        >>> p = project_tv_simplex(torch.tensor([0.0, 0.0, 1.0]), c, 0.4)
        >>> [round(v, 4) for v in p.tolist()]
        [0.4, 0.4, 0.2]
    """
    single = x.dim() == 1
    xs, cs = (x[None], center[None]) if single else (x, center)
    if xs.shape != cs.shape or xs.dim() != 2 or xs.shape[1] == 0:
        raise ValueError(f"x and center must be non-empty [n] or [G, n] of one shape, got "
                         f"{tuple(x.shape)} and {tuple(center.shape)}")
    xd, cd = xs.double(), cs.double()
    half = (torch.as_tensor(radius, dtype=torch.float64, device=x.device)
            .expand(xs.shape[0]).clamp_min(0.0) / 2)[:, None]
    n = xs.shape[1]
    k = torch.arange(1, n + 1, device=x.device, dtype=torch.float64)
    simplex = (xd - _row_threshold(xd, torch.ones_like(half), k)).clamp_min(0.0)
    inside = (simplex - cd).clamp_min(0.0).sum(1, keepdim=True) <= half
    theta_up = _row_threshold(xd - cd, half, k)
    theta_dn = _down_threshold(xd, cd, half)
    ball = torch.minimum(torch.maximum(xd - theta_up, cd), xd - theta_dn).clamp_min(0.0)
    p = torch.where(inside, simplex, ball).to(x.dtype)
    return p[0] if single else p


def _row_threshold(y: torch.Tensor, total: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per row, the ``θ`` with ``Σ (y − θ)⁺ = total`` (``[G, 1]``; the simplex rule)."""
    u, _ = torch.sort(y, dim=1, descending=True)
    return ((torch.cumsum(u, 1) - total) / k).amax(1, keepdim=True)


def _down_threshold(x: torch.Tensor, c: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per row, the ``θ`` with ``D(θ) = Σ min(c, (θ − x + c)⁺) = target`` (``[G, 1]``):
    ``D`` is piecewise linear, its slope rising by 1 at ``x − c`` and falling by 1 at ``x``;
    integrating the slope over the sorted breakpoints gives ``D`` at each of them, and the
    root lies on the last segment starting at or below ``target`` (``target < Σ c = 1``)."""
    points = torch.cat([x - c, x], dim=1)
    delta = torch.cat([torch.ones_like(x), -torch.ones_like(x)], dim=1)
    b, order = torch.sort(points, dim=1)
    slope = torch.cumsum(torch.gather(delta, 1, order), 1)   # slope right of each point
    gaps = torch.diff(b, dim=1)
    d = torch.cat([torch.zeros_like(b[:, :1]), torch.cumsum(slope[:, :-1] * gaps, 1)], dim=1)
    j = ((d <= target).sum(1, keepdim=True) - 1).clamp_min(0)
    s = torch.gather(slope, 1, j)
    step = torch.where(s > 0, (target - torch.gather(d, 1, j)) / torch.where(s > 0, s, 1.0),
                       0.0)
    return torch.gather(b, 1, j) + step


def project_tv_authors(x: torch.Tensor, center: torch.Tensor,
                       radius: torch.Tensor | float) -> torch.Tensor:
    """Paper 004's released code's projection (its ``project_multipliers_wrt_euclidean_norm``
    applied to ``|p − p̂|``): the ℓ₁ distance ``|x − center|`` is projected onto
    ``{d >= 0, Σ d <= radius}``, the signs restored, ``center`` added back and the result
    clamped at 0. ``Σ p = 1`` is NOT enforced (a rate read as a ratio of weighted sums does not
    see the scale). Rows of ``[G, n]`` are projected independently.

    Example:
        >>> c = torch.tensor([0.5, 0.5, 0.0])
        >>> project_tv_authors(torch.tensor([0.0, 0.5, 1.0]), c, 0.5).tolist()
        [0.5, 0.5, 0.5]
    """
    single = x.dim() == 1
    xs, cs = (x[None], center[None]) if single else (x, center)
    if xs.shape != cs.shape or xs.dim() != 2:
        raise ValueError(f"x and center must be [n] or [G, n] of one shape, got "
                         f"{tuple(x.shape)} and {tuple(center.shape)}")
    d = xs - cs
    r = torch.as_tensor(radius, dtype=xs.dtype, device=x.device).expand(xs.shape[0])
    # max(|d| − τ, 0) with the per-row threshold τ of the ℓ₁ ball (0 when inside)
    u, _ = torch.sort(d.abs(), dim=1, descending=True)
    k = torch.arange(1, xs.shape[1] + 1, device=x.device, dtype=xs.dtype)
    tau = ((torch.cumsum(u, 1) - r[:, None]) / k).amax(1, keepdim=True).clamp_min(0.0)
    p = (cs + torch.sign(d) * (d.abs() - tau).clamp_min(0.0)).clamp_min(0.0)
    return p[0] if single else p


def project_simplices(x: torch.Tensor, total: float = 1.0) -> torch.Tensor:
    """Projection of every row ``x[..., :]`` onto ``{w >= 0, Σ w = total}`` (a product of
    simplices: paper 004's 𝒲_Δ, one simplex per noisy group and cell), sort-based, batched.

    Example:
        >>> project_simplices(torch.tensor([[0.5, 0.5], [2.0, 0.0]])).tolist()
        [[0.5, 0.5], [1.0, 0.0]]
    """
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"expected rows to project, got shape {tuple(x.shape)}")
    n = x.shape[-1]
    u, _ = torch.sort(x, dim=-1, descending=True)
    k = torch.arange(1, n + 1, device=x.device, dtype=x.dtype)
    tau = ((torch.cumsum(u, -1) - total) / k).amax(-1, keepdim=True)
    return (x - tau).clamp_min(0.0)
