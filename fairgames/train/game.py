"""The default method: the game (paper 000) played by the training loop.

:class:`GameMethod` builds the players — θ's optimizer, the preset's multipliers and slacks,
the players the families' extensions add (e.g. ``robust=dro``'s adversary) — over the
compiled problem, runs the :class:`~fairgames.train.loop.engine.Engine` (resumed from a
checkpoint, recorded with ``trainer.compile``, stopped early by ``trainer.early_stop``) and
hands the pipeline its snapshots and final model as the candidates.

Example:
    >>> args = {"preset": "proxy_lagrangian", "multiplier_lr": 1.0, "slack_lr": None}
    >>> sorted(large_game_arguments(AlgorithmConfig(), 10_000, args))
    ['slack_lr']
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fairgames.data import DatasetSplits
from fairgames.game import DEFAULT_PRESET, ConstrainedOptimizer, get_preset
from fairgames.game.presets import large_game_preset

from .config import AlgorithmConfig, ConfigError, TrainerConfig
from .context import Helpers, RunContext, RunProblem, total_steps
from .data import constraint_holdout, predict_scores
from .evaluation import SolutionEvaluator
from .loop.engine import (
    BatchSettings,
    CheckpointSettings,
    Engine,
    GameData,
    LogSettings,
    SnapshotSettings,
    unique_names,
)
from .loop.logger import RunLogger, run_logger
from .loop.parallel import wrap
from .method import Method, Trained, extensions, one_extension, training_record
from .problem import evaluator as run_evaluator
from .results.early_stop import EarlyStop, StopRule, disabled_record, early_stop_mapping
from .results.outputs import plot_game
from .results.report import largest_violation
from .results.solutions import score_candidates

# A holdout run's two row sets (θ's and the multipliers'), in its run directory.
HOLDOUT_ROWS_FILE = "constraint_holdout.json"


@dataclass
class Game:
    """The game ready to play: model, optimizer, engine, logger, the engine's data, the
    holdout rows file's name (``None``: not written) and the game's step count."""

    model: torch.nn.Module
    copt: ConstrainedOptimizer
    engine: Engine
    logger: RunLogger
    data: GameData
    rows_file: str | None
    steps: int


class GameMethod(Method):
    """The game: what a run plays unless its config names another method."""

    name = "game"
    helpers = True

    def train(self, ctx: RunContext, problem: RunProblem, helpers: Helpers) -> Trained:
        game = make_game(ctx, helpers, problem)
        try:
            finished = _play(ctx, game)
        except BaseException:
            game.logger.close()
            raise
        if not finished:
            return Trained(None, game.model, lambda choice: {}, engine=game.engine,
                           logger=game.logger, stopped=True)
        unc = ctx.extras.get("unconstrained_model")
        with game.engine.finishing():       # a signal now: stop at once, say how to finish
            candidates = score_candidates(game.engine, ctx.splits, helpers.baselines,
                                          ctx.inputs.trainer,
                                          {"unconstrained model": unc} if unc is not None
                                          else None)
        trainer, statements = ctx.inputs.trainer, problem.statements

        def write(run_dir: Path, results: Mapping[str, Any], logger: RunLogger) -> None:
            if trainer.plots:
                plot_game(run_dir, game.engine, game.copt, trainer, statements.get("tolerance"))

        return Trained(candidates, game.model,
                       lambda choice: _training_record(ctx, helpers, problem, game, choice),
                       engine=game.engine, logger=game.logger, write=write,
                       steps=game.engine.step)


def _players(ctx: RunContext, built: RunProblem
             ) -> tuple[torch.nn.Module, ConstrainedOptimizer]:
    """The main model on the device and the game over its optimizer."""
    recipe, algorithm = ctx.inputs.model, ctx.inputs.algorithm
    model = ctx.main_model if ctx.main_model is not None else recipe.factory()
    model = model.to(ctx.inputs.device)
    opt = recipe.optimizer(model.parameters())
    # The preset makes its players from their settings (the keys each player declares).
    arguments = large_game_arguments(algorithm, built.problem.num_multipliers,
                                     get_preset(algorithm.name).optimizer_arguments(
                                         {"multipliers": algorithm.multipliers,
                                          **algorithm.settings}))
    try:
        # the families' players (extensions, e.g. robust=dro's adversary) join the game
        added = [p for ext in extensions() for p in ext.players(ctx)]
        copt = ConstrainedOptimizer(built.problem, opt, **arguments, players=added,
                                    process_group="default" if ctx.inputs.parallel else None)
    except ConfigError:
        raise       # a family's own config error (it names its remedy), not the algorithm's
    except ValueError as e:
        # The game refuses player choices that cannot play this problem (e.g. SPADE's
        # surrogate λ-player on KLD, Remark 3): a config error, reported as one.
        raise ConfigError(f"algorithm={algorithm.name} cannot play problem="
                          f"{built.statements['name']}: {e}") from e
    return model, copt


def large_game_arguments(algorithm: AlgorithmConfig, rows: int,
                         arguments: dict[str, Any]) -> dict[str, Any]:
    """The game's arguments for a preset named by the command line or ``fit()``: above
    :data:`~fairgames.game.SWAP_REGRET_MAX_ROWS` multiplier rows, the default preset under
    ``algorithm.large_game=switch`` is left unnamed, so that the optimizer plays the
    linear-cost preset at its own λ settings, with a ``LargeGameWarning`` and
    ``copt.preset_note``; otherwise ``arguments`` as they are.

    Example:
        >>> args = {"preset": "proxy_lagrangian", "multiplier_lr": 1.0, "slack_lr": None}
        >>> large_game_arguments(AlgorithmConfig(), 10_000, args)
        {'slack_lr': None}
        >>> large_game_arguments(AlgorithmConfig(large_game="keep"), 10_000, args) == args
        True
    """
    if (algorithm.large_game != "switch" or algorithm.name != DEFAULT_PRESET
            or algorithm.multipliers is not None or large_game_preset(rows) is None):
        return arguments
    named = ("preset", "multipliers", "multiplier_lr", "radius", "multiplier_options")
    return {k: v for k, v in arguments.items() if k not in named}


def _batches(trainer: TrainerConfig, seed: int, metadata: Mapping[str, Any] | None
             ) -> BatchSettings:
    """The engine's batches: ``trainer.batch_size``, or every source's own (``data=sources``
    with a source's ``batch_size`` set; the trainer's batch size must then be unset)."""
    sizes = (metadata or {}).get("source_batch_sizes")
    settings = BatchSettings(size=trainer.batch_size, balanced=trainer.balanced_batches,
                             seed=seed, sources=sizes)
    if settings.per_source and (trainer.batch_size is not None or trainer.balanced_batches):
        raise ConfigError(
            f"trainer.batch_size={trainer.batch_size} (balanced_batches="
            f"{trainer.balanced_batches}) and per-source batch sizes {dict(sizes)} both say "
            "how many rows a step plays: set the rows per step in data.sources.<name>."
            "batch_size and leave trainer.batch_size=null, trainer.balanced_batches=false")
    if settings.per_source and trainer.epochs is not None:
        raise ConfigError(
            f"trainer.epochs={trainer.epochs} with per-source batch sizes {dict(sizes)}: each "
            "source passes over its rows at its own pace, so an epoch has no single length; "
            "give trainer.steps instead (and trainer.epochs=null)")
    return settings


def make_game(ctx: RunContext, helpers: Helpers, built: RunProblem) -> Game:
    """Players, logger, the engine's data (holdout rows recorded) and the engine, resumed
    from the checkpoint if any."""
    inputs, ckpt = ctx.inputs, ctx.checkpoint
    trainer, run_dir = inputs.trainer, inputs.run_dir
    model, copt = _players(ctx, built)
    logger = run_logger(run_dir, trainer,
                        purge_step=(int(ckpt["engine"]["step"]) + 1) if ckpt else None)
    base, unc = ctx.extras.get("baseline_model"), ctx.extras.get("unconstrained_model")
    run_state = {"config": inputs.config, "unconstrained": helpers.values,
                 "baseline_state": base.state_dict() if base is not None else None,
                 "unconstrained_state": unc.state_dict() if unc is not None else None}

    def add_run_state(state: dict[str, Any]) -> None:
        state["run"] = dict(run_state)

    data, holdout_rows = game_data(trainer, ctx.splits, helpers.baselines, inputs.protected,
                                    inputs.seed)
    rows_file = _write_holdout_rows(run_dir, trainer, holdout_rows)
    # trainer.epochs counts passes over θ's own rows (fewer under constraint_split=holdout).
    steps = total_steps(trainer, len(data.train), ctx.default_steps)
    engine = Engine(
        model, copt, data, steps=steps, grad_clip=inputs.model.grad_clip,
        batches=_batches(trainer, inputs.seed, ctx.splits.metadata),
        logging=LogSettings(every=trainer.log_every, logger=logger, progress=trainer.progress
                            and (inputs.parallel is None or inputs.parallel.writes),
                            extra=_log_scalars(ctx, helpers, built, model)),
        snapshots=SnapshotSettings(every=trainer.snapshot_every,
                                   max_kept=trainer.max_snapshots,
                                   strategy=trainer.snapshot_strategy,
                                   offset=trainer.snapshot_offset,
                                   extra=_extension_state(ctx, copt)),
        checkpoints=CheckpointSettings(every=trainer.checkpoint_every, run_dir=run_dir,
                                       on_save=add_run_state),
        parallel=wrap(model, inputs.parallel) if inputs.parallel is not None else None,
        early_stop=_early_stop(ctx, helpers, built, model))
    if ckpt is not None:
        try:
            engine.load_state_dict(ckpt["engine"])
        except ValueError as e:       # e.g. another world size: the message names the remedy
            raise ConfigError(f"trainer.resume: {e}") from e
        engine.last_checkpoint = ctx.checkpoint_path
    if trainer.compile:      # after the resume: the graph reads the tensors loaded there
        try:
            engine.capture_steps()
        except ValueError as e:
            raise ConfigError(f"trainer.compile=true: {e}") from e
    return Game(model, copt, engine, logger, data, rows_file, steps)


def _log_scalars(ctx: RunContext, helpers: Helpers, built: RunProblem,
                 model: torch.nn.Module) -> Any:
    """The log-time scalars beyond the game's own — the validation curves and the
    extensions' — as one function of the model (``None``: none)."""
    evaluator = run_evaluator(ctx, built, model)
    found = [f for ext in extensions()
             if (f := ext.log_scalars(ctx, built, evaluator)) is not None]
    if ctx.inputs.trainer.validation_curves:
        found.insert(0, _validation_scalars(ctx, helpers, evaluator))
    if not found:
        return None
    if len(found) == 1:
        return found[0]

    def scalars(m: torch.nn.Module) -> dict[str, float | None]:
        return {k: v for f in found for k, v in f(m).items()}

    return scalars


