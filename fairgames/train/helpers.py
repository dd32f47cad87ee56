"""The helpers stage: the models a run trains before its method plays — paper 000's
unconstrained model (UncError) for ``unconstrained_<metric>`` names, and a churn baseline
(trained, or loaded from an earlier run) — and what they give the problem
(:func:`train_helpers`).

Example:
    >>> model_options({"name": "mlp", "hidden": [8], "activation": "relu", "dropout": 0.0,
    ...                "bias": True})
    {'name': 'mlp', 'hidden': [8], 'activation': 'relu', 'dropout': 0.0, 'output': 'score'}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fairgames.data import DataError, TabularDataset, labeled_mask, labeled_part
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.solutions import StochasticModel, load_solution
from fairgames.models import build_model
from fairgames.problems import Environment, ProblemSpec, compile_expression
from fairgames.rates import error_rate

from .config import ConfigError, TrainerConfig
from .context import Helpers, ModelFactory, OptimizerFactory, RunContext
from .data import predict_scores
from .deploy.contract import check_features, check_preprocess
from .deploy.load import RUN_FILE, RunFormatError, read_run_record
from .evaluation import SolutionEvaluator
from .loop.engine import BatchSettings, Engine, GameData, LogSettings, SnapshotSettings

MODEL_FILE = "final.pt"


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
    paper 000's UncError, used for ``unconstrained_<metric>`` and as a churn baseline; on the
    labeled rows alone when some sources are unlabeled (paper 001)."""
    train = labeled_part(train)
    model = model_factory()
    copt = ConstrainedOptimizer(Problem(error_rate()), optimizer_factory(model.parameters()),
                                preset="lagrangian")
    engine = Engine(model, copt, GameData(train, protected), steps=steps,
                    batches=BatchSettings(size=trainer.batch_size, seed=seed),
                    logging=LogSettings(every=steps),
                    snapshots=SnapshotSettings(every=steps, max_kept=2))
    engine.run()
    return model


def load_baseline(path: str, device: torch.device, input_dim: int | None = None,
                  feature_names: list[str] | None = None) -> torch.nn.Module:
    """A deterministic solution saved by an earlier run (its directory or ``final.pt``);
    ``input_dim`` / ``feature_names``: the width and the column names of the features it
    will score (checked once, here, against the run's ``run.json``: the saved-model contract,
    :mod:`fairgames.train.deploy.contract`)."""
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
    _check_width(path, int(cfg["input_dim"]), input_dim)
    _check_contract(path, p.parent, feature_names)
    template = build_model(**model_options(cfg), input_dim=int(cfg["input_dim"]))
    model = load_solution(p, template, device)
    if isinstance(model, StochasticModel):
        raise ConfigError(f"problem.baseline_path={path!r} holds a stochastic solution; a "
                          "churn baseline must be deterministic (final.pt or best_iterate.pt)")
    return model.eval()


def _check_contract(path: str, run_dir: Path, feature_names: list[str] | None) -> None:
    """The baseline's run record against this run's data: the same feature columns in the
    same order, and its preprocessing spec beside it. A run directory older than ``run.json``
    has no names: the width alone is checked (:func:`_check_width`)."""
    if not (run_dir / RUN_FILE).is_file():
        return
    try:
        record = read_run_record(run_dir)
        check_preprocess(run_dir, record, "the baseline model")
        check_features(record.get("features"), feature_names, "the baseline model")
    except (DataError, RunFormatError) as e:
        raise ConfigError(f"problem.baseline_path={path!r}: {e}") from e


def _check_width(path: str, width: int, input_dim: int | None) -> None:
    """Refuse a baseline model of another input width: it scores every split, where torch
    would fail with "mat1 and mat2 shapes cannot be multiplied"."""
    if input_dim is not None and width != input_dim:
        raise ConfigError(
            f"problem.baseline_path={path!r}: the baseline model takes {width} features but "
            f"this run's data has {input_dim}: give the run directory of a model trained on "
            "the same data (data set, protected attribute and feature options), or drop "
            "problem.baseline_path to train a baseline in this run")


def unconstrained_values(metrics: list[str], train: TabularDataset, protected: str,
                         scores: torch.Tensor) -> dict[str, float]:
    """``{"unconstrained_<metric>": value}`` of a model's ``scores`` on the training split
    (its labeled rows when some sources are unlabeled)."""
    if train.unlabeled:
        scores, train = scores[..., labeled_mask(train)], labeled_part(train)
    env = Environment(protected, train.group_names, {})
    exprs = {m: compile_expression(f"{m}()", env, f"unconstrained_{m}") for m in metrics}
    out = {}
    for m, e in exprs.items():
        ev = SolutionEvaluator(e, [], protected)
        out[f"unconstrained_{m}"] = ev.evaluate(train, scores)["objective"]
    return out


