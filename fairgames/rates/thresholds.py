"""Exact threshold rates ``P[f(X) ≥ z | A = a]`` and the KS disparity of real-valued predictions.

Paper 003 (Agarwal, Dudík & Wu 2019) states statistical parity (SP) for a regressor through
the "≥-CDFs" ``G_a(z) = P[f ≥ z | A = a]`` and ``G(z) = P[f ≥ z]``: the constraint at ``z`` is
``|γ_{a,z}| ≤ ε`` with ``γ_{a,z} = G_a(z) − G(z)`` (its Eq. 1), on the grid
``𝒵 = {1/N, …, 1}`` (§4.1; N = 40 in its experiments). The KS disparity of a predictor is
``max_a sup_z |G_a(z) − G(z)|`` over every real ``z``.

Everything here is computed from sorted predictions, with example weights, and for a
*randomised* predictor too: a mixture ``Q = Σ_r q_r f_r`` (scores ``[R, n]``, weights ``q``) has
``G_{Q,a}(z) = Σ_r q_r G_{r,a}(z)`` — the mixture's expectation, never the averaged model's
(notes §2.4: averaging member predictions changes the CDF and breaks the guarantee). The
mixture's ``R·n`` (member, example) pairs are one weighted empirical distribution: each pair
is placed among the thresholds (or the distinct values, for the KS) by a binary search and
histogrammed, a chunk of members at a time, so memory is ``O(n + distinct values)`` whatever
``R`` (a capped reduction's Q̂ has thousands of members).

A group with no weight over the rows has undefined rates (NaN) and is left out of the KS
disparity; a split with no weight at all is an error.

Example:
    >>> import torch
    >>> s = torch.tensor([0.1, 0.5, 0.5, 0.9])
    >>> codes = torch.tensor([0, 0, 1, 1])
    >>> t = threshold_rates(s, codes, 2, threshold_grid(4))
    >>> t.overall.tolist()                    # z = 0.25, 0.5, 0.75, 1
    [0.75, 0.75, 0.25, 0.0]
    >>> t.groups.tolist()
    [[0.5, 0.5, 0.0, 0.0], [1.0, 1.0, 0.5, 0.0]]
    >>> ks_disparity(s, codes, 2)             # at z ∈ (0.1, 0.5]: G_1 = 1, G = 0.75
    0.25
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_GRID_SIZE = 40
"""Paper 003's N (§6): thresholds ``1/40, 2/40, …, 1``."""


