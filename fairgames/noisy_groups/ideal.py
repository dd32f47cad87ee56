"""``robust=soft_assignments_ideal``: paper 004's ideal Algorithms 1 and 3 from a run config
(:mod:`fairgames.noisy_groups.ideal_soft`), in place of the game.

The outer rounds ``T`` are ``trainer.steps`` (null: 50); the other constants are the
``robust`` group's keys (``configs/robust/soft_assignments_ideal.yaml``): ``rounds`` (``Q``),
``theta_steps`` (the oracle's optimizer steps, with the run's ``optimizer``), ``tau``,
``penalty_radius`` (``R′``), ``lr`` (``η_w``), ``multiplier_lr`` (``η_λ``) and ``radius``
(``R``), null taking Theorems 4/5's values. The noise model ``P(G = j | Ĝ = k)`` is read off
the training rows (:func:`~fairgames.noisy_groups.noise_model.noise_model`), which it plays on in
one full batch. Its output, the uniform mixture of all ``T·Q`` inner iterates, is the
run's ``stochastic`` solution, recommended by default (``trainer.recommend: auto`` reads
``stochastic`` here): a mixture evaluated by expectation, like paper 000's.

Example:
    >>> ideal_settings(RobustConfig(name="soft_assignments_ideal", rounds=3), steps=None).outer
    50
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import torch

from fairgames.data import DatasetSplits
from fairgames.game import Problem
from fairgames.train.config import ConfigError
from fairgames.train.context import Helpers, RunContext, RunInputs, RunProblem
from fairgames.train.data import predict_scores
from fairgames.train.method import Method, Trained, training_record, whole_training_split
from fairgames.train.results.solutions import Candidates

from .ideal_soft import IdealSettings, IdealSoftAssignments
from .noise_model import noise_model
from .robust import RobustConfig, check_splits

IDEAL = "soft_assignments_ideal"
DEFAULT_OUTER = 50      # trainer.steps: null


def ideal_settings(cfg: RobustConfig, steps: int | None) -> IdealSettings:
    """The :class:`IdealSettings` of a run: ``T`` = ``steps`` (null: 50), the rest from the
    ``robust`` group."""
    return IdealSettings(outer=DEFAULT_OUTER if steps is None else int(steps),
                         rounds=int(cfg.rounds), theta_steps=int(cfg.theta_steps),
                         tau=float(cfg.tau), penalty_radius=cfg.penalty_radius,
                         w_lr=float(cfg.lr), multiplier_lr=cfg.multiplier_lr,
                         radius=cfg.radius)


def play_ideal(problem: Problem, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               splits: DatasetSplits, attribute: str, settings: IdealSettings
               ) -> IdealSoftAssignments:
    """Algorithms 1/3 on the whole training split (``attribute`` holds its noisy groups)."""
    check_splits(splits, attribute)
    train = splits.train
    ideal = IdealSoftAssignments(problem, model, optimizer, train.features, train.labels,
                                 train.groups[attribute], attribute,
                                 noise_model(train, attribute), settings,
                                 train.group_names[attribute])
    ideal.run()
    return ideal


def ideal_candidates(ideal: IdealSoftAssignments, splits: DatasetSplits, chunk: int
                     ) -> Candidates:
    """The run's candidates: every inner iterate (uniform weights: the ideal output), the
    last one as the final model."""
    mixture = ideal.mixture()
    scores = {name: predict_scores(mixture, ds.features, chunk) for name, ds in splits.items()}
    final = {name: s[-1] for name, s in scores.items()}
    return Candidates(ideal.model, len(mixture), mixture, scores, final, dict(splits.items()),
                      None)


def ideal_record(ideal: IdealSoftAssignments) -> dict[str, Any]:
    """``results.json``'s ``training.ideal``: the constants used, and per outer round the λ
    played and ``δ`` (the round's mean exact worst case per row, on train); their mean is
    the mixture's expected robust constraint on train, ``mixture_robust``."""
    s = ideal.settings
    deltas = torch.tensor(ideal.deltas, dtype=torch.float64)
    return {"outer": s.outer, "rounds": s.rounds, "theta_steps": s.theta_steps, "tau": s.tau,
            "penalty_radius": ideal.penalty_radius, "w_lr": s.w_lr,
            "multiplier_lr": ideal.multiplier_lr, "radius": ideal.radius,
            "members": len(ideal.members),
            "rows": list(ideal.terms.row_names),
            "lambdas": ideal.lambdas, "deltas": ideal.deltas,
            "mixture_robust": deltas.mean(0).tolist() if len(ideal.deltas) else None}


class IdealMethod(Method):
    """``robust=soft_assignments_ideal``: paper 004's ideal Algorithms 1/3 in place of the
    game — the same data, problem, evaluation and outputs; its uniform mixture of inner
    iterates is the ``stochastic`` solution, recommended unless ``trainer.recommend`` says."""

    name = IDEAL
    key = "robust.name"

    def prepare(self, inputs: RunInputs) -> RunInputs:
        if inputs.trainer.recommend != "auto":
            return inputs
        return dataclasses.replace(inputs, trainer=dataclasses.replace(
            inputs.trainer, recommend="stochastic"))

    def train(self, ctx: RunContext, problem: RunProblem, helpers: Helpers) -> Trained:
        inputs, trainer = ctx.inputs, ctx.inputs.trainer
        model = inputs.model.factory().to(inputs.device)
        settings = ideal_settings(inputs.groups["robust"], trainer.steps)
        try:
            ideal = play_ideal(problem.problem, model,
                               inputs.model.optimizer(model.parameters()), ctx.splits,
                               inputs.protected, settings)
        except ValueError as e:
            raise ConfigError(f"robust=soft_assignments_ideal: {e}") from e
        candidates = ideal_candidates(ideal, ctx.splits, trainer.eval_chunk)
        record = ideal_record(ideal)

        def training(choice: Mapping[str, Any]) -> dict[str, Any]:
            return training_record(
                steps=settings.outer, preset=IDEAL,
                multipliers=dict(zip(record["rows"], ideal.lam.tolist(), strict=True)),
                slacks={}, likely_infeasible=False,
                seconds=time.perf_counter() - ctx.started,
                snapshots=range(1, len(ideal.members) + 1), choice=choice,
                constraint_data=whole_training_split(len(ctx.splits.train)),
                problem={"constraints": list(problem.problem.constraint_names),
                         "multiplier_rows": record["rows"], "slacks": []},
                own={"ideal": record})

        return Trained(candidates, candidates.mixture, training, steps=settings.outer)
