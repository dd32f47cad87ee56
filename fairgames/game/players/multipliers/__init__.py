"""Strategies of the multiplier (λ) player: gradient ascent, exponentiated gradient,
follow-the-leader and the proxy-Lagrangian swap-regret player.

Every player is a :class:`~fairgames.game.players.base.Player` (``provides = ("weights",)``)
that holds its state as tensors on one device and exposes

* :meth:`MultiplierPlayer.weights` → ``(ω, λ)``: the objective's weight and the multipliers
  (``ω = 1`` for Lagrangian players; the proxy-Lagrangian player puts ``(ω, λ)`` on a simplex);
* :meth:`MultiplierPlayer.play` ``(round)``: one step from the round's gain ``∂L/∂λ`` — the
  rows' values under the player's ``payoff`` (``"true"``: the true violations, or
  ``"surrogate"``) — masked by the round's device boolean ``ok`` (``False`` leaves the state
  untouched: an AMP step the GradScaler skipped); gradient-type players do it through
  :meth:`~GradientAscent.update` ``(gain, ok=)``, follow-the-leader through
  :meth:`~FollowTheLeader.follow` ``(context, ok=)``;
* ``param_groups()``: the step size ``lr`` as a 0-dim tensor in a ``torch.optim`` parameter
  group, so LR schedulers of the :class:`~fairgames.game.ConstrainedOptimizer` move it;
* :meth:`MultiplierPlayer.saturation` → a device scalar in [0, 1], 1 when the player is at
  the edge of its set (``‖λ‖₁ = κ``, or no weight left on the objective), read by the
  infeasibility monitor;
* ``state_dict`` / ``load_state_dict``.

No update reads a tensor value on the host: projections are sort-based and every choice is a
``torch.where``.

Example:
    >>> import torch
    >>> p = GradientAscent(2, lr=1.0, radius=1.0)
    >>> p.update(torch.tensor([0.3, -0.2])); p.weights()[1].tolist()
    [0.30000001192092896, 0.0]
    >>> p.update(torch.tensor([2.0, 0.0])); p.weights()[1].tolist()
    [1.0, 0.0]
"""

from .base import (
    DEFAULT_RADIUS,
    MULTIPLIER_LR,
    PAYOFFS,
    RADIUS,
    DualContext,
    MultiplierPlayer,
)
from .exponentiated_gradient import ExponentiatedGradient
from .follow_the_leader import FollowTheLeader
from .gradient_ascent import MULTIPLIER_OPTIMIZER, MULTIPLIER_OPTIMIZERS, GradientAscent
from .nupi import NUPI_KEYS, NuPI
from .penalty import PENALTY_KEYS, AugmentedLagrangian, QuadraticPenalty
from .registry import (
    MULTIPLIER_PLAYERS,
    make_multiplier_player,
    register_multiplier_strategy,
    unregister_multiplier_strategy,
)
from .swap_regret import SwapRegret

__all__ = [
    "AugmentedLagrangian", "DEFAULT_RADIUS", "MULTIPLIER_LR", "MULTIPLIER_OPTIMIZER",
    "MULTIPLIER_OPTIMIZERS", "MULTIPLIER_PLAYERS", "NUPI_KEYS", "NuPI", "PAYOFFS", "PENALTY_KEYS",
    "QuadraticPenalty", "RADIUS", "DualContext", "ExponentiatedGradient", "FollowTheLeader",
    "GradientAscent", "MultiplierPlayer", "SwapRegret", "make_multiplier_player",
    "register_multiplier_strategy", "unregister_multiplier_strategy",
]
