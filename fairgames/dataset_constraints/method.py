"""``algorithm=mm``: paper 001's ramp classifier trained by majorization–minimization
(Algorithm 1) from a run config.

The run's problem (objective and constraints, ``fairgames.rates``) is compiled into MM's rows
on the training split (:func:`.compile.minimize_rates`: labels, group codes, source ids as the
data gives them) and played on the run's linear model: ``algorithm.lam`` (λ, default 1/n),
``algorithm.rounds`` (the authors' 8), ``algorithm.round_gap`` (each round's certified gap) and
``algorithm.tol`` (stop when a round gains less). A model with a bias gets a constant column
(regularised like the weights, as LIBLINEAR's ``-B``).

Two classifiers come out. The run's solutions are the **randomised** (ramp) classifier — the
one MM keeps feasible — which predicts positive with probability σ(z) = clip(1/2 + z, 0, 1);
it declares so (``outputs_probabilities``) and the core evaluates its rates exactly in
expectation. The **deterministic** one (the same w thresholded at 0) is reported beside, in
``results.json``'s ``training.mm.deterministic``: not guaranteed feasible (paper 001, §4).

Example:
    >>> import torch
    >>> from fairgames.models import LinearModel
    >>> ramp = RampClassifier(LinearModel(1, bias=False))
    >>> ramp.model.linear.weight.data[:] = 1.0
    >>> ramp(torch.tensor([[-1.0], [0.25], [2.0]])).tolist(), ramp.outputs_probabilities
    ([0.0, 0.75, 1.0], True)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fairgames.data import TabularDataset
from fairgames.game.players.keys import ConfigKey, positive
from fairgames.game.solutions import StochasticModel
from fairgames.models import LinearModel
from fairgames.train.config import ConfigError
from fairgames.train.config.checks import Checks
from fairgames.train.context import Helpers, RunContext, RunProblem
from fairgames.train.data import predict_scores
from fairgames.train.method import Method, Trained, training_record, whole_training_split
from fairgames.train.problem import evaluator as run_evaluator
from fairgames.train.results.solutions import Candidates

from .compile import NotPlayableError, RowData, constraint_row, minimize_rates
from .mm import InfeasibleStartError, MMResult

CONFIG_KEYS = (
    ConfigKey("lam", float, None, "λ, the ℓ2 weight of Problem 1 (null: 1/n, the paper's)",
              positive()),
    ConfigKey("rounds", int, 8, "MM rounds at most (Algorithm 1; the authors' 8)", positive()),
    ConfigKey("round_gap", float, 1e-6, "each round's certified duality gap (Problem 3)",
              positive()),
    ConfigKey("tol", float, 1e-6, "stop when a round lowers the ramp objective by less",
              positive()),
)


class RampClassifier(nn.Module):
    """The randomised classifier of a linear model: P(ŷ = 1 | x) = σ(⟨w, x⟩ + b), σ the
    ramp clip(1/2 + z, 0, 1) (paper 001, §4). Its outputs are those probabilities, and it
    says so: ``outputs_probabilities`` is the attribute the core's evaluator reads."""

    outputs_probabilities = True

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(0.5 + self.model(x), 0.0, 1.0)


def row_data(train: TabularDataset) -> RowData:
    """What the compiled rates read, from the training split (labels, groups, sources)."""
    sources = None if train.sources is None else train.sources.cpu().numpy()
    return RowData(labels=train.labels.cpu().numpy(),
                   groups={k: v.cpu().numpy() for k, v in train.groups.items()},
                   group_names=dict(train.group_names), sources=sources,
                   source_names=list(train.source_names or ()))


def mm_features(model: LinearModel, x: torch.Tensor) -> np.ndarray:
    """The training features in float64, with a constant column where the model has a bias."""
    features = x.detach().cpu().to(torch.float64).numpy()
    if model.linear.bias is not None:
        features = np.concatenate([features, np.ones((len(features), 1))], axis=1)
    return features


def set_weights(model: LinearModel, w: np.ndarray) -> LinearModel:
    """The MM solution into the linear model (its last entry the bias, if it has one)."""
    d = model.linear.weight.shape[1]
    with torch.no_grad():
        model.linear.weight.copy_(torch.as_tensor(w[:d]).reshape(1, d))
        if model.linear.bias is not None:
            model.linear.bias.fill_(float(w[d]))
    return model


def mm_record(result: MMResult, lam: float, options: Mapping[str, Any],
              deterministic: Mapping[str, Any]) -> dict[str, Any]:
    """``results.json``'s ``training.mm``: settings, how it started and stopped, every round
    (ramp objective, R_k − γ_k per constraint, certified gap, multipliers, SVM solves,
    seconds) and the deterministic classifier's metrics per split."""
    return {"lam": lam, **dict(options), "start": result.start, "stopped": result.stopped,
            "rounds": [{"round": r.round, "objective": r.objective,
                        "constraints": list(r.constraints), "gap": r.gap,
                        "multipliers": list(r.multipliers), "solves": r.solves,
                        "seconds": r.seconds} for r in result.rounds],
            "deterministic": dict(deterministic)}


