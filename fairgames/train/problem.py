"""The problem stage: the run's :class:`~fairgames.game.Problem` compiled against the
training groups, with the surrogates the algorithm asks for, and the exact evaluator every
later stage scores solutions with.

Example:
    >>> from fairgames.problems import load_problem
    >>> report_grid(load_problem("sp_regression")).shape
    torch.Size([40])
    >>> report_grid(load_problem("error")) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fairgames.data.crossed import constrained_counts, constrained_values
from fairgames.game import (
    Problem,
    default_surrogate,
    default_temperature,
    objective_surrogate_for,
)
from fairgames.models import decision_threshold
from fairgames.problems import ProblemSpec
from fairgames.rates import Surrogate, error_rate, threshold_grid

from .config import AlgorithmConfig, ConfigError
from .context import RunContext, RunProblem
from .evaluation import SolutionEvaluator, outputs_probabilities
from .subsets import data_sources


def compile_problem(ctx: RunContext, values: Mapping[str, float], *,
                    surrogates: bool = True) -> RunProblem:
    """The game's :class:`Problem` (a spec compiled against the training groups, or the one
    given) and the statements ``report.md`` quotes. ``surrogates``: θ of the run's method sees
    surrogates (:attr:`fairgames.train.method.Method.surrogates`); without, the problem's own
    ``objective_surrogate`` does not apply (the method fits the exact Lagrangian)."""
    spec, algorithm, train = ctx.inputs.spec, ctx.inputs.algorithm, ctx.splits.train
    protected = ctx.inputs.protected
    if isinstance(spec, ProblemSpec):
        # a crossed attribute's UNSEEN value (cells without training rows) is not constrained
        built = spec.build(protected, constrained_values(train.group_names), values,
                           constrained_counts(train, protected), label_kind=train.label_kind,
                           **data_sources(train))
        objective, constraints = built.objective, built.constraints
        surrogate = _surrogate(algorithm, objective, constraints)
        problem = Problem(objective, constraints, surrogate=surrogate,
                          objective_surrogate=objective_surrogate_setting(
                              algorithm, spec.objective_surrogate if surrogates else None,
                              objective, surrogate.scale,
                              parallel=ctx.inputs.parallel is not None),
                          ratio_floor=algorithm.ratio_floor)
        statements = {"name": spec.name, "description": spec.description,
                      "objective": spec.objective, "constraints": dict(spec.statements()),
                      "tolerance": spec.tolerance, "tolerance_kind": spec.tolerance_kind,
                      "values": {k: v for k, v in built.variables.items()
                                 if k not in spec.variables}}
    else:
        problem = spec
        objective = problem.objective if problem.objective is not None else error_rate()
        constraints = list(problem.constraints.values())
        statements = {"name": "custom", "objective": str(objective),
                      "constraints": {n: str(c) for n, c in problem.constraints.items()}}
    return RunProblem(problem, objective, constraints, statements)


def _surrogate(algorithm: AlgorithmConfig, objective: Any, constraints: list[Any]
               ) -> Surrogate:
    """``algorithm.surrogate`` at ``algorithm.temperature`` (each null / auto: the problem's
    default, :func:`default_surrogate`, :func:`default_temperature`)."""
    kind = (default_surrogate(objective, constraints) if algorithm.surrogate == "auto"
            else algorithm.surrogate)
    scale = (default_temperature(objective, constraints) if algorithm.temperature is None
             else float(algorithm.temperature))
    return Surrogate(kind, scale)


def objective_surrogate_setting(algorithm: AlgorithmConfig, problem_default: str | None,
                                objective: Any, scale: float, *, parallel: bool = False
                                ) -> Surrogate | None:
    """``algorithm.objective_surrogate`` at the surrogate's ``scale``: null takes the
    problem's ``objective_surrogate`` (``problem_default``), ``none`` none of its own; an
    objective it cannot bound (:func:`objective_surrogate_for`), or any under a process group
    (``parallel``: its second fused pass is not all-reduced), is a config error naming the
    key that asked and the one that works.

    Example:
        >>> from fairgames.rates import error_rate
        >>> objective_surrogate_setting(AlgorithmConfig(), "logistic", error_rate(), 1.0).kind
        'logistic'
        >>> objective_surrogate_setting(AlgorithmConfig(objective_surrogate="none"), "logistic",
        ...                             error_rate(), 1.0, parallel=True) is None
        True
    """
    kind, key = algorithm.objective_surrogate, "algorithm.objective_surrogate"
    if kind is None:
        kind, key = problem_default, "problem.objective_surrogate"
    if kind in (None, "none"):
        return None
    if parallel:
        # the game refuses it under a process group (fairgames.game.distributed): name the
        # key to set, which is algorithm's even where the problem file chose the default
        whose = ("this problem's default" if key == "problem.objective_surrogate"
                 else "set on the command line")
        raise ConfigError(
            f"{key}={kind} ({whose}) gives θ's objective its own surrogate, a second fused "
            "pass that the data-parallel game does not all-reduce: under "
            "trainer.distributed=true add algorithm.objective_surrogate=none (θ then sees the "
            "objective through the constraints' surrogate), or train in one process")
    try:
        return objective_surrogate_for(Surrogate(kind, scale), objective)
    except ValueError as e:
        raise ConfigError(f"{key}={kind}: {e}") from e


def evaluator(ctx: RunContext, built: RunProblem, model: torch.nn.Module
              ) -> SolutionEvaluator:
    """The exact evaluator of the run's objective and constraints (and of the SP grid a
    problem on predictions in [0, 1] is reported on), at ``model``'s decision threshold."""
    inputs = ctx.inputs
    return SolutionEvaluator(built.objective, built.constraints, inputs.protected,
                             inputs.trainer.eval_chunk, grid=report_grid(inputs.spec),
                             decision=decision_threshold(model),
                             probabilities=outputs_probabilities(model))


def report_grid(spec: ProblemSpec | Problem) -> torch.Tensor | None:
    """The SP grid a problem on predictions in [0, 1] is reported on (KS and grid
    disparities), else ``None``."""
    if isinstance(spec, ProblemSpec) and spec.bounded_predictions():
        return threshold_grid(spec.grid_size)
    return None
