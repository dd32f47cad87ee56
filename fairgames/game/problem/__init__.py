"""A constrained rate problem and its compilation into the terms of a Lagrangian.

``Problem(objective, constraints)`` takes the expressions of :mod:`fairgames.rates` and
rewrites them in the form the game plays (paper 000, Sections 3–4). The package is split by job:

* :mod:`~fairgames.game.problem.problem` — :class:`Problem`: the statement checked, its
  evaluators, the compiled terms cached by ratio mode;
* :mod:`~fairgames.game.problem.compiler` — the expressions rewritten into affine rows, ψ terms
  and ratio terms (:func:`compile_terms`, :func:`gain_scale`);
* :mod:`~fairgames.game.problem.defaults` — what ``"auto"`` and ``null`` stand for by the
  problem's family (surrogate, temperature, step budget, game);
* :mod:`~fairgames.game.problem.objective` — the objective under a surrogate of its own.

Example:
    >>> from fairgames.rates import error_rate, true_positive_rate, group
    >>> gap = true_positive_rate(group("g", "a")) - true_positive_rate(group("g", "b"))
    >>> p = Problem(error_rate(), [(gap <= 0.05).named("tpr_gap"), gap >= -0.05])
    >>> p.constraint_names, p.terms.row_names
    (['tpr_gap', 'c1'], ['tpr_gap', 'c1'])
"""

from .compiler import RATIO_MODES, compile_terms, gain_scale
from .defaults import (
    AUTO_SURROGATE,
    STEPS_AFFINE,
    STEPS_NONLINEAR,
    THRESHOLD_GAME,
    THRESHOLD_TEMPERATURE,
    default_game,
    default_steps,
    default_surrogate,
    default_temperature,
    reads_thresholds,
    threshold_points,
)
from .objective import ObjectiveBound, objective_surrogate_for
from .problem import LossFn, Problem

__all__ = [
    "AUTO_SURROGATE", "RATIO_MODES", "STEPS_AFFINE", "STEPS_NONLINEAR", "THRESHOLD_GAME",
    "THRESHOLD_TEMPERATURE", "LossFn", "ObjectiveBound", "Problem", "compile_terms",
    "default_game", "default_steps", "default_surrogate", "default_temperature", "gain_scale",
    "objective_surrogate_for", "reads_thresholds", "threshold_points",
]