def _play(ctx: RunContext, problem: RunProblem, model: LinearModel
          ) -> tuple[MMResult, float, dict[str, Any]]:
    train = ctx.splits.train
    a = ctx.inputs.algorithm.to_mapping()
    lam = float(a.get("lam") or 1.0 / len(train))
    options = {"max_rounds": int(a.get("rounds") or 8), "gap": float(a.get("round_gap") or 1e-6),
               "tol": float(a.get("tol") or 1e-6)}
    data = row_data(train)
    try:
        _refuse_vacuous(problem, data)
        result = minimize_rates(problem.objective, problem.constraints,
                                mm_features(model, train.features), data, lam,
                                **options)
    except (NotPlayableError, InfeasibleStartError) as e:
        raise ConfigError(f"algorithm=mm: {e}") from e
    return result, lam, options


def _refuse_vacuous(problem: RunProblem, data: RowData) -> None:
    """A constraint every classifier meets — s_p(A) ≥ κ·s_p(B) with κ ≤ 0 — is refused: its
    row's largest value, Σ_i max(pos_i, neg_i), is within its bound."""
    for c in problem.constraints:
        row = constraint_row(c, data)
        if float(np.maximum(row.pos, row.neg).sum()) <= row.bound + 1e-12:
            raise NotPlayableError(
                f"constraint {row.name} holds for every classifier (a ratio constraint "
                "s_p(A) >= κ·s_p(B) with κ <= 0 does): give κ > 0, or drop the constraint")


class MMMethod(Method):
    """``algorithm=mm``: Algorithm 1 of paper 001 on the run's linear model, the randomised
    (ramp) classifier as the run's solution, the deterministic one reported beside."""

    name = "mm"
    config_keys = CONFIG_KEYS
    surrogates = False       # MM bounds the ramp's rates itself (σ̌_p, σ̌_n)
    raw_scores = True

    def train(self, ctx: RunContext, problem: RunProblem, helpers: Helpers) -> Trained:
        model = ctx.inputs.model.factory()
        if not isinstance(model, LinearModel) or getattr(model, "output", "score") != "score":
            raise ConfigError("algorithm=mm trains a linear model with raw scores (paper 001's "
                              "ramp is σ(⟨w, x⟩ + b)): use model=linear with model.output=score")
        result, lam, options = _play(ctx, problem, model)
        linear = set_weights(model, result.w).to(ctx.splits.train.features.device)
        ramp = RampClassifier(linear)
        chunk = ctx.inputs.trainer.eval_chunk
        steps = len(result.rounds) - 1
        mixture = StochasticModel.from_modules([ramp], [1.0], steps=[steps])
        splits = dict(ctx.splits.items())
        scores = {n: predict_scores(mixture, ds.features, chunk) for n, ds in splits.items()}
        final = {n: s[0] for n, s in scores.items()}
        candidates = Candidates(ramp, steps, mixture, scores, final, splits, None)
        ctx.extras["mm"] = result

        def record(choice: Mapping[str, Any]) -> dict[str, Any]:
            ev = run_evaluator(ctx, problem, linear)      # thresholded at 0: deterministic
            det = {n: _brief(ev.evaluate(ds, predict_scores(linear, ds.features, chunk)))
                   for n, ds in splits.items()}
            last = result.rounds[-1]
            return training_record(
                steps=steps, preset=self.name,
                multipliers=dict(zip(_names(problem), last.multipliers, strict=False)),
                slacks={}, likely_infeasible=False, seconds=time.perf_counter() - ctx.started,
                snapshots=[steps], choice=choice,
                constraint_data=whole_training_split(len(ctx.splits.train)),
                problem={"constraints": _names(problem), "multiplier_rows": _names(problem),
                         "slacks": []},
                own={"mm": mm_record(result, lam, options, det)})

        return Trained(candidates, ramp, record, steps=steps)

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        mm = results["training"].get("mm")
        if mm is None:
            return []
        last = mm["rounds"][-1]
        return [f"mm: {len(mm['rounds']) - 1} rounds from w = {mm['start']} (stopped: "
                f"{mm['stopped']}), ramp objective {last['objective']:.4g}, last certified gap "
                f"{last['gap']:.2g}; the solutions are the randomised (ramp) classifier, "
                "the deterministic one is in training.mm.deterministic"]


def _names(problem: RunProblem) -> list[str]:
    return list(problem.problem.constraint_names)


def _brief(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The objective, the error and the constraints' values of one split."""
    return {k: metrics[k] for k in ("objective", "error", "constraints") if k in metrics}


def check_mm(c: Any, check: Checks) -> None:
    """What ``algorithm=mm`` cannot honour: a model other than a linear one with raw scores,
    a minibatch, resumable or distributed trainer (MM runs whole rounds on the full split)."""
    if c.algorithm.name != MMMethod.name:
        return
    if c.model.get("name") not in (None, "linear"):
        check.bad("model.name", c.model.get("name"), "algorithm=mm trains a linear model "
                  "(paper 001's ramp of ⟨w, x⟩ + b): use model=linear")
    if c.model.get("output") not in (None, "auto", "score"):
        check.bad("model.output", c.model.get("output"), "algorithm=mm's ramp reads raw "
                  "scores: leave it at auto or score")
    for name, needed in (("epochs", None), ("batch_size", None), ("resume", False),
                         ("stop_after", None), ("distributed", False)):
        if c.trainer.get(name) not in (needed, None if needed is False else needed):
            check.bad(f"trainer.{name}", c.trainer.get(name), "algorithm=mm plays whole MM "
                      f"rounds on the full training split in one run: leave it at {needed}")
