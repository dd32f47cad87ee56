"""Helper models a run trains before the game: paper 000's unconstrained model (UncError) for
``unconstrained_<metric>`` names, and a churn baseline (trained, or loaded from an earlier run).

Example:
    >>> model_options({"name": "mlp", "hidden": [8], "activation": "relu", "dropout": 0.0,
    ...                "bias": True})
    {'name': 'mlp', 'hidden': [8], 'activation': 'relu', 'dropout': 0.0, 'output': 'score'}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.solutions import StochasticModel, load_solution
from fairgames.models import build_model
from fairgames.problems import Environment, compile_expression
from fairgames.rates import error_rate

from .config import ConfigError, TrainerConfig
from .evaluation import SolutionEvaluator
from .loop.engine import BatchSettings, Engine, GameData, LogSettings, SnapshotSettings

MODEL_FILE = "final.pt"
ModelFactory = Callable[[], torch.nn.Module]
OptimizerFactory = Callable[[Any], torch.optim.Optimizer]


def model_options(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :func:`fairgames.models.build_model` in a model config."""
    name = model_cfg["name"]
    # "auto" is resolved against the problem by the run (resolve_output); a saved config of
    # an older run has no output key: the raw score
    output = model_cfg.get("output", "score")
    if name == "linear":
        # an older run's config has no sparse_inputs: it trained with the dense kernels
        return {"name": name, "bias": model_cfg.get("bias", True), "output": output,
                "sparse_inputs": model_cfg.get("sparse_inputs", "off")}
    return {"name": name, "hidden": list(model_cfg["hidden"]),
            "activation": model_cfg["activation"], "dropout": model_cfg["dropout"],
            "output": output}


def resolve_output(model_cfg: Mapping[str, Any], bounded: bool) -> dict[str, Any]:
    """``model_cfg`` with ``output: auto`` resolved: ``unit`` (a sigmoid head) for a problem
    whose statements assume predictions in [0, 1] (``bounded``), else ``score``.

    Example:
        >>> resolve_output({"name": "linear", "output": "auto"}, True)["output"]
        'unit'
    """
    out = dict(model_cfg)
    if out.get("output", "auto") == "auto":
        out["output"] = "unit" if bounded else "score"
    return out


def train_unconstrained(model_factory: ModelFactory, optimizer_factory: OptimizerFactory,
                        train: TabularDataset, protected: str, trainer: TrainerConfig,
                        seed: int, steps: int) -> torch.nn.Module:
    """An unconstrained model (hinge surrogate of the error rate), trained like the main one:
    paper 000's UncError, used for ``unconstrained_<metric>`` and as a churn baseline."""
    model = model_factory()
    copt = ConstrainedOptimizer(Problem(error_rate()), optimizer_factory(model.parameters()),
                                preset="lagrangian")
    engine = Engine(model, copt, GameData(train, protected), steps=steps,
                    batches=BatchSettings(size=trainer.batch_size, seed=seed),
                    logging=LogSettings(every=steps),
                    snapshots=SnapshotSettings(every=steps, max_kept=2))
    engine.run()
    return model


def load_baseline(path: str, device: torch.device) -> torch.nn.Module:
    """A deterministic solution saved by an earlier run (its directory or ``final.pt``)."""
    p = Path(path)
    if p.is_dir():
        p = p / MODEL_FILE
    if not p.is_file():
        raise ConfigError(f"problem.baseline_path={path!r}: no {MODEL_FILE} there (give the "
                          "directory of an earlier run, or one of its solution files)")
    meta = torch.load(p, map_location="cpu", weights_only=True).get("metadata", {})
    cfg = meta.get("model")
    if not cfg:
        raise ConfigError(f"problem.baseline_path={path!r}: the file does not say which model "
                          "it holds (it was not written by scripts/train.py)")
    template = build_model(**model_options(cfg), input_dim=int(cfg["input_dim"]))
    model = load_solution(p, template, device)
    if isinstance(model, StochasticModel):
        raise ConfigError(f"problem.baseline_path={path!r} holds a stochastic solution; a "
                          "churn baseline must be deterministic (final.pt or best_iterate.pt)")
    return model.eval()


def unconstrained_values(metrics: list[str], train: TabularDataset, protected: str,
                         scores: torch.Tensor) -> dict[str, float]:
    """``{"unconstrained_<metric>": value}`` of a model's ``scores`` on the training split."""
    env = Environment(protected, train.group_names, {})
    exprs = {m: compile_expression(f"{m}()", env, f"unconstrained_{m}") for m in metrics}
    out = {}
    for m, e in exprs.items():
        ev = SolutionEvaluator(e, [], protected)
        out[f"unconstrained_{m}"] = ev.evaluate(train, scores)["objective"]
    return out
