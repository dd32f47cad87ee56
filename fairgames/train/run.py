"""A whole run: data, problem, model, game, training, evaluation and outputs.

Two entry points share one implementation:

* :func:`run` takes a composed config (``scripts/train.py``, or Hydra's compose API);
* :func:`fit` takes YOUR ``nn.Module`` (any module mapping ``[B, D]`` features to ``[B]``
  scores), a problem (a :class:`~fairgames.problems.ProblemSpec`, a catalog name, or a ready
  :class:`~fairgames.game.Problem`) and data splits.

What a run does, in order: loads the splits onto the device; trains the helper models the
problem needs (an unconstrained model for ``unconstrained_error``-style names, paper 000
Table 3; a churn baseline, unless loaded from ``problem.baseline_path``); compiles the problem;
plays the game with the :class:`~fairgames.train.loop.engine.Engine`; evaluates the final model,
the best iterate, the stochastic model (the mixture of snapshots) and the recommended one
(the solution to deploy, :mod:`fairgames.train.results.recommend`) on train, validation and test;
writes ``results.json`` (validated against the shipped schema), ``report.md``,
``dynamics.png``, the four solutions (``final.pt``, ``best_iterate.pt``, ``stochastic.pt``,
``recommended.pt``, :func:`fairgames.game.solutions.save_solution` files) and TensorBoard
hparams.

Example:
    >>> import torch
    >>> from fairgames.data import make_synthetic
    >>> splits = make_synthetic(n=600, d=4, seed=0)
    >>> result = fit(torch.nn.Linear(4, 1), "equal_opportunity", splits, protected="group",
    ...              trainer={"steps": 30, "log_every": 10, "snapshot_every": 5})
    >>> sorted(result.results["solutions"])
    ['best_iterate', 'final', 'recommended', 'stochastic']
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from fairgames.data import DatasetSplits
from fairgames.data.crossed import constrained_counts, constrained_values
from fairgames.fair_regression.method import (
    log_reduction,
    play_reduction,
    plot_reduction,
    reduction_candidates,
    reduction_record,
    reduction_settings,
    row_names,
)
from fairgames.game import (
    DEFAULT_PRESET,
    ConstrainedOptimizer,
    Problem,
    default_steps,
    default_surrogate,
    default_temperature,
    get_preset,
    objective_surrogate_for,
)
from fairgames.game.presets import large_game_preset
from fairgames.models import build_model, decision_threshold
from fairgames.noisy_groups.ideal import (
    IDEAL,
    ideal_candidates,
    ideal_record,
    ideal_settings,
    play_ideal,
)
from fairgames.noisy_groups.robust import (
    RobustConfig,
    robust_log,
    robust_players,
    robust_report,
    robust_selector,
)
from fairgames.noisy_groups.select import PlayedState
from fairgames.problems import ProblemSpec, load_problem
from fairgames.rates import Surrogate, error_rate, threshold_grid

from .config import (
    REDUCTION,
    AlgorithmConfig,
    ConfigError,
    OptimizerConfig,
    TrainConfig,
    TrainerConfig,
    validate,
)
from .config.family_game import family_algorithm
from .config.resume import RESUME_FREE, resumed_config
from .data import (
    apply_recipe,
    constraint_holdout,
    load_splits,
    loaded_keys,
    predict_scores,
    write_preprocessing,
)
from .deploy.load import write_run_record
from .evaluation import SolutionEvaluator, require_training_subsets, statements
from .helpers import (
    ModelFactory,
    OptimizerFactory,
    load_baseline,
    model_options,
    resolve_output,
    train_unconstrained,
    unconstrained_values,
)
from .loop.checkpoint import CheckpointError, ensure_writable, find_checkpoint, read_latest
from .loop.engine import (
    ENGINE_FORMAT,
    BatchSettings,
    CheckpointSettings,
    Engine,
    GameData,
    LogSettings,
    SnapshotSettings,
    unique_names,
)
from .loop.logger import RunLogger
from .loop.parallel import DataParallel, join, shared_run_dir, wrap
from .results.early_stop import EarlyStop, StopRule, disabled_record, early_stop_mapping
from .results.intervals import attach_intervals, constraint_intervals
from .results.outputs import log_final, write_files, write_outputs
from .results.recommend import recommend
from .results.report import (
    SCHEMA_VERSION,
    clean_numbers,
    environment,
    validate_results,
)
from .results.solutions import Candidates, evaluate_solutions, score_candidates
from .results.verdict import VERDICT_SOLUTION, run_verdict

# A holdout run's two row sets (θ's and the multipliers'), in its run directory.
HOLDOUT_ROWS_FILE = "constraint_holdout.json"


@dataclass
class RunResult:
    """What a run returns.

    Attributes:
        run_dir: where the outputs are (``None`` when nothing was written).
        results: the ``results.json`` content, or ``None`` if the run stopped early.
        model: the final model (``extras["solutions"]`` holds every solution: ``final``,
            ``best_iterate``, the ``stochastic``
            :class:`~fairgames.game.solutions.StochasticModel` and the ``recommended`` one,
            also :attr:`recommended`).
        engine: the training loop (history, snapshots, game); ``None`` for
            ``algorithm=reduction`` (``extras["reduction"]`` holds its
            :class:`~fairgames.fair_regression.ReductionResult`).
        stopped: the run ended at ``trainer.stop_after`` before finishing (its checkpoint:
            ``engine.last_checkpoint``).

    Example:
        >>> import torch
        >>> from fairgames.data import make_synthetic
        >>> result = fit(torch.nn.Linear(3, 1), "error", make_synthetic(n=300, d=3, seed=0),
        ...              protected="group", trainer={"steps": 4, "log_every": 2})
        >>> result.run_dir is None, result.stopped, result.engine.step
        (True, False, 4)
        >>> result.recommended is result.extras["solutions"]["recommended"]
        True
    """

    run_dir: Path | None
    results: dict[str, Any] | None
    model: torch.nn.Module
    engine: Engine | None
    stopped: bool = False
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def recommended(self) -> torch.nn.Module | None:
        """The solution to deploy (``trainer.recommend``; a module, or a
        :class:`~fairgames.game.solutions.StochasticModel` for a mixture — sample it with
        ``predict``, or use ``predict_proba``); ``None`` if the run stopped early. Its metrics
        are ``results["solutions"]["recommended"]`` and why it was chosen
        ``results["training"]["recommended"]``."""
        return self.extras.get("solutions", {}).get("recommended")


# --------------------------------------------------------------------------- config entry
def run(cfg: DictConfig, run_dir: str | Path | None = None,
        overrides: Sequence[str] | None = None) -> RunResult:
    """Run from a composed config (``configs/train.yaml``).

    ``run_dir`` (else ``cfg.run_dir``; a resume path that is a directory wins) is where the
    outputs go. ``overrides``: the keys the command line set (Hydra's ``overrides.task``); a
    resumed run then takes its checkpoint's config and compares only these
    (:func:`fairgames.train.config.resume.resumed_config`). ``None``: the whole config must match
    the checkpoint's.

    Raises:
        ConfigError: bad values (all listed), unknown data keys, a problem that does not
            compile (with the offending token underlined), a resume with another config.
        CheckpointError: no usable checkpoint to resume (what is wrong with each file), or a
            checkpoint that cannot be written.
        RunInterrupted: SIGINT or SIGTERM stopped training (a checkpoint holds that step).

    Example:
        >>> from hydra import compose, initialize_config_dir
        >>> from fairgames.problems import catalog_dir
        >>> with initialize_config_dir(config_dir=str(catalog_dir().parent), version_base="1.3"):
        ...     cfg = compose("train", overrides=["data=synthetic", "data.n=600", "trainer=smoke",
        ...                                       "trainer.steps=10"])
        >>> result = run(cfg)   # cfg.run_dir is null: nothing is written
        >>> result.results["training"]["steps"], result.run_dir
        (10, None)
    """
    validate(cfg)
    _one_job(cfg.trainer.tune)
    directory = run_dir if run_dir is not None else cfg.run_dir
    if isinstance(cfg.trainer.resume, str) and Path(cfg.trainer.resume).is_dir():
        directory = cfg.trainer.resume
    directory = Path(directory) if directory is not None else None
    parallel = None
    if cfg.trainer.distributed:        # rank 0's directory on every rank; rank 0 writes
        parallel, device = join(resolve_device(cfg.trainer.device))
        directory = shared_run_dir(directory)
    cfg, checkpoint = _resume_config(cfg, directory, overrides)
    t = cfg.trainer
    device = resolve_device(t.device) if parallel is None else device
    # data keys: the command line's, else the problem's recipe, else the loader's recipe
    data_cfg = apply_recipe(OmegaConf.to_container(cfg.data, resolve=True),
                            OmegaConf.to_container(cfg.problem, resolve=True).get("recipe"))
    splits = load_splits(data_cfg, cfg.seed)
    config = {**OmegaConf.to_container(cfg, resolve=True), "data": loaded_keys(data_cfg, splits)}
    input_dim = splits.train.num_features
    problem_cfg = OmegaConf.to_container(cfg.problem, resolve=True)
    spec = _spec_from_config(problem_cfg)
    # the reduction's iterates are raw scores, deployed rounded to the grid (GridRounded)
    config["model"] = model_cfg = resolve_output(
        config["model"], spec.bounded_predictions() and cfg.algorithm.name != REDUCTION)
    seed = int(cfg.seed)

    def model_factory() -> torch.nn.Module:
        torch.manual_seed(seed)
        return build_model(**model_options(model_cfg), input_dim=input_dim)

    opt_cfg = OptimizerConfig(**OmegaConf.to_container(cfg.optimizer, resolve=True))
    return _execute(RunInputs(
        model=ModelRecipe(model_factory, optimizer_factory(opt_cfg, fused=cfg.trainer.compile),
                          grad_clip=opt_cfg.grad_clip,
                          # build_model's own arguments: the record rebuilds the model
                          config={"input_dim": input_dim, **model_options(model_cfg)}),
        spec=spec, splits=splits,
        protected=str(config["data"]["protected"]),
        algorithm=AlgorithmConfig.from_mapping(OmegaConf.to_container(cfg.algorithm,
                                                                      resolve=True)),
        trainer=TrainerConfig(**OmegaConf.to_container(cfg.trainer, resolve=True)),
        seed=seed, device=device,
        run_dir=directory if parallel is None or parallel.writes else None, config=config,
        baseline=BaselineSource(path=problem_cfg.get("baseline_path"),
                                fraction=float(problem_cfg.get("baseline_fraction", 0.25))),
        checkpoint=checkpoint,
        robust=RobustConfig(**OmegaConf.to_container(cfg.robust, resolve=True))
        if cfg.get("robust") is not None else None, parallel=parallel))


def _resume_config(cfg: DictConfig, directory: Path | None,
                   overrides: Sequence[str] | None
                   ) -> tuple[DictConfig, tuple[Path, dict[str, Any]] | None]:
    """With the command line's ``overrides``, a resumed run's config is its checkpoint's
    (with the explicit overrides a resume may change); else ``cfg`` as it is. Also the
    checkpoint, read once."""
    if overrides is None or cfg.trainer.resume is False:
        return cfg, None
    checkpoint = _read_checkpoint(cfg.trainer.resume, directory)
    assert checkpoint is not None
    merged = OmegaConf.create(resumed_config(checkpoint[1]["run"]["config"],
                                             OmegaConf.to_container(cfg, resolve=True),
                                             overrides))
    validate(merged)
    return merged, checkpoint


def _read_checkpoint(resume: bool | str, run_dir: Path | None
                     ) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint ``trainer.resume`` points at, or the one before it if it is unusable
    (:func:`~fairgames.train.loop.checkpoint.read_latest`); ``None`` when not resuming."""
    path = find_checkpoint(resume, run_dir)
    return read_latest(path, check=_usable) if path is not None else None


def _usable(path: Path, state: Mapping[str, Any]) -> None:
    """Refuse a readable file that is not a run checkpoint of this version."""
    if not isinstance(state.get("engine"), Mapping) or not isinstance(state.get("run"), Mapping):
        raise CheckpointError(f"{path} is not a run checkpoint (it holds {sorted(state)}); a "
                              "solution file (final.pt, recommended.pt, ...) cannot be resumed: "
                              "point trainer.resume at a run directory or its checkpoint.pt")
    found = state["engine"].get("format")
    if found != ENGINE_FORMAT:
        raise CheckpointError(f"{path} was written by an incompatible version of fairgames "
                              f"(checkpoint format {found!r}; this version reads "
                              f"{ENGINE_FORMAT}): resume it with the fairgames version that "
                              "wrote it, or start the run afresh")


# --------------------------------------------------------------------------- python entry
def fit(model: torch.nn.Module, problem: ProblemSpec | str | Problem, splits: DatasetSplits, *,
        protected: str, optimizer: torch.optim.Optimizer | None = None,
        algorithm: str | Mapping[str, Any] | AlgorithmConfig = "proxy_lagrangian",
        trainer: Mapping[str, Any] | TrainerConfig | None = None, seed: int = 0,
        run_dir: str | Path | None = None, tolerance: float | None = None,
        baseline_scores: Mapping[str, torch.Tensor] | None = None) -> RunResult:
    """Train your own ``model`` on a problem with the engine (logging, snapshots, solutions).

    Args:
        model: any ``nn.Module`` from features ``[B, D]`` to scores ``[B]`` (or ``[B, 1]``).
        problem: a :class:`ProblemSpec`, the name of a catalog problem
            (``configs/problem/<name>.yaml``), or a :class:`fairgames.game.Problem`.
        splits: train / validation / test data (moved to the model's device).
        protected: the attribute defining the groups.
        optimizer: the model's torch optimizer (default Adam, lr 0.01).
        algorithm: a preset name, an :class:`AlgorithmConfig`, or the flat `algorithm` keys
            (`{"name": "algorithm1", "theta_steps": 5}`).
        trainer: :class:`TrainerConfig` fields (steps, batch_size, ...).
        seed: seed of the minibatch order and of helper models.
        run_dir: write outputs (results.json, report.md, TensorBoard, checkpoints) here.
        tolerance: overrides the problem's ``tolerance``.
        baseline_scores: ``{split: [N] scores}`` of a churn baseline (else trained).

    Example:
        >>> import torch
        >>> from fairgames.data import make_synthetic
        >>> splits = make_synthetic(n=300, d=3, seed=0)
        >>> result = fit(torch.nn.Linear(3, 1), "demographic_parity", splits, protected="group",
        ...              trainer={"steps": 6, "log_every": 3})
        >>> sorted(result.results["solutions"]["final"]["test"]["constraints"])
        ['ppr_high[0]', 'ppr_high[1]', 'ppr_low[0]', 'ppr_low[1]']
    """
    algorithm, trainer = _fit_configs(protected, algorithm, trainer, seed)
    config = {"algorithm": algorithm.to_mapping(), "trainer": asdict(trainer), "seed": seed}
    device = next(model.parameters()).device
    if isinstance(problem, str):
        problem = load_problem(problem)
    if isinstance(problem, ProblemSpec) and tolerance is not None:
        problem = dataclasses.replace(problem, tolerance=tolerance)
    config["problem"] = (asdict(problem) if isinstance(problem, ProblemSpec)
                         else {"name": "custom", "objective": str(problem.objective)})
    config["data"] = {"name": splits.metadata.get("name", "custom"), "protected": protected}
    return _execute(RunInputs(
        model=_user_model(model, optimizer, fused=trainer.compile), spec=problem, splits=splits,
        protected=protected, algorithm=algorithm, trainer=trainer, seed=seed, device=device,
        run_dir=Path(run_dir) if run_dir is not None else None, config=clean_numbers(config),
        baseline=BaselineSource(scores=baseline_scores)))


def _fit_configs(protected: str, algorithm: str | Mapping[str, Any] | AlgorithmConfig,
                 trainer: Mapping[str, Any] | TrainerConfig | None, seed: int
                 ) -> tuple[AlgorithmConfig, TrainerConfig]:
    """``fit``'s algorithm and trainer as validated configs (a trainer mapping defaults to no
    progress bar and no periodic checkpoints; the algorithm's settings are completed with
    their defaults)."""
    if isinstance(algorithm, str):
        algorithm = AlgorithmConfig(name=algorithm)
    elif isinstance(algorithm, Mapping):
        algorithm = AlgorithmConfig.from_mapping(algorithm)
    if trainer is None:
        trainer = TrainerConfig()
    elif isinstance(trainer, Mapping):
        trainer = TrainerConfig(**{"progress": False, "checkpoint_every": 0, **trainer})
    structured = OmegaConf.structured(TrainConfig(
        data={"name": "custom", "protected": protected}, trainer=trainer, seed=seed))
    with open_dict(structured.algorithm):    # an unknown key is named by validate()
        structured.algorithm.merge_with(algorithm.to_mapping())
    structured.problem.name = "custom"
    structured.problem.objective = "error()"
    validate(structured)
    _one_job(trainer.tune)
    return (AlgorithmConfig.from_mapping(OmegaConf.to_container(structured.algorithm)),
            trainer)


def _one_job(tune: str | None) -> None:
    # A tuned run is a sweep of Hydra jobs: only the Hydra app can launch them.
    if tune is not None:
        raise ConfigError(f"trainer.tune={tune!r} sweeps runs from the command line "
                          "(python scripts/train.py ... trainer.tune=validation); run() and "
                          "fit() train one job: leave trainer.tune=null")


def _user_model(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *,
                fused: bool = False) -> ModelRecipe:
    """The recipe of ``fit``: the user's module (and optimizer; ``None``: Adam, ``fused``
    under ``trainer.compile``) first, then fresh copies of its initial state (with a fresh
    optimizer of the same kind) for the helper models."""
    initial = copy.deepcopy(model)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, fused=fused or None)
    opt_cls, opt_defaults = type(optimizer), dict(optimizer.defaults)
    first = [True]

    def model_factory() -> torch.nn.Module:
        if first[0]:
            first[0] = False
            return model
        return copy.deepcopy(initial)

    def opt_factory(params: Any) -> torch.optim.Optimizer:
        params = list(params)
        own = list(model.parameters())
        if len(params) == len(own) and all(a is b for a, b in zip(params, own, strict=True)):
            return optimizer  # type: ignore[return-value]
        return opt_cls(params, **opt_defaults)

    return ModelRecipe(model_factory, opt_factory, first_is_main=True)


