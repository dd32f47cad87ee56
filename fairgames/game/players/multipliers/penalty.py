"""Penalty formulations of the game (cooper-optim's ``AugmentedLagrangian`` and
``QuadraticPenalty``): λ-players whose θ-side weights depend on θ's own surrogate rows.

Both keep a per-row penalty coefficient ρ, scheduled as cooper's
``MultiplicativePenaltyCoefficientUpdater`` does (Nocedal & Wright, Algorithm 17.4): after each
step ``ρ ← growth·ρ`` on the rows whose true violation exceeds ``tolerance``, and, with
``restart``, ``ρ ← ρ_0`` on the rows that are met (true value ≤ 0).

* :class:`AugmentedLagrangian`: θ descends ``f + Σ_j (1/2ρ_j)([λ_j + ρ_j·g̃_j]₊² − λ_j²)`` on the
  batch's surrogate rows ``g̃`` (Nocedal & Wright eq. 17.65), i.e. the Lagrangian at the
  multipliers ``[λ + ρ·g̃]₊`` (its gradient in θ); λ steps ``λ ← [λ + ρ·g]₊`` on the TRUE rows
  (dual step ρ, the method of multipliers).
* :class:`QuadraticPenalty`: no multipliers; θ descends ``f + Σ_j (ρ_j/2)[g̃_j]₊²``, i.e. the
  Lagrangian at ``ρ·[g̃]₊``, with a growing ρ.

The θ-side weights reach the θ-loss through :meth:`MultiplierPlayer.theta_multipliers` (the
optimizer evaluates the batch's bounds first, then forms θ's loss at these weights); the rows
must be affine in the rates (no ψ, ratio or slack rows: their surrogate row values are not a
function of the leaf bounds alone). No update reads a value on the host.

Example:
    >>> import torch
    >>> p = AugmentedLagrangian(2, penalty=2.0, growth=1.0)
    >>> p.theta_multipliers(p.weights()[1], torch.tensor([0.5, -0.25])).tolist()
    [1.0, 0.0]
    >>> p.update(torch.tensor([0.5, -0.25])); p.weights()[1].tolist()
    [1.0, 0.0]
"""

from __future__ import annotations

from typing import Any

import torch

from ..keys import ConfigKey, at_least, positive
from .base import MultiplierPlayer, commit

PENALTY = ConfigKey("penalty", float, None, "ρ_0, the penalty coefficient at the start "
                    "(null: 1)", positive())
PENALTY_GROWTH = ConfigKey("penalty_growth", float, None, "ρ's factor on a row violated beyond "
                           "penalty_tolerance, each step (null: 1.01; 1: a constant ρ)",
                           at_least(1), argument="growth")
PENALTY_TOLERANCE = ConfigKey("penalty_tolerance", float, None, "the true violation above "
                              "which ρ grows (null: 1e-4)", at_least(0),
                              argument="tolerance")
PENALTY_RESTART = ConfigKey("penalty_restart", bool, None, "reset ρ to ρ_0 on a met row "
                            "(null: true)", argument="restart")
PENALTY_KEYS = (PENALTY, PENALTY_GROWTH, PENALTY_TOLERANCE, PENALTY_RESTART)


class _Penalized(MultiplierPlayer):
    """The penalty coefficient ρ and its schedule (see the module docstring)."""

    has_lr = False
    has_radius = False
    no_radius_reason = ": its multipliers are unbounded (the penalty ρ steps them)"
    shapes_theta = True
    config_keys = PENALTY_KEYS

    def __init__(self, num_rows: int, *, penalty: float = 1.0, growth: float = 1.01,
                 tolerance: float = 1e-4, restart: bool = True, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        for name, value, check in (("penalty", penalty, positive()),
                                   ("growth", growth, at_least(1)),
                                   ("tolerance", tolerance, at_least(0))):
            problem = check(value)
            if problem is not None:
                raise ValueError(f"{name} {problem}, got {value!r}")
        self.growth, self.tolerance, self.restart = float(growth), float(tolerance), restart
        self.rho0 = torch.full((num_rows,), float(penalty), device=self.device, dtype=self.dtype)
        self.rho = self.rho0.clone()
        self.lam = torch.zeros(num_rows, device=self.device, dtype=self.dtype)

    def bind(self, game: Any) -> None:
        super().bind(game)
        t = game.terms
        if t.has_slacks or t.has_ratios or t.num_linear or t.gain_scale is not None:
            raise ValueError(f"the {self.strategy} λ-player forms θ's weights from the rows' "
                             "surrogate values, which it reads for rows affine in the rates "
                             "only: this problem has ψ, ratio or group-loss rows; use "
                             "gradient_ascent (with multiplier_optimizer=nupi to damp it) or "
                             "swap_regret")

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self.lam

    def saturation(self) -> torch.Tensor:
        return torch.zeros((), device=self.device, dtype=self.dtype)   # Λ has no edge

    def _next_penalty(self, rows: torch.Tensor) -> torch.Tensor:
        """cooper's multiplicative updater on the true rows (inequality rows)."""
        violated = rows.clamp_min(0.0)
        rho = torch.where(violated > self.tolerance, self.rho * self.growth, self.rho)
        return torch.where(violated == 0, self.rho0, rho) if self.restart else rho

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {"lam": self.lam, "rho": self.rho, "rho0": self.rho0}


class AugmentedLagrangian(_Penalized):
    """The augmented Lagrangian (see the module docstring): θ sees ``[λ + ρ·g̃]₊``,
    ``λ ← [λ + ρ·g]₊`` on the true rows, then ρ is scheduled."""

    strategy = "augmented_lagrangian"

    def theta_multipliers(self, lam: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """θ's weights at the batch's surrogate rows ``g̃``: ``∂/∂g̃ (1/2ρ)([λ + ρg̃]₊² − λ²)``
        = ``[λ + ρ·g̃]₊`` (Nocedal & Wright eq. 17.65)."""
        return torch.clamp_min(torch.addcmul(lam, self.rho, rows), 0.0)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        lam = torch.clamp_min(torch.addcmul(self.lam, self.rho, g), 0.0)
        rho = self._next_penalty(g)
        commit(self.lam, lam, ok)
        commit(self.rho, rho, ok)


class QuadraticPenalty(_Penalized):
    """The quadratic penalty (see the module docstring): θ sees ``ρ·[g̃]₊``, no multipliers
    (λ stays 0), ρ is scheduled on the true rows."""

    strategy = "quadratic_penalty"

    def theta_multipliers(self, lam: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``∂/∂g̃ (ρ/2)[g̃]₊²`` = ``ρ·[g̃]₊``."""
        return self.rho * rows.clamp_min(0.0)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        commit(self.rho, self._next_penalty(self._check_gain(gain)), ok)
