"""Strategies of the model (θ) player.

* :class:`GradientPlayer` — online gradient descent (any torch optimizer, the one the
  :class:`~fairgames.game.ConstrainedOptimizer` wraps) on the surrogate Lagrangian
  ``L̃2 = Σ c_k(λ)·R̃_k`` (paper 000 Algorithm 2): the user's own loop drives it.
* :class:`BestResponsePlayer` — Algorithm 1's cost-sensitive oracle: each game step first
  re-fits θ to the current costs ``c(λ)``, either by a FIXED number of inner gradient steps
  on the cost-sensitive surrogate (no data-dependent stopping, which would sync), or by a
  user ``oracle(costs, objective_weight)`` that sets the model in place (e.g. a plug-in
  classifier with thresholds, COCO-style). It needs the model and inputs, so it runs through
  :meth:`ConstrainedOptimizer.step_batch`.

Example:
    >>> BestResponsePlayer(steps=5).steps
    5
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

Oracle = Callable[[torch.Tensor, torch.Tensor], None]


@dataclass
class GradientPlayer:
    """OGD on the surrogate Lagrangian through the wrapped optimizer (the default)."""

    name: str = "gradient"


@dataclass
class BestResponsePlayer:
    """Best response to the current multipliers (paper 000 Algorithm 1, Frank-Wolfe).

    Args:
        steps: inner optimizer steps on the cost-sensitive surrogate per game step.
        oracle: optional ``oracle(leaf_costs [K], objective_weight)`` that sets the model to
            (approximately) ``argmin_θ Σ_k c_k R_k(θ)`` itself; replaces the inner loop.
    """

    steps: int = 20
    oracle: Oracle | None = None
    name: str = "best_response"

    def __post_init__(self) -> None:
        if self.oracle is None and self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.oracle is not None and not callable(self.oracle):
            raise TypeError("oracle must be callable (leaf_costs, objective_weight) -> None")


ThetaPlayer = GradientPlayer | BestResponsePlayer


def make_theta_player(spec: str | ThetaPlayer) -> ThetaPlayer:
    """``"gradient"`` or ``"best_response"`` (or an instance) → a θ-player."""
    if isinstance(spec, GradientPlayer | BestResponsePlayer):
        return spec
    if spec == "gradient":
        return GradientPlayer()
    if spec == "best_response":
        return BestResponsePlayer()
    raise ValueError(f"unknown θ strategy {spec!r}; choose 'gradient' or 'best_response'")
