"""A paper family defined outside the package, as a user would write one: it touches no file of
``fairgames/`` and plugs into the run pipeline through the seam (:mod:`fairgames.train.method`)
only. ``tests/train/test_train_seam.py`` imports it from the command line
(``families=[seam_family]``) and in process.

* ``algorithm=plain_erm``, a **method**: full-batch gradient steps on the logistic loss alone
  (``algorithm.erm_steps`` of them, its own key), a snapshot every 10 steps — the constraints
  are not played, the pipeline still scores, selects, recommends and reports.
* ``probe``, an **extension** with its own config group (``probe.name=on``): a player that
  counts the game's rounds, a logged scalar, and a ``results.json`` block with its schema.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fairgames.game.players import ConfigKey, Player
from fairgames.game.players.keys import positive
from fairgames.game.solutions import StochasticModel
from fairgames.train.data import predict_scores
from fairgames.train.method import (
    Extension,
    Method,
    Trained,
    register_extension,
    register_group,
    register_method,
    training_record,
    whole_training_split,
)
from fairgames.train.results.solutions import Candidates

SNAPSHOT_EVERY = 10


class PlainERM(Method):
    """Unconstrained empirical risk minimisation, as a run method."""

    name = "plain_erm"
    config_keys = (ConfigKey("erm_steps", int, 20, "plain_erm's gradient steps",
                             positive(integer=True)),)

    def train(self, ctx: Any, problem: Any, helpers: Any) -> Trained:
        inputs, train = ctx.inputs, ctx.splits.train
        model = inputs.model.factory().to(inputs.device)
        opt = inputs.model.optimizer(model.parameters())
        steps = int(inputs.algorithm.settings.get("erm_steps", 20))
        kept, at = [], []
        for step in range(1, steps + 1):
            opt.zero_grad()
            scores = model(train.features).reshape(-1)
            torch.nn.functional.binary_cross_entropy_with_logits(
                scores, train.labels.float()).backward()
            opt.step()
            if step % SNAPSHOT_EVERY == 0:
                kept.append(copy.deepcopy(model))
                at.append(step)
        mixture = StochasticModel.from_modules(kept or [copy.deepcopy(model)],
                                               steps=at or [steps])
        chunk = inputs.trainer.eval_chunk
        candidates = Candidates(
            model, steps, mixture,
            {n: predict_scores(mixture, ds.features, chunk) for n, ds in ctx.splits.items()},
            {n: predict_scores(model, ds.features, chunk) for n, ds in ctx.splits.items()},
            dict(ctx.splits.items()), None)

        def record(choice: Mapping[str, Any]) -> dict[str, Any]:
            return training_record(
                steps=steps, preset=self.name, multipliers={}, slacks={},
                likely_infeasible=False, seconds=time.perf_counter() - ctx.started,
                snapshots=at, choice=choice,
                constraint_data=whole_training_split(len(train)),
                problem={"constraints": list(problem.problem.constraint_names),
                         "multiplier_rows": [], "slacks": []},
                own={"plain_erm": {"snapshots": len(at)}})

        return Trained(candidates, model, record, steps=steps)

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        return [f"plain_erm: {results['training']['steps']} unconstrained steps"]


@dataclass
class ProbeConfig:
    """``probe.name``: ``on`` or ``none``."""

    name: str = "none"


class RoundCounter(Player):
    """Counts the game's rounds on the device (no host read inside a step)."""

    name = "round_counter"
    order = 95

    def __init__(self) -> None:
        self.rounds = torch.zeros((), dtype=torch.int64)

    def bind(self, game: Any) -> None:
        self.rounds = self.rounds.to(game.device)

    def play(self, round: Any) -> None:
        self.rounds += 1

    def state_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rounds = state["rounds"].clone()


class Probe(Extension):
    """Adds a round counter to the game, a logged scalar, and a report block."""

    group = "probe"
    results_schema = {"type": "object", "required": ["rounds", "recommended_error"],
                      "additionalProperties": False,
                      "properties": {"rounds": {"type": "integer", "minimum": 0},
                                     "recommended_error": {"type": "number"}}}

    def _on(self, ctx: Any) -> bool:
        cfg = self.settings(ctx)
        return cfg is not None and cfg.name == "on"

    def players(self, ctx: Any) -> list[Player]:
        if not self._on(ctx):
            return []
        ctx.extras["round_counter"] = counter = RoundCounter()
        return [counter]

    def log_scalars(self, ctx: Any, problem: Any, evaluator: Any) -> Any:
        if not self._on(ctx):
            return None
        return lambda model: {"probe/rounds": float(ctx.extras["round_counter"].rounds)}

    def report(self, ctx: Any, problem: Any, evaluator: Any, recommended: Any,
               selector: Any) -> dict[str, Any] | None:
        if not self._on(ctx):
            return None
        train = ctx.splits.train
        scores = predict_scores(recommended, train.features, ctx.inputs.trainer.eval_chunk)
        weights = recommended.weights if isinstance(recommended, StochasticModel) else None
        values = evaluator.evaluate(train, scores, mixture_weights=weights)
        return {"rounds": int(ctx.extras["round_counter"].rounds),
                "recommended_error": float(values["error"])}

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        block = results.get("probe")
        return [] if block is None else [f"probe: {block['rounds']} rounds"]


METHOD = register_method(PlainERM(), option={"name": "plain_erm", "erm_steps": 20})
EXTENSION = register_extension(Probe())
register_group("probe", ProbeConfig)
