"""The infeasibility monitor as a player: it watches every round and moves nothing else.

It folds each round's largest true violation and the multipliers' saturation into the
:class:`~fairgames.game.history.InfeasibilityMonitor`'s device-side averages (order 90: after
the multipliers moved), read by :meth:`ConstrainedOptimizer.likely_infeasible`.

Example:
    >>> MonitorPlayer(min_steps=5).order
    90
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..history import InfeasibilityMonitor
from .base import Player

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..round import Round


class MonitorPlayer(InfeasibilityMonitor, Player):
    """:class:`~fairgames.game.history.InfeasibilityMonitor` played as the game's last player
    (its options are the monitor's)."""

    name = "monitor"
    order = 90

    def __init__(self, **options: Any) -> None:
        self._options = options
        super().__init__(**options)

    def bind(self, game: Any) -> None:
        if self.state.device != game.device:
            super().__init__(device=game.device, **self._options)

    def play(self, round: Round) -> None:
        _, _, violation = round.truth()
        self.update(violation, round.saturation(), round.ok)