# --------------------------------------------------------------------------- helpers
def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU.

    Example:
        >>> resolve_device("cpu"), resolve_device("auto").type in ("cpu", "cuda")
        (device(type='cpu'), True)
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# The config's optimizer names (OPTIMIZERS) for θ; the λ-player's are its own config key's
# (fairgames.game.players.MULTIPLIER_OPTIMIZERS).
TORCH_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
    "adagrad": torch.optim.Adagrad}
# those with a step counter, which torch's fused kernels keep on the device
FUSED_OPTIMIZERS = ("adam", "adamw", "adagrad")


def optimizer_factory(cfg: OptimizerConfig, *, fused: bool = False) -> OptimizerFactory:
    """A function ``params -> torch optimizer`` for an optimizer config; ``fused``: Adam,
    AdamW and Adagrad on torch's fused kernel (the same update, with the step count on the
    device: what a captured step, ``trainer.compile``, needs).

    Example:
        >>> import torch
        >>> make = optimizer_factory(OptimizerConfig(name="sgd", lr=0.1, momentum=0.9))
        >>> opt = make(torch.nn.Linear(2, 1).parameters())
        >>> type(opt).__name__, opt.defaults["momentum"]
        ('SGD', 0.9)
    """
    def make(params: Any) -> torch.optim.Optimizer:
        if cfg.name not in TORCH_OPTIMIZERS:
            raise ConfigError(f"optimizer.name={cfg.name!r}: unknown optimizer")
        extra = {"momentum": cfg.momentum} if cfg.name == "sgd" else {}
        if fused and cfg.name in FUSED_OPTIMIZERS:
            extra["fused"] = True
        return TORCH_OPTIMIZERS[cfg.name](params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                          **extra)
    return make