def _validation_scalars(ctx: RunContext, helpers: Helpers, evaluator: SolutionEvaluator
                        ) -> Callable[[torch.nn.Module], dict[str, float | None]]:
    """The model on the whole validation split at a log interval — the split candidates are
    chosen on, where the training batch's curves say nothing: ``validation/objective``,
    ``validation/max_violation`` and ``validation/constraint/<name>`` (``None``: undefined,
    a subset with no validation row). Exact counts, in eval mode, outside the step."""
    ds, chunk = ctx.splits.validation, ctx.inputs.trainer.eval_chunk
    base = helpers.baselines["validation"] if helpers.baselines else None

    def scalars(model: torch.nn.Module) -> dict[str, float | None]:
        with torch.no_grad():
            m = evaluator.evaluate(ds, predict_scores(model, ds.features, chunk),
                                   baseline_scores=base)
        out = {"validation/objective": m["objective"],
               "validation/max_violation": largest_violation(m)}
        out.update({f"validation/constraint/{n}": c["value"]
                    for n, c in m["constraints"].items()})
        return out

    return scalars


def _extension_state(ctx: RunContext, copt: ConstrainedOptimizer) -> torch.nn.Module | None:
    """The state an extension snapshots beside the model (at most one extension's)."""
    return one_extension("snapshot state beside the model",
                         lambda ext: ext.snapshot_state(ctx, copt))


