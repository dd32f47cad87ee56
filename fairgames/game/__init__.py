"""The game: a rate problem compiled into a Lagrangian, its players, an optimizer that plays it
in a torch training loop, and the solutions it produces.

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, true_positive_rate, group
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> tpr = lambda v: true_positive_rate(group("sex", v))
    >>> problem = Problem(error_rate(), [(tpr("F") >= tpr("M") - 0.05).named("tpr_parity")])
    >>> model = torch.nn.Linear(4, 1)
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> copt.preset.name, copt.multipliers.strategy
    ('proxy_lagrangian', 'swap_regret')
"""

from .conjugates import box_argmin, psi_linear_argmin, register_closed_form
from .finite import NonFiniteStepError
from .history import InfeasibilityMonitor, StepRecord
from .lagrangian import LagrangianTerms
from .optimizer import ConstrainedOptimizer
from .players import (
    DEFAULT_RADIUS,
    BestResponsePlayer,
    ConfigKey,
    DualContext,
    ExponentiatedGradient,
    FollowTheLeader,
    GameContext,
    GradientAscent,
    GradientPlayer,
    MonitorPlayer,
    MultiplierPlayer,
    Player,
    SlackPlayer,
    SwapRegret,
    make_multiplier_player,
    register_multiplier_strategy,
    register_theta_strategy,
)
from .presets import (
    DEFAULT_PRESET,
    PRESETS,
    SWAP_REGRET_MAX_ROWS,
    LargeGameWarning,
    PlayerOptions,
    Preset,
    get_preset,
)
from .problem import (
    THRESHOLD_GAME,
    Problem,
    default_game,
    default_steps,
    default_surrogate,
    default_temperature,
    objective_surrogate_for,
    threshold_points,
)
from .projections import project_box, project_l1_ball_nonnegative, project_simplex
from .round import Record, Round
from .solutions import (
    RULES,
    STRATEGIES,
    CandidateValues,
    LPMixture,
    SnapshotRecorder,
    StochasticModel,
    best_iterate,
    evaluate_candidates,
    load_solution,
    materialize,
    model_state,
    save_solution,
    shrink_lp,
    skeleton_of,
)

# Reviewed: what a user of the game imports from here, by subject.
__all__ = [
    # the problem and its defaults
    "Problem", "THRESHOLD_GAME", "default_game", "default_steps", "default_surrogate",
    "default_temperature", "objective_surrogate_for", "threshold_points", "LagrangianTerms",
    # the optimizer, its presets and what a step records
    "ConstrainedOptimizer", "DEFAULT_PRESET", "PRESETS", "Preset", "PlayerOptions",
    "get_preset", "LargeGameWarning", "SWAP_REGRET_MAX_ROWS", "NonFiniteStepError",
    "StepRecord", "InfeasibilityMonitor", "Record", "Round",
    # the players and their extension points
    "Player", "GameContext", "ConfigKey", "DualContext", "GradientPlayer",
    "BestResponsePlayer", "MultiplierPlayer", "GradientAscent", "ExponentiatedGradient",
    "SwapRegret", "FollowTheLeader", "SlackPlayer", "MonitorPlayer", "DEFAULT_RADIUS",
    "make_multiplier_player", "register_multiplier_strategy", "register_theta_strategy",
    "box_argmin", "psi_linear_argmin", "register_closed_form", "project_box",
    "project_l1_ball_nonnegative", "project_simplex",
    # the solutions
    "SnapshotRecorder", "StochasticModel", "CandidateValues", "LPMixture", "RULES",
    "STRATEGIES", "best_iterate", "evaluate_candidates", "shrink_lp", "save_solution",
    "load_solution", "materialize", "model_state", "skeleton_of",
]
