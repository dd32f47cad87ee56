"""Non-linear functions ψ of rates (paper 000, Table 1) with their declared structure.

A :class:`Psi` states its curvature, its monotonicity in each argument (``+1`` increasing,
``-1`` decreasing, ``0`` neither) and its domain box. The game compiles ``c · ψ(R)`` into slack
variables ξ with ``R ≤ ξ`` (increasing), ``R ≥ ξ`` (decreasing) or two-sided constraints
(neither, e.g. KLD); the slack player's best response ``ξ = ∇ψ*(λ)`` is ``conjugate_argmax``
when a closed form is known.

Example:
    >>> import torch
    >>> round(float(GEOMETRIC_MEAN_2(torch.tensor(0.81), torch.tensor(1.0))), 4)
    0.9
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

CURVATURES = ("convex", "concave", "none")


@dataclass(frozen=True, eq=False)
class Psi:
    """A named non-linear function of ``arity`` scalar (tensor) arguments.

    Example:
        >>> p = Psi("sum2", lambda a, b: a + b, 2, "none", (1, 1), ((0.0, 1.0), (0.0, 1.0)))
        >>> float(p(0.25, 0.5))
        0.75
    """

    name: str
    fn: Callable[..., torch.Tensor] = field(repr=False)
    arity: int
    curvature: str
    monotone: tuple[int, ...]
    domain: tuple[tuple[float, float], ...]
    # ξ* = argmax_{ξ in domain} <λ, ξ> - ψ(ξ) (= ∇ψ*(λ) for convex ψ); filled by the game layer.
    conjugate_argmax: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None,
                                                                           repr=False)

    def __post_init__(self) -> None:
        if self.curvature not in CURVATURES:
            raise ValueError(f"curvature must be one of {CURVATURES}")
        if len(self.monotone) != self.arity or len(self.domain) != self.arity:
            raise ValueError(f"{self.name}: monotone and domain need one entry per argument")

    def __call__(self, *args: torch.Tensor | float) -> torch.Tensor:
        if len(args) != self.arity:
            raise TypeError(f"{self.name} takes {self.arity} arguments, got {len(args)}")
        return self.fn(*[torch.as_tensor(a) for a in args])


# The means below are exact in value and finite in gradient on their whole domain, boundary
# included: a surrogate lower bound clamped to the domain sits exactly at 0 in many batches,
# where a root's derivative is infinite and autograd's chain rule gives inf·0 = NaN. Each takes
# the root (or quotient) of a safe argument — 1 where the true one is 0 — and selects 0 there
# with torch.where, so the value is unchanged and the gradient at 0 is 0 (or the limit).


def _root(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x^(1/n)`` for ``x >= 0`` with gradient 0 at ``x = 0`` (where the root's is infinite)."""
    pos = x > 0
    return torch.where(pos, torch.where(pos, x, 1.0) ** (1.0 / n), 0.0)


def _gmean(*u: torch.Tensor) -> torch.Tensor:
    return _root(_product(u), len(u))


def _hmean(*u: torch.Tensor) -> torch.Tensor:
    # n / Σ 1/u_i = n·Π u / Σ_j Π_{i≠j} u_i: finite (the limit) where one argument is 0;
    # 0 with gradient 0 where two are (both forms' limit value).
    if len(u) == 1:
        return u[0]
    den = sum(_product(u[:j] + u[j + 1:]) for j in range(len(u)))
    pos = den > 0
    return torch.where(pos, len(u) * _product(u) / torch.where(pos, den, 1.0), 0.0)


def _product(xs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out


def _rms(*v: torch.Tensor) -> torch.Tensor:
    return _root(sum(x * x for x in v) / len(v), 2)


def _kld(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    # p log(p/q) + (1-p) log((1-p)/(1-q)), with 0 log 0 = 0.
    return (torch.xlogy(p, p) - torch.xlogy(p, q)
            + torch.xlogy(1 - p, 1 - p) - torch.xlogy(1 - p, 1 - q))


def geometric_mean(arity: int = 2) -> Psi:
    """``(Π u_i)^(1/n)``: concave and increasing on ``[0, 1]^n`` (G-mean of per-class recalls).

    Example:
        >>> g = geometric_mean(3)
        >>> g.name, g.curvature, round(float(g(0.5, 0.5, 0.5)), 4)
        ('geometric_mean3', 'concave', 0.5)
    """
    return Psi(f"geometric_mean{arity}", _gmean, arity, "concave", (1,) * arity,
               ((0.0, 1.0),) * arity)


def harmonic_mean(arity: int = 2) -> Psi:
    """``n / Σ 1/u_i``: concave and increasing on ``(0, 1]^n`` (H-mean).

    Example:
        >>> round(float(harmonic_mean(2)(0.5, 1.0)), 4)
        0.6667
    """
    return Psi(f"harmonic_mean{arity}", _hmean, arity, "concave", (1,) * arity,
               ((0.0, 1.0),) * arity)


def root_mean_square(arity: int = 2) -> Psi:
    """``sqrt(Σ v_i² / n)``: convex, increasing on ``[0, 1]^n`` (Q-mean loss of FNR, FPR).

    Example:
        >>> r = root_mean_square(2)
        >>> r.curvature, r.monotone, round(float(r(0.3, 0.4)), 4)
        ('convex', (1, 1), 0.3536)
    """
    return Psi(f"root_mean_square{arity}", _rms, arity, "convex", (1,) * arity,
               ((0.0, 1.0),) * arity)


GEOMETRIC_MEAN_2 = geometric_mean(2)
HARMONIC_MEAN_2 = harmonic_mean(2)
ROOT_MEAN_SQUARE_2 = root_mean_square(2)
# KLD(p, p̂): jointly convex, monotone in neither argument (paper 000 Table 1).
KLD = Psi("kld", _kld, 2, "convex", (0, 0), ((0.0, 1.0), (0.0, 1.0)))
