"""The players of the game: multipliers λ, slacks ξ / z, and the model θ.

Example:
    >>> from fairgames.game.players import make_multiplier_player
    >>> make_multiplier_player("swap_regret", 2).weights()[0].item() > 0.99
    True
"""

from .base import GameContext, Player
from .monitor import MonitorPlayer
from .multipliers import (
    DEFAULT_RADIUS,
    MULTIPLIER_PLAYERS,
    DualContext,
    ExponentiatedGradient,
    FollowTheLeader,
    GradientAscent,
    MultiplierPlayer,
    SwapRegret,
    make_multiplier_player,
    register_multiplier_strategy,
)
from .slacks import PSI_STRATEGIES, RATIO_STRATEGIES, SlackPlayer
from .theta import BestResponsePlayer, GradientPlayer, ThetaPlayer, make_theta_player

__all__ = [name for name in dir() if not name.startswith("_")]
