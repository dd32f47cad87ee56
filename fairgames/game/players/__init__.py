"""The players of the game: multipliers λ, slacks ξ / z, and the model θ.

Example:
    >>> from fairgames.game.players import make_multiplier_player
    >>> make_multiplier_player("swap_regret", 2).weights()[0].item() > 0.99
    True
"""

from .base import GameContext, Player
from .keys import ConfigKey, one_of, positive, strategies_changed, watch_strategies
from .monitor import MonitorPlayer
from .multipliers import (
    DEFAULT_RADIUS,
    MULTIPLIER_OPTIMIZERS,
    MULTIPLIER_PLAYERS,
    AugmentedLagrangian,
    DualContext,
    ExponentiatedGradient,
    FollowTheLeader,
    GradientAscent,
    MultiplierPlayer,
    NuPI,
    QuadraticPenalty,
    SwapRegret,
    make_multiplier_player,
    register_multiplier_strategy,
    unregister_multiplier_strategy,
)
from .slacks import PSI_STRATEGIES, RATIO_STRATEGIES, SlackPlayer
from .theta import (
    THETA_PLAYERS,
    BestResponsePlayer,
    GradientPlayer,
    ThetaPlayer,
    make_theta_player,
    register_theta_strategy,
)

__all__ = [name for name in dir() if not name.startswith("_")]