def threshold_grid(size: int = DEFAULT_GRID_SIZE, *, dtype: torch.dtype = torch.float64,
                   device: torch.device | str | None = None) -> torch.Tensor:
    """The grid ``𝒵 = {1/N, 2/N, …, 1}`` of paper 003 §4.1 (it holds 1 and not 0).

    Example:
        >>> threshold_grid(4).tolist()
        [0.25, 0.5, 0.75, 1.0]
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"the threshold grid needs a positive whole number of points, "
                         f"got {size!r}")
    return torch.arange(1, size + 1, dtype=dtype, device=device) / size


def cells(u: torch.Tensor, grid_size: int) -> torch.Tensor:
    """The cell ``k(u) = #{z ∈ 𝒵 : z ≤ u}`` ∈ {0, …, N} of each prediction (int64): ``⌊u⌋_α =
    k·α`` for u in [0, 1] (α = 1/N), and ``1{u ≥ z_j} = 1{k ≥ j}`` exactly (the comparisons of
    :func:`threshold_rates`); a prediction below 0 falls in cell 0.

    Example:
        >>> import torch
        >>> cells(torch.tensor([-0.3, 0.0, 0.25, 0.6, 1.0, 1.7]), 4).tolist()
        [0, 0, 1, 2, 4, 4]
    """
    grid = threshold_grid(grid_size, dtype=torch.float64, device=u.device)
    return torch.searchsorted(grid, u.detach().to(torch.float64).contiguous(), right=True)


def cell_values(k: torch.Tensor, grid_size: int) -> torch.Tensor:
    """The value paper 003's discretised loss scores in cell ``k``: its midpoint ``kα + α/2``
    (Eq. 5), and 1 in the top cell ``k = N`` (where ℓ(y, u) = ℓ(y, 1)); float64.

    Example:
        >>> import torch
        >>> cell_values(torch.tensor([0, 3, 4]), 4).tolist()
        [0.125, 0.875, 1.0]
    """
    return ((k.to(torch.float64) + 0.5) / grid_size).clamp(max=1.0)


def rounded(u: torch.Tensor, grid_size: int) -> torch.Tensor:
    """The deployed prediction of paper 003's guarantee (its §2.4, §4.1): the value of ``u``'s
    cell, ``⌊u⌋_α + α/2`` (1 for ``u ≥ 1``, the first cell's midpoint for ``u < 0``). A value
    and its rounding lie above the same grid points, so ``P[f ≥ z]`` is unchanged on the grid.

    Example:
        >>> import torch
        >>> rounded(torch.tensor([-0.1, 0.3, 2.0]), 4).tolist()
        [0.125, 0.375, 1.0]
    """
    return cell_values(cells(u, grid_size), grid_size)


@dataclass(frozen=True)
class ThresholdRates:
    """``P[f ≥ z | A = a]`` per group (``groups`` ``[G, N]``; NaN rows for groups with no
    weight) and overall (``overall`` ``[N]``) at ``thresholds`` ``[N]``; ``group_weight`` ``[G]``
    is each group's total example weight.

    Example:
        >>> import torch
        >>> t = threshold_rates(torch.tensor([0.2, 0.8]), torch.tensor([0, 1]), 2,
        ...                     torch.tensor([0.5]))
        >>> t.gaps.tolist()                 # γ_{a,z} = G_a(z) − G(z)
        [[-0.5], [0.5]]
    """

    thresholds: torch.Tensor
    groups: torch.Tensor
    overall: torch.Tensor
    group_weight: torch.Tensor

    @property
    def gaps(self) -> torch.Tensor:
        """``γ_{a,z} = P[f ≥ z | A = a] − P[f ≥ z]`` ``[G, N]`` (paper 003 Eq. 1)."""
        return self.groups - self.overall

    def disparity(self) -> float:
        """``max_{a,z} |γ_{a,z}|`` over the groups with weight (the grid's SP violation)."""
        gaps = self.gaps[self.group_weight > 0]
        return float(gaps.abs().max()) if gaps.numel() else 0.0


# Members are counted this many (member, example) pairs at a time: memory O(n + distinct
# values), not O(R·n), for a mixture of thousands of members.
PAIRS_PER_CHUNK = 2 ** 22


def _checked(scores: torch.Tensor, codes: torch.Tensor, num_groups: int,
             weights: torch.Tensor | None, member_weights: torch.Tensor | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores ``[R, n]`` (as given), example weights ``[n]``, member weights ``[R]`` (summing
    to 1) and codes ``[n]``, on the CPU, after the checks."""
    if scores.dim() not in (1, 2):
        raise ValueError(f"scores must be [n] or a mixture's [R, n], "
                         f"got shape {tuple(scores.shape)}")
    s = scores.detach()
    s = s.unsqueeze(0) if s.dim() == 1 else s
    n = s.shape[1]
    if codes.shape != (n,):
        raise ValueError(f"group codes must be [{n}] (one per example), got "
                         f"{tuple(codes.shape)}")
    if torch.isnan(s).any():
        raise ValueError("scores contain NaN: threshold rates of NaN predictions are undefined "
                         "(check the model's outputs)")
    w = torch.ones(n, dtype=torch.float64) if weights is None else weights.to(torch.float64)
    if w.shape != (n,) or bool((w < 0).any()):
        raise ValueError(f"example weights must be [{n}] and non-negative")
    if member_weights is None:
        q = torch.full((s.shape[0],), 1.0 / s.shape[0], dtype=torch.float64)
    else:
        q = member_weights.detach().to(torch.float64)
        if q.shape != (s.shape[0],) or bool((q < 0).any()) or float(q.sum()) <= 0:
            raise ValueError(f"member weights must be [{s.shape[0]}], non-negative, with a "
                             f"positive sum")
        q = q / q.sum()
    codes = codes.to(torch.long).cpu()
    if n and (int(codes.min()) < 0 or int(codes.max()) >= num_groups):
        raise ValueError(f"group codes must lie in [0, {num_groups}); got values from "
                         f"{int(codes.min())} to {int(codes.max())}")
    return s.cpu(), w.cpu(), q.cpu(), codes


def _member_chunks(s: torch.Tensor) -> list[tuple[int, int]]:
    step = max(1, PAIRS_PER_CHUNK // max(1, s.shape[1]))
    return [(r, min(r + step, s.shape[0])) for r in range(0, s.shape[0], step)]


def _at_least(s: torch.Tensor, w: torch.Tensor, q: torch.Tensor, codes: torch.Tensor,
              num_groups: int, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group, the weight of (member, example) pairs with score ≥ each of the ascending
    values ``z`` ``[D]`` (``[D, G]``; pair weight ``q_r·w_i``), and the groups' totals
    ``[G]``: each pair's count of values at or below its score, histogrammed a chunk of
    members at a time, then summed from the top."""
    d, g = len(z), num_groups
    hist = torch.zeros((d + 1) * g, dtype=torch.float64)
    for r0, r1 in _member_chunks(s):
        block = s[r0:r1].to(torch.float64).contiguous()
        above = torch.searchsorted(z, block, right=True)             # #{z_j ≤ score}
        pair_w = q[r0:r1, None] * w[None, :]
        hist += torch.bincount((above * g + codes[None, :]).reshape(-1),
                               weights=pair_w.reshape(-1), minlength=(d + 1) * g)
    hist = hist.reshape(d + 1, g)
    # score ≥ z_j ⇔ #{z ≤ score} > j: the pairs counted in rows j+1 … D
    at_least = hist.flip(0).cumsum(0).flip(0)[1:]
    return at_least, hist.sum(0)


def _distinct_values(s: torch.Tensor) -> torch.Tensor:
    """The distinct score values ``[D]``, ascending (float64), a chunk of members at a time."""
    parts = [torch.unique(s[r0:r1].to(torch.float64)) for r0, r1 in _member_chunks(s)]
    return torch.unique(torch.cat(parts)) if parts else torch.zeros(0, dtype=torch.float64)


def threshold_rates(scores: torch.Tensor, codes: torch.Tensor, num_groups: int,
                    thresholds: torch.Tensor, *, weights: torch.Tensor | None = None,
                    member_weights: torch.Tensor | None = None) -> ThresholdRates:
    """``P[f ≥ z | A = a]`` and ``P[f ≥ z]`` at every ``z`` in ``thresholds`` (float64, CPU).

    Args:
        scores: predictions ``[n]``, or a mixture's member predictions ``[R, n]``.
        codes: group codes ``[n]`` in ``[0, num_groups)``.
        thresholds: the ``z`` values ``[N]`` (e.g. :func:`threshold_grid`).
        weights: optional example weights ``[n]``.
        member_weights: a mixture's weights ``q`` ``[R]`` (uniform when omitted).

    Example:
        >>> import torch
        >>> members = torch.tensor([[0.1, 0.9], [0.9, 0.9]])      # two members, two rows
        >>> t = threshold_rates(members, torch.tensor([0, 1]), 2, torch.tensor([0.5]),
        ...                     member_weights=torch.tensor([0.25, 0.75]))
        >>> t.groups.flatten().tolist(), t.overall.tolist()
        ([0.75, 1.0], [0.875])
    """
    s, w, q, codes = _checked(scores, codes, num_groups, weights, member_weights)
    z = thresholds.detach().reshape(-1).cpu().to(torch.float64)
    values, position = torch.unique(z, return_inverse=True)        # ascending, any order given
    at_least, total = _at_least(s, w, q, codes, num_groups, values)
    if float(total.sum()) <= 0:
        raise ValueError("threshold rates over a split with no example weight are undefined")
    at = at_least[position]                                          # [N, G]
    groups = (at / total).T.clone()
    groups[total <= 0] = float("nan")
    overall = at.sum(1) / total.sum()
    return ThresholdRates(z, groups, overall, total)


def ks_disparity(scores: torch.Tensor, codes: torch.Tensor, num_groups: int, *,
                 weights: torch.Tensor | None = None,
                 member_weights: torch.Tensor | None = None) -> float:
    """``max_a sup_z |P[f ≥ z | A = a] − P[f ≥ z]|`` over every real ``z`` (exact).

    The ≥-CDFs are step functions that move only at prediction values, so the supremum is
    attained at one of them; groups with no weight are left out. Arguments as in
    :func:`threshold_rates`.

    Example:
        >>> import torch
        >>> ks_disparity(torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), 2)
        0.5
    """
    s, w, q, codes = _checked(scores, codes, num_groups, weights, member_weights)
    at, total = _at_least(s, w, q, codes, num_groups, _distinct_values(s))       # [D, G]
    if float(total.sum()) <= 0:
        raise ValueError("the KS disparity over a split with no example weight is undefined")
    present = total > 0
    group_rates = at[:, present] / total[present]
    overall = at.sum(1, keepdim=True) / total.sum()
    return float((group_rates - overall).abs().max()) if group_rates.numel() else 0.0
