"""Differentiable stand-ins for the prediction indicator ``1[s > z]``.

``hinge`` and ``logistic`` (log₂-softplus) are *bounds*: ``lower <= 1[s > z] <= upper``
everywhere, so a rate enters a Lagrangian through the bound of the right sign (paper 000 uses
hinge upper bounds for the θ-player). ``sigmoid`` and ``ramp`` (paper 001's randomized
classifier) are smooth approximations, not bounds: their upper and lower coincide.

Example:
    >>> import torch
    >>> from fairgames.rates.surrogates import Surrogate
    >>> up, lo = Surrogate("hinge").bounds(torch.tensor([-2.0, 0.0, 2.0]))
    >>> up.tolist(), lo.tolist()
    ([0.0, 1.0, 3.0], [-2.0, 0.0, 1.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

KINDS = ("hinge", "logistic", "sigmoid", "ramp")


@dataclass(frozen=True)
class Surrogate:
    """A surrogate of ``1[m > 0]`` applied to the margin ``m = (s - z) / scale``."""

    kind: str = "hinge"
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown surrogate {self.kind!r}; choose one of {KINDS}")
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"surrogate scale must be positive and finite, got {self.scale!r}")

    @property
    def is_bound(self) -> bool:
        return self.kind in ("hinge", "logistic")

    def _upper(self, m: torch.Tensor) -> torch.Tensor:
        if self.kind == "hinge":
            return torch.relu(1.0 + m)
        if self.kind == "logistic":
            # log2(1 + e^{m}) >= 1[m > 0] (equal to 1 at m = 0)
            return F.softplus(m) / math.log(2.0)
        if self.kind == "sigmoid":
            return torch.sigmoid(m)
        return torch.clamp(0.5 + m, 0.0, 1.0)

    def bounds(self, margin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(upper, lower)`` of the indicator at these margins (already shifted)."""
        m = margin / self.scale if self.scale != 1.0 else margin
        upper = self._upper(m)
        if not self.is_bound:
            return upper, upper
        # 1[m > 0] = 1 - 1[-m >= 0], so an upper bound of the negated indicator gives a lower bound.
        lower = 1.0 - self._upper(-m)
        return upper, lower
