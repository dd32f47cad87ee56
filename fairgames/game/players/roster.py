"""The players of one game, bound and indexed: who plays when, and who provides what.

:class:`~fairgames.game.ConstrainedOptimizer` plays a roster: the players that need autograd
(θ) first, then the others under one ``no_grad``, each in its ``order``; a player that
``provides`` a view (``"weights"``, ``"slacks"``) is found by it, and every game needs the
``"weights"`` of the multipliers.

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, positive_prediction_rate
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> problem = Problem(error_rate(), [positive_prediction_rate() >= 0.5])
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(torch.nn.Linear(1, 1).parameters(),
    ...                                                      lr=0.1))
    >>> [p.name for p in copt.roster.grad_players], sorted(copt.roster.views)
    (['theta'], ['weights'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import GameContext, Player


class Roster:
    """``players`` bound to ``game``, sorted by ``order`` and indexed by the views they
    provide (a name or a view twice is refused, naming the players)."""

    def __init__(self, players: Sequence[Player], game: GameContext) -> None:
        for p in players:
            if not isinstance(p, Player):
                raise TypeError(f"players must be fairgames.game.players.Player instances, "
                                f"got {type(p).__name__}")
        names = [p.name for p in players]
        if len(set(names)) != len(names):
            raise ValueError(f"every player needs its own name, got {names}")
        for p in players:
            p.bind(game)
        self.players: list[Player] = sorted(players, key=lambda p: p.order)
        # Players that need autograd (θ) play first, then the others under one no_grad.
        self.grad_players = [p for p in self.players if p.needs_grad]
        self.other_players = [p for p in self.players if not p.needs_grad]
        self.views: dict[str, Any] = {}
        for p in self.players:
            for view in p.provides:
                if view in self.views:
                    raise ValueError(f"players {self.views[view].name!r} and {p.name!r} both "
                                     f"provide {view!r}")
                self.views[view] = p
        if "weights" not in self.views:
            raise ValueError("a game needs a player that provides the multipliers' 'weights'")
        self.weights = self.views["weights"]
        # players that rewrite a batch before the fused pass (e.g. soft group assignments)
        self.transformers = [p for p in self.players
                             if type(p).transform is not Player.transform]

    def param_groups(self) -> list[dict[str, Any]]:
        """Every player's parameter groups, in playing order."""
        return [g for p in self.players for g in p.param_groups()]

    def player(self, name: str) -> Player:
        """The player called ``name``."""
        for p in self.players:
            if p.name == name:
                return p
        raise KeyError(f"no player {name!r}; this game has {[p.name for p in self.players]}")