def game_data(trainer: TrainerConfig, splits: DatasetSplits,
               baselines: Mapping[str, torch.Tensor] | None, protected: str, seed: int
               ) -> tuple[GameData, dict[str, Any] | None]:
    """The engine's data for ``trainer.constraint_split``: θ's training rows and their baseline
    scores, and the held-out rows the multipliers play on (none for ``train``); with
    ``holdout`` also the two row sets (indices into the training split) for the run's
    record."""
    train = splits.train
    base = baselines["train"] if baselines else None
    split = trainer.constraint_split
    if split == "train":
        return GameData(train, protected, baseline_scores=base), None
    if split == "validation":
        return (GameData(train, protected, baseline_scores=base, heldout=splits.validation,
                         heldout_baseline_scores=baselines["validation"] if baselines else None),
                None)
    theta_rows, held_rows = constraint_holdout(train, protected, trainer.constraint_fraction,
                                               seed)
    rows = {"theta_rows": theta_rows.tolist(), "heldout_rows": held_rows.tolist()}
    theta_rows, held_rows = theta_rows.to(train.features.device), held_rows.to(
        train.features.device)
    return (GameData(train.subset(theta_rows), protected,
                     baseline_scores=base[theta_rows] if base is not None else None,
                     heldout=train.subset(held_rows),
                     heldout_baseline_scores=base[held_rows] if base is not None else None),
            rows)


