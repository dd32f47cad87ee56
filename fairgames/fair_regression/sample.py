"""The training sample of a fair-regression reduction, checked once: features, targets in
[0, 1], group codes with every group present, and the per-group slacks.

Example:
    >>> import torch
    >>> s = Sample.of(torch.zeros(4, 2), torch.tensor([0.0, 0.5, 1.0, 0.2]),
    ...               torch.tensor([0, 1, 1, 0]))
    >>> s.counts.tolist(), s.proportions.tolist()
    ([2.0, 2.0], [0.5, 0.5])
    >>> slacks(0.05, 2).tolist()
    [0.05, 0.05]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fairgames.rates.values import finite_problem, label_problem


@dataclass(frozen=True)
class Sample:
    """``x`` ``[n, d]``, targets ``y`` ``[n]`` (float64, in [0, 1]), ``codes`` ``[n]`` in
    ``[0, G)``, ``counts`` ``n_a`` and ``proportions`` ``p_a`` ``[G]`` (float64)."""

    x: torch.Tensor
    y: torch.Tensor
    codes: torch.Tensor
    counts: torch.Tensor
    proportions: torch.Tensor

    @property
    def num_groups(self) -> int:
        return int(self.counts.shape[0])

    @classmethod
    def of(cls, x: torch.Tensor, y: torch.Tensor, codes: torch.Tensor,
           num_groups: int | None = None) -> Sample:
        """Check and wrap the data (host reads: this runs once, before the game)."""
        if x.dim() != 2:
            raise ValueError(f"features must be [n, d], got shape {tuple(x.shape)}")
        n = x.shape[0]
        if y.shape != (n,) or codes.shape != (n,):
            raise ValueError(f"targets and group codes must be [{n}] (one per row of the "
                             f"features), got {tuple(y.shape)} and {tuple(codes.shape)}")
        if n == 0:
            raise ValueError("the sample is empty")
        y = y.detach().to(torch.float64)
        # paper 003's 𝒴 ⊆ [0, 1]: the real-label check of every fairgames data entry
        problem = (label_problem(y, "real")
                   or finite_problem(x.detach(), "features must be finite (no NaN or inf)",
                                     "impute or drop those rows first"))
        if problem is not None:
            raise ValueError(f"fair regression: {problem}")
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise ValueError(f"group codes must be integers, got dtype {codes.dtype}")
        g = int(codes.max()) + 1 if num_groups is None else int(num_groups)
        if int(codes.min()) < 0 or int(codes.max()) >= g:
            raise ValueError(f"group codes must lie in [0, {g}), got values from "
                             f"{int(codes.min())} to {int(codes.max())}")
        counts = torch.bincount(codes.long(), minlength=g).to(torch.float64)
        empty = [a for a in range(g) if counts[a] == 0]
        if empty:
            raise ValueError(f"group(s) {empty} have no rows in this sample: their rates are "
                             "undefined; drop the group or re-split stratified by group")
        return cls(x, y, codes.long(), counts, counts / n)


def slacks(value: float | Sequence[float] | torch.Tensor, num_groups: int,
           name: str = "tolerance") -> torch.Tensor:
    """Per-group slacks ``[G]`` (float64) from a scalar or one value per group, each ≥ 0.

    Example:
        >>> slacks([0.0, 0.1], 2).tolist()
        [0.0, 0.1]
    """
    t = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
    if t.numel() == 1:
        t = t.expand(num_groups).clone()
    if t.shape != (num_groups,):
        raise ValueError(f"{name} must be a number or one value per group ({num_groups}), "
                         f"got {t.numel()} values")
    if not bool(torch.isfinite(t).all()) or bool((t < 0).any()):
        raise ValueError(f"{name} must be finite and ≥ 0, got {t.tolist()}")
    return t