def _spec_from_config(problem_cfg: Mapping[str, Any]) -> ProblemSpec:
    keep = {f.name for f in fields(ProblemSpec)}
    return ProblemSpec(**{k: v for k, v in problem_cfg.items() if k in keep})


def _total_steps(trainer: TrainerConfig, n_train: int, default: int) -> int:
    """``trainer.steps``, ``default`` when it is ``None`` (the problem's family), or the steps
    of ``trainer.epochs``."""
    if trainer.epochs is None:
        return default if trainer.steps is None else int(trainer.steps)
    per_epoch = 1 if trainer.batch_size is None else math.ceil(n_train / trainer.batch_size)
    return max(1, math.ceil(trainer.epochs * per_epoch))


def _game_data(trainer: TrainerConfig, splits: DatasetSplits,
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


def _diff_config(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += _diff_config(a, b, path + ".")
        elif a != b and path not in RESUME_FREE:
            out.append(f"{path}: {a!r} -> {b!r}")
    return out


# --------------------------------------------------------------------------- the pipeline
# load → helpers → problem → game → train → solutions and reports; each step takes and
# returns the typed records below.
@dataclass(frozen=True)
class ModelRecipe:
    """How a run makes its models: the main one and the helpers (unconstrained, baseline).

    Attributes:
        factory: a fresh model per call (seeded, so helpers start where the main model does).
        optimizer: a torch optimizer over the given parameters.
        grad_clip: clip the main model's gradient norm (``None``: off).
        config: the model config saved beside the solutions (``None`` for ``fit``'s modules).
        first_is_main: the factory's first call is the main model (``fit`` hands over the
            user's module, so it is drawn before any helper).

    Example:
        >>> import torch
        >>> recipe = ModelRecipe(lambda: torch.nn.Linear(2, 1),
        ...                      optimizer_factory(OptimizerConfig(name="sgd")))
        >>> type(recipe.optimizer(recipe.factory().parameters())).__name__
        'SGD'
    """

    factory: ModelFactory
    optimizer: OptimizerFactory
    grad_clip: float | None = None
    config: dict[str, Any] | None = None
    first_is_main: bool = False


@dataclass(frozen=True)
class BaselineSource:
    """A churn problem's baseline: given ``scores`` (``{split: [N]}``), else an earlier run's
    model at ``path``, else one trained on a seeded ``fraction`` of the training rows.

    Example:
        >>> BaselineSource().fraction, BaselineSource(path="runs/x").path
        (0.25, 'runs/x')
    """

    path: str | None = None
    fraction: float = 0.25
    scores: Mapping[str, torch.Tensor] | None = None


@dataclass(frozen=True)
class RunInputs:
    """What both entry points (:func:`run`, :func:`fit`) hand the pipeline.

    ``config`` is the run's config as recorded in ``results.json`` and in checkpoints (a
    resumed run must match it); ``run_dir`` ``None`` writes nothing; ``checkpoint``: the
    ``(path, state)`` a resume continues, when already read (else ``trainer.resume`` is read).

    Example:
        >>> from fairgames.data import make_synthetic
        >>> inputs = RunInputs(ModelRecipe(lambda: torch.nn.Linear(3, 1), torch.optim.Adam),
        ...                    load_problem("error"), make_synthetic(n=300, d=3, seed=0),
        ...                    "group", AlgorithmConfig(), TrainerConfig(steps=2, progress=False),
        ...                    seed=0, device=torch.device("cpu"), run_dir=None, config={})
        >>> _execute(inputs).results["training"]["steps"]
        2
    """

    model: ModelRecipe
    spec: ProblemSpec | Problem
    splits: DatasetSplits
    protected: str
    algorithm: AlgorithmConfig
    trainer: TrainerConfig
    seed: int
    device: torch.device
    run_dir: Path | None
    config: dict[str, Any]
    baseline: BaselineSource = BaselineSource()
    checkpoint: tuple[Path, dict[str, Any]] | None = None
    robust: RobustConfig | None = None
    parallel: DataParallel | None = None    # trainer.distributed: this rank (writes if 0)


@dataclass
class RunContext:
    """The loaded run: inputs, the splits on the device, the helper models' step count (over
    the whole training split), the checkpoint being resumed (or ``None``), the start time,
    the main model when drawn first, the resumed checkpoint's file, and ``extras`` for
    :attr:`RunResult.extras`."""

    inputs: RunInputs
    splits: DatasetSplits
    steps: int
    checkpoint: dict[str, Any] | None
    started: float
    main_model: torch.nn.Module | None
    checkpoint_path: Path | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    default_steps: int = 0     # trainer.steps=null's value for this problem (default_steps)


@dataclass
class Helpers:
    """What the helper models give the problem: ``unconstrained_<metric>`` values (and their
    ``results.json`` record), and the churn baseline's scores per split (and its record)."""

    values: dict[str, float]
    unconstrained: dict[str, Any] | None
    baselines: dict[str, torch.Tensor] | None
    baseline_info: dict[str, Any] | None


@dataclass
class RunProblem:
    """The compiled problem, its objective and constraints, and the statements for
    ``report.md``."""

    problem: Problem
    objective: Any
    constraints: list[Any]
    statements: dict[str, Any]


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


def _execute(inputs: RunInputs) -> RunResult:
    """Load, train the helpers, compile the problem, play the game, evaluate and report."""
    if inputs.algorithm.name == REDUCTION:
        return _execute_reduction(inputs)
    if inputs.robust is not None and inputs.robust.name == IDEAL:
        return _execute_ideal(inputs)
    ctx = _load(inputs)
    require_training_subsets(inputs.spec, ctx.splits.train, inputs.protected,
                             inputs.trainer.eval_chunk)
    helpers = _helpers(ctx)
    built = _compile_problem(ctx, helpers.values)
    game = _make_game(ctx, helpers, built)
    try:
        if not _play(ctx, game):
            return RunResult(inputs.run_dir, None, game.model, game.engine, stopped=True,
                             extras=ctx.extras)
        return _report(ctx, helpers, built, game)
    finally:
        game.logger.close()


def _load(inputs: RunInputs) -> RunContext:
    """The splits on the device, the run directory, and the checkpoint a resume continues
    (refused when written with another config)."""
    started = time.perf_counter()
    splits = inputs.splits.to(inputs.device)
    train, protected, run_dir = splits.train, inputs.protected, inputs.run_dir
    if protected not in train.groups:
        raise ConfigError(f"data.protected={protected!r}: the data has {sorted(train.groups)}")
    found = (inputs.checkpoint if inputs.checkpoint is not None
             else _read_checkpoint(inputs.trainer.resume, run_dir))
    stated = statements(inputs.spec, train, protected)
    default = default_steps(*stated)
    inputs = _family_game(inputs, stated, found)
    steps = _total_steps(inputs.trainer, len(train), default)
    if run_dir is not None:
        ensure_writable(run_dir)
        write_preprocessing(run_dir, splits)   # own table data: new rows need its encoders
        write_run_record(run_dir, splits, protected)   # run.json: format version, for load_run
    ckpt_path, ckpt = found if found is not None else (None, None)
    if ckpt is not None:
        config = inputs.config
        if _before_family_games(found):     # the key it lacks did not change its game
            config = {**config, "algorithm": {k: v for k, v in config["algorithm"].items()
                                              if k != "family_game"}}
        diffs = _diff_config(ckpt["run"]["config"], config)
        if diffs:
            raise ConfigError("trainer.resume: the checkpoint was written with another config:"
                              "\n  " + "\n  ".join(diffs))
    main_model = inputs.model.factory() if inputs.model.first_is_main else None
    return RunContext(inputs, splits, steps, ckpt, started, main_model, ckpt_path,
                      default_steps=default)


def _family_game(inputs: RunInputs, stated: tuple[Any, list[Any]],
                 checkpoint: tuple[Path, dict[str, Any]] | None) -> RunInputs:
    """``inputs`` with the problem family's game where the config leaves the default preset
    at its defaults (:func:`~fairgames.train.config.family_game.family_algorithm`), recorded as the
    run's ``algorithm`` config. A held-out constraint split keeps the named preset (the family's
    best-response θ-player evaluates its own batches), and so does a resumed checkpoint
    written before families had their own game."""
    if inputs.trainer.constraint_split != "train" or _before_family_games(checkpoint):
        return inputs
    algorithm = family_algorithm(inputs.algorithm, *stated)
    if algorithm is inputs.algorithm:
        return inputs
    return dataclasses.replace(inputs, algorithm=algorithm,
                               config={**inputs.config, "algorithm": algorithm.to_mapping()})


def _before_family_games(checkpoint: tuple[Path, dict[str, Any]] | None) -> bool:
    """A resumed checkpoint written before problem families had their own game (its config
    has no ``algorithm.family_game``): it played the preset its config names."""
    return checkpoint is not None and "family_game" not in (
        checkpoint[1]["run"]["config"].get("algorithm") or {})


def _helpers(ctx: RunContext) -> Helpers:
    """Helper models: the unconstrained metrics and the churn baseline the problem reads."""
    inputs, spec = ctx.inputs, ctx.inputs.spec
    helpers = Helpers({}, None, None, None)
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
        return load_baseline(source.path, inputs.device), {"source": str(source.path)}
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


def _compile_problem(ctx: RunContext, values: Mapping[str, float]) -> RunProblem:
    """The game's :class:`Problem` (a spec compiled against the training groups, or the one
    given) and the statements ``report.md`` quotes."""
    spec, algorithm, train = ctx.inputs.spec, ctx.inputs.algorithm, ctx.splits.train
    protected = ctx.inputs.protected
    if isinstance(spec, ProblemSpec):
        # a crossed attribute's UNSEEN value (cells without training rows) is not constrained
        built = spec.build(protected, constrained_values(train.group_names), values,
                           constrained_counts(train, protected), label_kind=train.label_kind)
        objective, constraints = built.objective, built.constraints
        surrogate = _surrogate(algorithm, objective, constraints)
        problem = Problem(objective, constraints, surrogate=surrogate,
                          objective_surrogate=_objective_surrogate(
                              algorithm, spec.objective_surrogate, objective, surrogate.scale),
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


def _objective_surrogate(algorithm: AlgorithmConfig, problem_default: str | None,
                         objective: Any, scale: float) -> Surrogate | None:
    """``algorithm.objective_surrogate`` at the surrogate's ``scale``: null takes the
    problem's ``objective_surrogate`` (none where the algorithm is the paper-003 reduction,
    which fits the exact Lagrangian), ``none`` none of its own; an objective it cannot bound
    (:func:`objective_surrogate_for`) is a config error naming the key that asked."""
    kind, key = algorithm.objective_surrogate, "algorithm.objective_surrogate"
    if kind is None and algorithm.name != REDUCTION:
        kind, key = problem_default, "problem.objective_surrogate"
    if kind in (None, "none"):
        return None
    try:
        return objective_surrogate_for(Surrogate(kind, scale), objective)
    except ValueError as e:
        raise ConfigError(f"{key}={kind}: {e}") from e


def _players(ctx: RunContext, built: RunProblem) -> tuple[torch.nn.Module, ConstrainedOptimizer]:
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
        robust = robust_players(ctx.inputs.robust, ctx.splits, ctx.inputs.protected)
        copt = ConstrainedOptimizer(built.problem, opt, **arguments, players=robust,
                                    process_group="default" if ctx.inputs.parallel else None)
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


def _make_game(ctx: RunContext, helpers: Helpers, built: RunProblem) -> Game:
    """Players, logger, the engine's data (holdout rows recorded) and the engine, resumed
    from the checkpoint if any."""
    inputs, ckpt = ctx.inputs, ctx.checkpoint
    trainer, run_dir = inputs.trainer, inputs.run_dir
    model, copt = _players(ctx, built)
    logger = RunLogger(run_dir, enabled=trainer.tensorboard and run_dir is not None,
                       purge_step=(int(ckpt["engine"]["step"]) + 1) if ckpt else None)
    base, unc = ctx.extras.get("baseline_model"), ctx.extras.get("unconstrained_model")
    run_state = {"config": inputs.config, "unconstrained": helpers.values,
                 "baseline_state": base.state_dict() if base is not None else None,
                 "unconstrained_state": unc.state_dict() if unc is not None else None}

    def add_run_state(state: dict[str, Any]) -> None:
        state["run"] = dict(run_state)

    data, holdout_rows = _game_data(trainer, ctx.splits, helpers.baselines, inputs.protected,
                                    inputs.seed)
    rows_file = _write_holdout_rows(run_dir, trainer, holdout_rows)
    # trainer.epochs counts passes over θ's own rows (fewer under constraint_split=holdout).
    steps = _total_steps(trainer, len(data.train), ctx.default_steps)
    engine = Engine(
        model, copt, data, steps=steps, grad_clip=inputs.model.grad_clip,
        batches=BatchSettings(size=trainer.batch_size, balanced=trainer.balanced_batches,
                              seed=inputs.seed),
        logging=LogSettings(every=trainer.log_every, logger=logger, progress=trainer.progress
                            and (inputs.parallel is None or inputs.parallel.writes),
                            extra=robust_log(inputs.robust, built.problem,
                                             _evaluator(ctx, built, model), ctx.splits,
                                             inputs.protected, trainer.eval_chunk)),
        snapshots=SnapshotSettings(every=trainer.snapshot_every,
                                   max_kept=trainer.max_snapshots,
                                   strategy=trainer.snapshot_strategy,
                                   offset=trainer.snapshot_offset,
                                   # robust.select=played: the adversary's p̃ at those steps
                                   extra=(PlayedState(copt.player("dro"))
                                          if inputs.robust is not None
                                          and inputs.robust.select == "played" else None)),
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


def _early_stop(ctx: RunContext, helpers: Helpers, built: RunProblem,
                model: torch.nn.Module) -> EarlyStop | None:
    """``trainer.early_stop``'s check (``None``: off, and why in ``ctx.extras``). ``auto``
    turns it on where the recommendation is ``auto``'s, the run is one process and the
    candidates' train values are exact from integer counts (the check then costs
    milliseconds)."""
    trainer = ctx.inputs.trainer
    settings = early_stop_mapping(trainer.early_stop)
    evaluator = _evaluator(ctx, built, model)
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


def _report(ctx: RunContext, helpers: Helpers, built: RunProblem, game: Game) -> RunResult:
    """Evaluate the game's solutions (the recommended one too), validate ``results.json``
    and write the outputs."""
    inputs, trainer = ctx.inputs, ctx.inputs.trainer
    evaluator = _evaluator(ctx, built, game.model)
    unc = ctx.extras.get("unconstrained_model")
    candidates = score_candidates(game.engine, ctx.splits, helpers.baselines, trainer,
                                  {"unconstrained model": unc} if unc is not None else None)

    def training(choice: Mapping[str, Any]) -> dict[str, Any]:
        return _training_record(ctx, helpers, built, game, choice)

    def write(run_dir: Path, out: dict[str, Any], solutions: Mapping[str, Any]) -> None:
        write_outputs(run_dir, out, built.statements, game.engine, solutions,
                      inputs.model.config, game.copt, game.logger, trainer)

    out = _finish(ctx, helpers.baselines, built, evaluator, candidates, training, write,
                  played_steps(game.engine, game.copt))
    return RunResult(inputs.run_dir, out, game.model, game.engine, extras=ctx.extras)


def played_steps(engine: Engine, copt: ConstrainedOptimizer) -> dict[int, torch.Tensor] | None:
    """``robust.select=played``: the adversary's ``p̃`` by training step, at every kept
    snapshot and at the final step (``None`` when the run does not record them)."""
    rec = engine.extra_snapshots
    if rec is None:
        return None
    if rec.steps != engine.snapshots.steps:
        raise RuntimeError(f"the adversary's snapshots (steps {rec.steps}) are not the "
                           f"model's ({engine.snapshots.steps})")
    played = dict(zip(rec.steps, rec.stacked()["p"], strict=True)) if len(rec) else {}
    played[engine.step] = copt.player("dro").p.detach().clone()
    return played


def _evaluator(ctx: RunContext, built: RunProblem, model: torch.nn.Module
               ) -> SolutionEvaluator:
    inputs = ctx.inputs
    return SolutionEvaluator(built.objective, built.constraints, inputs.protected,
                             inputs.trainer.eval_chunk, grid=_grid(inputs.spec),
                             decision=decision_threshold(model))


def _finish(ctx: RunContext, baselines: Mapping[str, torch.Tensor] | None, built: RunProblem,
            evaluator: SolutionEvaluator, candidates: Candidates,
            training: Callable[[Mapping[str, Any]], dict[str, Any]],
            write: Callable[[Path, dict[str, Any], Mapping[str, Any]], None],
            played: dict[int, torch.Tensor] | None = None) -> dict[str, Any]:
    """The candidates' solutions and the recommended one evaluated, the constraints'
    intervals and the verdict, ``results.json`` validated and (with a run directory)
    written by ``write``; returns ``results.json``'s content."""
    inputs, splits, constraints = ctx.inputs, ctx.splits, built.constraints
    trainer, device = inputs.trainer, inputs.device
    # robust.select: the robust constraint values choose (paper 004's best iterate by (3)/(7))
    selector = robust_selector(inputs.robust, built.problem, splits, inputs.protected,
                               inputs.seed, played)
    results, choice, solutions = evaluate_solutions(candidates, evaluator, trainer, selector)
    (results["recommended"], choice["recommended"],
     solutions["recommended"]) = recommend(candidates, evaluator, trainer,
                                           (results, choice, solutions), selector)
    ctx.extras["solutions"] = solutions
    record = training(choice)
    started = time.perf_counter()
    intervals = (constraint_intervals(constraints, solutions, splits, inputs.protected,
                                      baselines, resamples=trainer.bootstrap, seed=inputs.seed,
                                      chunk=trainer.eval_chunk)
                 if trainer.bootstrap and constraints else {})
    attach_intervals(results, intervals)
    out = clean_numbers({"schema_version": SCHEMA_VERSION, "config": inputs.config,
                         "env": environment(device), "solutions": results,
                         "training": record})
    out["verdict"] = {**run_verdict(out, {c.name: c.sense for c in constraints},
                                    VERDICT_SOLUTION),
                      "resamples": trainer.bootstrap,
                      "seconds": time.perf_counter() - started}
    robust = robust_report(inputs.robust, built.problem, evaluator, solutions["recommended"],
                           splits, inputs.protected, trainer.eval_chunk)
    if robust is not None:        # paper 004: true / noisy / robust violations per split
        robust["selection"] = (selector.record() if selector is not None else
                               {"rule": "noisy", "samples": None, "seed": None})
        out["robust"] = clean_numbers(robust)
    if splits.metadata.get("crossed"):  # group_cross: cells kept, dropped, empty per split
        out["crossed_groups"] = splits.metadata["crossed"]
    validate_results(out)
    if inputs.run_dir is not None:
        write(inputs.run_dir, out, solutions)
    return out


# ----------------------------------------------------------------------- algorithm=reduction
def _execute_reduction(inputs: RunInputs) -> RunResult:
    """Paper 003's reduction (:mod:`fairgames.fair_regression.method`) in place of the game: the
    same data, problem, evaluation and outputs, its iterates as the candidates."""
    ctx = _load(inputs)
    spec, trainer, train = inputs.spec, inputs.trainer, ctx.splits.train
    require_training_subsets(spec, train, inputs.protected, trainer.eval_chunk)
    if not isinstance(spec, ProblemSpec) or spec.reduction is None:
        name = spec.name if isinstance(spec, ProblemSpec) else "custom"
        raise ConfigError(f"algorithm=reduction plays paper 003's problems, those that name "
                          f"their game (reduction: sp or bgl: problem=sp_regression, "
                          f"problem=bounded_group_loss); problem={name} names none: pick one "
                          "of those or another algorithm")
    built = _compile_problem(ctx, {})
    config = reduction_settings(inputs.algorithm.to_mapping(), game=spec.reduction,
                                tolerance=float(spec.tolerance or 0.0),
                                label_kind=train.label_kind, grid_size=spec.grid_size,
                                iterations=trainer.steps, check_every=trainer.log_every,
                                seed=inputs.seed)
    try:
        result = play_reduction(inputs.model.factory, train, inputs.protected, config)
    except ValueError as e:      # the sample's checks: targets outside [0, 1], NaN features
        raise ConfigError(f"algorithm=reduction: {e}") from e
    ctx.extras["reduction"] = result
    record = reduction_record(result, config)
    names = row_names(spec.reduction, train.group_names[inputs.protected],
                      threshold_grid(spec.grid_size))
    candidates = reduction_candidates(result, ctx.splits, spec.grid_size, trainer.eval_chunk)
    evaluator = _evaluator(ctx, built, candidates.model)

    def training(choice: Mapping[str, Any]) -> dict[str, Any]:
        return {"steps": result.iterations, "preset": REDUCTION,
                "multipliers": dict(zip(names, result.lambda_hat.tolist(), strict=True)),
                "slacks": {}, "likely_infeasible": result.outcome == "infeasible",
                "seconds": time.perf_counter() - ctx.started,
                "snapshots": {"steps": list(result.first_iterations)}, **choice,
                "unconstrained": None, "baseline": None,
                "constraint_data": {"split": "train", "theta_rows": len(train),
                                    "heldout_rows": 0, "rows_file": None},
                "problem": {"constraints": list(built.problem.constraint_names),
                            "multiplier_rows": names, "slacks": []},
                "reduction": record}

    def write(run_dir: Path, out: dict[str, Any], solutions: Mapping[str, Any]) -> None:
        write_files(run_dir, out, built.statements, solutions, inputs.model.config,
                    metadata={"rounded_to_grid": spec.grid_size})
        logger = RunLogger(run_dir, enabled=trainer.tensorboard)
        try:
            log_reduction(logger, result, names, trainer.log_every, spec.reduction)
            log_final(logger, result.iterations, out)
        finally:
            logger.close()
        if trainer.plots:
            plot_reduction(result, run_dir / "dynamics.png", spec.reduction)

    out = _finish(ctx, None, built, evaluator, candidates, training, write)
    return RunResult(inputs.run_dir, out, candidates.model, None, extras=ctx.extras)


# ------------------------------------------------------------ robust=soft_assignments_ideal
def _execute_ideal(inputs: RunInputs) -> RunResult:
    """Paper 004's ideal Algorithms 1/3 (:mod:`fairgames.noisy_groups.ideal`) in place of the
    game: the same data, problem, evaluation and outputs; its uniform mixture of inner
    iterates is the ``stochastic`` solution, recommended unless ``trainer.recommend`` says."""
    trainer = inputs.trainer
    if trainer.recommend == "auto":
        inputs = dataclasses.replace(inputs, trainer=dataclasses.replace(
            trainer, recommend="stochastic"))
    ctx = _load(inputs)
    require_training_subsets(inputs.spec, ctx.splits.train, inputs.protected,
                             trainer.eval_chunk)
    built = _compile_problem(ctx, {})
    model = inputs.model.factory().to(inputs.device)
    settings = ideal_settings(inputs.robust, trainer.steps)
    try:
        ideal = play_ideal(built.problem, model, inputs.model.optimizer(model.parameters()),
                           ctx.splits, inputs.protected, settings)
    except ValueError as e:
        raise ConfigError(f"robust=soft_assignments_ideal: {e}") from e
    candidates = ideal_candidates(ideal, ctx.splits, trainer.eval_chunk)
    evaluator = _evaluator(ctx, built, model)
    record = ideal_record(ideal)

    def training(choice: Mapping[str, Any]) -> dict[str, Any]:
        return {"steps": settings.outer, "preset": IDEAL, "likely_infeasible": False,
                "multipliers": dict(zip(record["rows"], ideal.lam.tolist(), strict=True)),
                "slacks": {}, "seconds": time.perf_counter() - ctx.started,
                "snapshots": {"steps": list(range(1, len(ideal.members) + 1))}, **choice,
                "unconstrained": None, "baseline": None,
                "constraint_data": {"split": "train", "theta_rows": len(ctx.splits.train),
                                    "heldout_rows": 0, "rows_file": None},
                "problem": {"constraints": list(built.problem.constraint_names),
                            "multiplier_rows": record["rows"], "slacks": []},
                "ideal": record}

    def write(run_dir: Path, out: dict[str, Any], solutions: Mapping[str, Any]) -> None:
        write_files(run_dir, out, built.statements, solutions, inputs.model.config)
        logger = RunLogger(run_dir, enabled=trainer.tensorboard)
        try:
            log_final(logger, settings.outer, out)
        finally:
            logger.close()

    out = _finish(ctx, None, built, evaluator, candidates, training, write)
    return RunResult(inputs.run_dir, out, candidates.mixture, None, extras=ctx.extras)


def _grid(spec: ProblemSpec | Problem) -> torch.Tensor | None:
    """The SP grid a problem on predictions in [0, 1] is reported on (KS and grid
    disparities), else ``None``."""
    if isinstance(spec, ProblemSpec) and spec.bounded_predictions():
        return threshold_grid(spec.grid_size)
    return None


def _training_record(ctx: RunContext, helpers: Helpers, built: RunProblem, game: Game,
                     choice: Mapping[str, Any]) -> dict[str, Any]:
    """``results.json``'s ``training`` section: the game's end state and how it was set up."""
    engine, copt, data, problem = game.engine, game.copt, game.data, built.problem
    return {
        "steps": engine.step,
        "preset": copt.preset.name,
        "preset_note": copt.preset_note,       # why the default preset was replaced, if so
        "surrogate": problem.surrogate.kind,
        "objective_surrogate": (problem.objective_surrogate.kind
                                if problem.objective_surrogate is not None else None),
        "temperature": problem.surrogate.scale,
        "multipliers": dict(zip(unique_names(copt.terms.row_names),
                                copt.weights()[1].tolist(), strict=True)),
        "objective_weight": float(copt.weights()[0]),
        "slacks": (dict(zip(unique_names(copt.terms.slack_names),
                            copt.last.slacks.tolist(), strict=True))
                   if copt.last is not None else {}),
        "likely_infeasible": bool(copt.likely_infeasible()),
        "seconds": time.perf_counter() - ctx.started,
        "snapshots": {"steps": list(engine.snapshots.steps)},
        "early_stop": (engine.early_stop.record() if engine.early_stop is not None
                       else ctx.extras.get("early_stop")),
        **choice,
        "unconstrained": helpers.unconstrained,
        "baseline": helpers.baseline_info,
        "constraint_data": {
            "split": ctx.inputs.trainer.constraint_split,
            "theta_rows": len(data.train),
            "heldout_rows": len(data.heldout) if data.heldout is not None else 0,
            "rows_file": game.rows_file},
        "problem": {"constraints": list(problem.constraint_names),
                    "multiplier_rows": unique_names(copt.terms.row_names),
                    "slacks": unique_names(copt.terms.slack_names)},
    }
