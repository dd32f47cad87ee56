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

# (name, device, dtype) → small constant tensors of the per-step ops, made once per device.
_CONSTANTS: dict[tuple[str, torch.device, torch.dtype], tuple[torch.Tensor, ...]] = {}


def _cached(name: str, like: torch.Tensor, *values: object) -> tuple[torch.Tensor, ...]:
    key = (name, like.device, like.dtype)
    out = _CONSTANTS.get(key)
    if out is None:
        out = _CONSTANTS[key] = tuple(torch.tensor(v, device=like.device, dtype=like.dtype)
                                      for v in values)
    return out


def _constants(like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The column signs ``[[+1], [−1]]`` that evaluate ``f(±m)`` in one op, and ``1.0``."""
    return _cached("signs", like, [[1.0], [-1.0]], 1.0)


def sign_split(costs: torch.Tensor) -> torch.Tensor:
    """``[c⁺; c⁻]`` ``[2, K]`` of costs ``[K]`` in one clamp: the coefficients of the upper and
    of the lower bound in the sign-correct surrogate ``Σ c⁺·upper + c⁻·lower`` of ``⟨c, R⟩``
    (an upper bound for bound surrogates; paper 000 eq. (4)).

    Example:
        >>> sign_split(torch.tensor([1.0, -2.0, 0.0]))
        tensor([[ 1.,  0.,  0.],
                [ 0., -2.,  0.]])
    """
    lo, hi = _cached("split", costs, [[0.0], [-math.inf]], [[math.inf], [0.0]])
    return torch.clamp(costs, lo, hi)


def sign_correct_sum(costs: torch.Tensor, upper: torch.Tensor, lower: torch.Tensor
                     ) -> torch.Tensor:
    """``Σ c⁺·upper + c⁻·lower`` of costs ``[K]`` and bounds ``[K]`` (paper 000 eq. (4)).

    Example:
        >>> sign_correct_sum(torch.tensor([2.0, -1.0]), torch.tensor([0.5, 0.4]),
        ...                  torch.tensor([0.1, 0.2]))
        tensor(0.8000)
    """
    split = sign_split(costs)
    return torch.dot(split[0], upper) + torch.dot(split[1], lower)


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

    @property
    def in_unit_interval(self) -> bool:
        """Whether every value lies in [0, 1], as a rate does (sigmoid, ramp; not the bounds)."""
        return self.kind in ("sigmoid", "ramp")

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

    def fill_bounds(self, margin: torch.Tensor, out: torch.Tensor,
                    lower: torch.Tensor | None = None) -> torch.Tensor:
        """Write ``[upper; lower]`` at ``margin`` [B] into ``out`` [2, B] (the same values as
        :meth:`bounds`), outside autograd, and return the slopes ``d(upper, lower)/d margin``
        [2, B] (0 / 1 for the unscaled hinge): the fused evaluator's backward.
        ``lower``: ``out[1]``, when the caller keeps that view.

        A bound's two sides are one op on ``[m; −m]``: ``lower = 1 − upper(−m)``.
        """
        if torch.is_grad_enabled():
            with torch.no_grad():
                return self._fill_bounds(margin, out, out[1] if lower is None else lower)
        return self._fill_bounds(margin, out, out[1] if lower is None else lower)

    def _fill_bounds(self, margin: torch.Tensor, out: torch.Tensor, lower: torch.Tensor
                     ) -> torch.Tensor:
        m = margin / self.scale if self.scale != 1.0 else margin
        signs, one = _constants(m)
        if self.kind == "hinge":
            # [1 + m; 1 − m] (signs [2, 1] broadcast against m [B]): m·(±1) is exact, so
            # each sum rounds as 1.0 + m does
            torch.addcmul(one, signs, m, out=out)
            out.relu_()
            # relu's backward mask, written as float32 0 / 1: the backward multiplies by it
            # (a bool mask would be converted there, a copy the size of the mask)
            slopes: torch.Tensor = torch.gt(out, 0, out=torch.empty_like(out))
            torch.sub(one, lower, out=lower)
        elif self.kind == "logistic":
            torch.mul(signs, m, out=out)
            slopes = torch.sigmoid(out).div_(math.log(2.0))   # d softplus = sigmoid
            torch.div(F.softplus(out), math.log(2.0), out=out)
            torch.sub(one, lower, out=lower)
        elif self.kind == "sigmoid":
            torch.sigmoid(m, out=out[0])
            out[1].copy_(out[0])
            slopes = ((1.0 - out[0]) * out[0]).unsqueeze(0).expand(2, -1)
        else:  # ramp: clamp(0.5 + m, 0, 1); clamp's backward passes the closed interval
            t = 0.5 + m
            torch.clamp(t, 0.0, 1.0, out=out[0])
            out[1].copy_(out[0])
            slopes = ((t >= 0.0) & (t <= 1.0)).unsqueeze(0).expand(2, -1)
        return slopes if self.scale == 1.0 else slopes / self.scale