def baseline_values(exprs: Mapping[str, str], train: TabularDataset, protected: str,
                    scores: torch.Tensor) -> dict[str, float]:
    """``{"baseline_<metric>[_<source>]": value}``: each expression of
    :meth:`~fairgames.problems.ProblemSpec.baseline_metrics` on the baseline model's
    training-split ``scores`` (hard predictions, score > 0) — e.g. the deployed model's recall
    on D2 that paper 001's churn scenario keeps as a floor. An expression without ``source=``
    reads the labeled rows alone."""
    out = {}
    for name, text in exprs.items():
        ds, s = train, scores
        if "source=" not in text and train.unlabeled:
            s, ds = scores[..., labeled_mask(train)], labeled_part(train)
        env = Environment(protected, ds.group_names, {}, sources=ds.source_names or [],
                          unlabeled=ds.unlabeled)
        ev = SolutionEvaluator(compile_expression(text, env, name), [], protected)
        out[name] = ev.evaluate(ds, s)["objective"]
    return out


# --------------------------------------------------------------------------- the helpers stage
def train_helpers(ctx: RunContext) -> Helpers:
    """Helper models: the unconstrained metrics and the churn baseline the problem reads."""
    inputs, spec = ctx.inputs, ctx.inputs.spec
    helpers = Helpers()
    if isinstance(spec, ProblemSpec):
        metrics = spec.unconstrained_metrics()
        if metrics:
            helpers.values = _unconstrained_values(ctx, metrics)
            helpers.unconstrained = {"steps": ctx.steps, "split": "train",
                                     "values": helpers.values}
        if spec.needs_baseline() and inputs.baseline.scores is None:
            base_model, helpers.baseline_info = _baseline_model(ctx)
            ctx.extras["baseline_model"] = base_model
            helpers.baselines = {
                name: predict_scores(base_model, ds.features, inputs.trainer.eval_chunk)
                for name, ds in ctx.splits.items()}
    if inputs.baseline.scores is not None:
        helpers.baselines = {k: v.to(inputs.device) for k, v in inputs.baseline.scores.items()}
        helpers.baseline_info = {"source": "given"}
    if isinstance(spec, ProblemSpec):
        exprs = spec.baseline_metrics(ctx.splits.train.source_names)
        if exprs:       # a new dict: helpers.unconstrained keeps its own values
            values = baseline_values(exprs, ctx.splits.train, inputs.protected,
                                     helpers.baselines["train"])
            helpers.values = {**helpers.values, **values}
            helpers.baseline_info = {**(helpers.baseline_info or {}), "values": values}
    return helpers


def _unconstrained_values(ctx: RunContext, metrics: list[str]) -> dict[str, float]:
    """Paper 000's UncError metrics: trained now, or the resumed run's. The model is kept in
    ``ctx.extras["unconstrained_model"]``: it is a candidate of the recommendation."""
    inputs, train = ctx.inputs, ctx.splits.train
    if ctx.checkpoint is not None:
        state = ctx.checkpoint["run"].get("unconstrained_state")
        if state is not None:
            unc = inputs.model.factory().to(inputs.device)
            unc.load_state_dict(state)
            ctx.extras["unconstrained_model"] = unc
        return dict(ctx.checkpoint["run"]["unconstrained"])
    unc = train_unconstrained(inputs.model.factory, inputs.model.optimizer, train,
                              inputs.protected, inputs.trainer, inputs.seed, ctx.steps)
    ctx.extras["unconstrained_model"] = unc
    scores = predict_scores(unc, train.features, inputs.trainer.eval_chunk)
    return unconstrained_values(metrics, train, inputs.protected, scores)


def _baseline_model(ctx: RunContext) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The churn baseline (loaded, resumed or trained) and its ``results.json`` record."""
    inputs, train, ckpt = ctx.inputs, ctx.splits.train, ctx.checkpoint
    source, seed = inputs.baseline, inputs.seed
    if source.path is not None:
        model = load_baseline(source.path, inputs.device, int(train.features.shape[1]),
                              train.feature_names)
        return model, {"source": str(source.path)}
    n_base = max(1, math.ceil(source.fraction * len(train)))
    info = {"source": "trained", "fraction": source.fraction, "rows": n_base,
            "steps": ctx.steps}
    if ckpt is not None:   # the resumed run reuses the killed run's baseline
        base_model = inputs.model.factory().to(inputs.device)
        base_model.load_state_dict(ckpt["run"]["baseline_state"])
        return base_model, info
    # An older model that saw less data: a seeded share of the training rows.
    g = torch.Generator().manual_seed(seed + 7919)
    rows = torch.randperm(len(train), generator=g)[:n_base]
    base_model = train_unconstrained(inputs.model.factory, inputs.model.optimizer,
                                     train.subset(rows), inputs.protected, inputs.trainer, seed,
                                     ctx.steps)
    return base_model, info
