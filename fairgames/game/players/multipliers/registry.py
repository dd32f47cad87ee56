"""The multiplier strategies by name: the registry the presets and ``algorithm.multipliers``
read, its registration, and the factory :func:`make_multiplier_player`."""

from __future__ import annotations

from typing import Any

import torch

from ..keys import register_in, strategies_changed
from .base import MultiplierPlayer
from .exponentiated_gradient import ExponentiatedGradient
from .follow_the_leader import FollowTheLeader
from .gradient_ascent import GradientAscent
from .penalty import AugmentedLagrangian, QuadraticPenalty
from .swap_regret import SwapRegret

MULTIPLIER_PLAYERS: dict[str, type[MultiplierPlayer]] = {
    cls.strategy: cls
    for cls in (GradientAscent, ExponentiatedGradient, FollowTheLeader, SwapRegret)}


def register_multiplier_strategy(cls: type[MultiplierPlayer]) -> type[MultiplierPlayer]:
    """Make a :class:`MultiplierPlayer` subclass playable by its ``strategy`` name (presets,
    ``algorithm.multipliers``, with its ``config_keys`` as ``algorithm.<key>``); usable as a
    class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, MultiplierPlayer)):
        raise TypeError(f"a multiplier strategy is a MultiplierPlayer subclass, got {cls!r}")
    register_in(MULTIPLIER_PLAYERS, cls.strategy, cls)
    return cls


def unregister_multiplier_strategy(strategy: str) -> None:
    """Forget a strategy added by :func:`register_multiplier_strategy`."""
    if MULTIPLIER_PLAYERS.pop(strategy, None) is not None:
        strategies_changed()


def make_multiplier_player(strategy: str | MultiplierPlayer, num_rows: int, *,
                           lr: float | None = None, radius: float | None = None,
                           device: torch.device | str | None = None,
                           **options: Any) -> MultiplierPlayer:
    """Build a multiplier player by strategy name (``"swap_regret"``, ``"gradient_ascent"``,
    ``"exponentiated_gradient"``, ``"follow_the_leader"``, or one registered with
    :func:`register_multiplier_strategy`), or check a given one."""
    if isinstance(strategy, MultiplierPlayer):
        if strategy.num_rows != num_rows:
            raise ValueError(f"the multiplier player has {strategy.num_rows} rows, the problem "
                             f"{num_rows}")
        return strategy
    if strategy not in MULTIPLIER_PLAYERS:
        raise ValueError(f"unknown multiplier strategy {strategy!r}; choose one of "
                         f"{sorted(MULTIPLIER_PLAYERS)} or pass a MultiplierPlayer")
    cls = MULTIPLIER_PLAYERS[strategy]
    kw: dict[str, Any] = dict(options)
    if lr is not None and cls.has_lr:
        kw["lr"] = lr
    if radius is not None:
        if not cls.has_radius:
            raise ValueError(f"the {strategy} player has no radius{cls.no_radius_reason}; "
                             "drop radius=")
        kw["radius"] = radius
    return cls(num_rows, device=device, **kw)


for _penalized in (AugmentedLagrangian, QuadraticPenalty):   # the penalty formulations
    register_multiplier_strategy(_penalized)