def _write_holdout_rows(run_dir: Path | None, trainer: TrainerConfig,
                        holdout_rows: dict[str, Any] | None) -> str | None:
    """Write the holdout game's two row sets; their file's name, or ``None`` if none."""
    rows_file = HOLDOUT_ROWS_FILE if holdout_rows is not None and run_dir is not None else None
    if rows_file is not None:
        # which training rows θ fits and which the multipliers see (recomputable from the
        # seed, but a reader of the run should not have to)
        (run_dir / rows_file).write_text(json.dumps(
            {"indices_into": "train", "fraction": trainer.constraint_fraction,
             **holdout_rows}, separators=(",", ":")) + "\n")
    return rows_file


def _early_stop(ctx: RunContext, helpers: Helpers, built: RunProblem,
                model: torch.nn.Module) -> EarlyStop | None:
    """``trainer.early_stop``'s check (``None``: off, and why in ``ctx.extras``). ``auto``
    turns it on where the recommendation is ``auto``'s, the run is one process and the
    candidates' train values are exact from integer counts (the check then costs
    milliseconds)."""
    trainer = ctx.inputs.trainer
    settings = early_stop_mapping(trainer.early_stop)
    evaluator = run_evaluator(ctx, built, model)
    train = ctx.splits.train
    enabled, why = settings["enabled"], "trainer.early_stop.enabled=false"
    if enabled == "auto":
        enabled, why = _auto_early_stop(trainer, ctx.inputs.parallel is not None,
                                        evaluator.counts_exact(train))
    if not enabled:
        ctx.extras["early_stop"] = disabled_record(why)
        return None
    unc = ctx.extras.get("unconstrained_model")
    base = helpers.baselines["train"] if helpers.baselines else None
    return EarlyStop(StopRule.from_mapping(settings), evaluator, train, base,
                     {"unconstrained model": unc} if unc is not None else None,
                     trainer.eval_chunk)


def _auto_early_stop(trainer: TrainerConfig, parallel: bool, exact: bool
                     ) -> tuple[bool, str]:
    """``trainer.early_stop.enabled=auto``: whether it is on, and why not."""
    if trainer.recommend != "auto":
        return False, f"auto: off with trainer.recommend={trainer.recommend}"
    if parallel:
        return False, "auto: off in a data-parallel run"
    if not exact:
        return False, ("auto: off where the train values are not exact from integer counts "
                       "(regression, thresholds, soft groups, weighted rows)")
    return True, ""


def _play(ctx: RunContext, game: Game) -> bool:
    """Play to the end (True), or stop at ``trainer.stop_after`` with a checkpoint there
    (False)."""
    trainer, engine = ctx.inputs.trainer, game.engine
    engine.run(stop_after=trainer.stop_after)
    if engine.step < game.steps and not engine.stopped_early:
        return False
    if trainer.checkpoint_every:
        engine.save_checkpoint()
    return True


def _training_record(ctx: RunContext, helpers: Helpers, built: RunProblem, game: Game,
                     choice: Mapping[str, Any]) -> dict[str, Any]:
    """``results.json``'s ``training`` section: the game's end state and how it was set up."""
    engine, copt, data, problem = game.engine, game.copt, game.data, built.problem
    return training_record(
        steps=engine.step, preset=copt.preset.name,
        game={"preset_note": copt.preset_note,    # why the default preset was replaced, if so
              "surrogate": problem.surrogate.kind,
              "objective_surrogate": (problem.objective_surrogate.kind
                                      if problem.objective_surrogate is not None else None),
              "temperature": problem.surrogate.scale},
        multipliers=dict(zip(unique_names(copt.terms.row_names), copt.weights()[1].tolist(),
                             strict=True)),
        objective_weight=float(copt.weights()[0]),
        slacks=(dict(zip(unique_names(copt.terms.slack_names), copt.last.slacks.tolist(),
                         strict=True)) if copt.last is not None else {}),
        likely_infeasible=bool(copt.likely_infeasible()),
        seconds=time.perf_counter() - ctx.started, snapshots=engine.snapshots.steps,
        early_stop=(engine.early_stop.record() if engine.early_stop is not None
                    else ctx.extras.get("early_stop")),
        choice=choice, unconstrained=helpers.unconstrained, baseline=helpers.baseline_info,
        constraint_data={"split": ctx.inputs.trainer.constraint_split,
                         "theta_rows": len(data.train),
                         "heldout_rows": len(data.heldout) if data.heldout is not None else 0,
                         "rows_file": game.rows_file},
        problem={"constraints": list(problem.constraint_names),
                 "multiplier_rows": unique_names(copt.terms.row_names),
                 "slacks": unique_names(copt.terms.slack_names)})
