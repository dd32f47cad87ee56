"""Strategies of the model (θ) player.

* :class:`GradientPlayer` — online gradient descent (any torch optimizer, the one the
  :class:`~fairgames.game.ConstrainedOptimizer` wraps) on the surrogate Lagrangian
  ``L̃2 = Σ c_k(λ)·R̃_k`` (paper 000 Algorithm 2): the user's own loop drives it, or ``step``'s
  closure (torch's semantics: evaluated once, its loss returned).
* :class:`BestResponsePlayer` — Algorithm 1's cost-sensitive oracle: each game step first
  re-fits θ to the current costs ``c(λ)``, either by a FIXED number of inner gradient steps
  on the cost-sensitive surrogate (no data-dependent stopping, which would sync), each one a
  call of ``step``'s closure under frozen costs, or by a user ``oracle(costs, objective_weight)``
  that sets the model in place (e.g. a plug-in classifier with thresholds, COCO-style). A last
  call of the closure then records the step's rates at the new θ for the other players.

Both are :class:`~fairgames.game.players.base.Player` s named ``"theta"`` (order 0: θ moves
first); their parameter groups are the wrapped optimizer's own (tagged ``"player": "theta"``),
so an LR scheduler of the game drives θ's step as it would the wrapped optimizer's.

Example:
    >>> BestResponsePlayer(steps=5).steps
    5
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .base import GameContext, Player
from .keys import ConfigKey, positive, register_in

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..round import Round

Oracle = Callable[[torch.Tensor, torch.Tensor], None]


class ThetaPlayer(Player):
    """Base of the θ-players: bound to the wrapped optimizer of the model's parameters."""

    name = "theta"
    order = 0
    strategy = "theta"
    needs_grad = True
    optimizer: torch.optim.Optimizer

    def bind(self, game: GameContext) -> None:
        self.optimizer = game.model_optimizer
        self.device = game.device
        self._fixed_costs = game.fixed_costs

    def param_groups(self) -> list[dict[str, Any]]:
        for group in self.optimizer.param_groups:
            group["player"] = self.name
        return list(self.optimizer.param_groups)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class GradientPlayer(ThetaPlayer):
    """OGD on the surrogate Lagrangian through the wrapped optimizer (the default)."""

    strategy = "gradient"

    def play(self, round: Round) -> None:
        closure, scaler = round.closure, round.scaler
        if scaler is not None and scaler.is_enabled():
            if closure is not None:      # GradScaler.step takes no closure: evaluate it here
                with torch.enable_grad():
                    round.loss = closure()
            scaler.step(self.optimizer)
            round.ok = _scaler_ok(scaler, self.optimizer, self.device)
        else:
            round.loss = self.optimizer.step(closure)


class BestResponsePlayer(ThetaPlayer):
    """Best response to the current multipliers (paper 000 Algorithm 1, Frank-Wolfe).

    Args:
        steps: inner optimizer steps on the cost-sensitive surrogate per game step.
        oracle: optional ``oracle(leaf_costs [K], objective_weight)`` that sets the model to
            (approximately) ``argmin_θ Σ_k c_k R_k(θ)`` itself; replaces the inner loop.
    """

    strategy = "best_response"
    plays_inside_step = True
    config_keys = (ConfigKey("theta_steps", int, 20, "inner optimizer steps of the best "
                             "response per game step", positive(integer=True),
                             argument="steps"),)

    def __init__(self, steps: int = 20, oracle: Oracle | None = None) -> None:
        if oracle is None and steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        if oracle is not None and not callable(oracle):
            raise TypeError("oracle must be callable (leaf_costs, objective_weight) -> None")
        self.steps, self.oracle = int(steps), oracle

    def play(self, round: Round) -> None:
        closure = round.closure
        if closure is None:
            raise RuntimeError("a best-response θ-player re-fits θ inside step(): pass the "
                               "closure that evaluates the batch (zero_grad, lagrangian, "
                               "backward, return the loss), or use copt.step_batch(model, x, ...)")
        with self._fixed_costs() as frozen:
            if self.oracle is not None:
                with torch.enable_grad():
                    closure()                      # the costs at the model as it is
                self.optimizer.zero_grad()
                self.oracle(frozen.costs, frozen.omega)
            else:
                for _ in range(self.steps):
                    with torch.enable_grad():
                        closure()
                    self.optimizer.step()
        with torch.enable_grad():
            round.loss = closure()                 # records the rates at the new θ
        self.optimizer.zero_grad()

    def __repr__(self) -> str:
        return f"BestResponsePlayer(steps={self.steps}, oracle={self.oracle!r})"


THETA_PLAYERS: dict[str, type[ThetaPlayer]] = {
    cls.strategy: cls for cls in (GradientPlayer, BestResponsePlayer)}


def register_theta_strategy(cls: type[ThetaPlayer]) -> type[ThetaPlayer]:
    """Make a :class:`ThetaPlayer` subclass playable by its ``strategy`` name (a preset's
    ``theta``, with its ``config_keys`` as ``algorithm.<key>``); usable as a class
    decorator."""
    if not (isinstance(cls, type) and issubclass(cls, ThetaPlayer)):
        raise TypeError(f"a θ strategy is a ThetaPlayer subclass, got {cls!r}")
    register_in(THETA_PLAYERS, cls.strategy, cls)
    return cls


def make_theta_player(spec: str | ThetaPlayer) -> ThetaPlayer:
    """``"gradient"`` or ``"best_response"`` (or an instance) → a θ-player."""
    if isinstance(spec, ThetaPlayer):
        return spec
    if spec in THETA_PLAYERS:
        return THETA_PLAYERS[spec]()
    raise ValueError(f"unknown θ strategy {spec!r}; choose one of {sorted(THETA_PLAYERS)}")


def _scaler_ok(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
               device: torch.device) -> torch.Tensor | None:
    """``True`` on the device when the scaler did not skip ``optimizer``'s step (no sync)."""
    state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
    found = state.get("found_inf_per_device", {})
    if not found:
        return None
    total = sum(v.to(device, torch.float32) for v in found.values())
    return total == 0
