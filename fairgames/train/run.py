"""A whole run, as a pipeline of stages read top to bottom: **load** (the splits on the device,
the run directory, a resumed checkpoint: :mod:`.context`) → **helpers** (the helper models
the problem reads: :mod:`.helpers`) → **problem** (compiled against the training groups:
:mod:`.problem`) → **method** (how the run trains: the game, :mod:`.game`, or a method a
family registered on the seam, :mod:`.method`) → **solutions** (final, best iterate,
stochastic and recommended, their intervals and the verdict) → **report** (the run
directory's files: :mod:`.results.finish`).

Two entry points share it:

* :func:`run` takes a composed config (``scripts/train.py``, or Hydra's compose API);
* :func:`fit` takes YOUR ``nn.Module`` (any module mapping ``[B, D]`` features to ``[B]``
  scores), a problem (a :class:`~fairgames.problems.ProblemSpec`, a catalog name, or a ready
  :class:`~fairgames.game.Problem`) and data splits.

A finished run writes ``results.json`` (validated against the shipped schema), ``report.md``,
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
    >>> sorted(result.extras["stage_seconds"])
    ['helpers', 'load', 'method', 'problem', 'report', 'solutions', 'validate']
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from fairgames.data import DatasetSplits
from fairgames.families import load as load_families
from fairgames.game import Problem
from fairgames.models import build_model
from fairgames.problems import ProblemSpec, load_problem

from .config import (
    AlgorithmConfig,
    ConfigError,
    OptimizerConfig,
    TrainConfig,
    TrainerConfig,
    validate,
)
from .config.resume import resumed_config
from .context import (
    BaselineSource,
    Helpers,
    ModelRecipe,
    OptimizerFactory,
    RunContext,
    RunInputs,
    load_context,
    read_checkpoint,
)
from .data import apply_recipe, load_splits, loaded_keys
from .game import GameMethod
from .helpers import model_options, resolve_output, train_helpers
from .loop.engine import Engine
from .loop.parallel import DataParallel, join, shared_run_dir
from .method import family_groups, method_for
from .problem import compile_problem
from .problem import evaluator as run_evaluator
from .results.finish import evaluate_run, write_run
from .results.report import clean_numbers
from .run_dir import claim
from .subsets import require_training_subsets


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
        extras: the run's other products: ``solutions``, the helper models, a method's own
            result, and ``stage_seconds`` (each stage's wall-clock seconds).

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
    validate(cfg)      # also imports the families the config names (a family of your own)
    _one_job(cfg.trainer.tune)
    directory = run_dir if run_dir is not None else cfg.run_dir
    if isinstance(cfg.trainer.resume, str) and Path(cfg.trainer.resume).is_dir():
        directory = cfg.trainer.resume
    directory = Path(directory) if directory is not None else None
    parallel = device = None
    if cfg.trainer.distributed:        # rank 0's directory on every rank; rank 0 writes
        parallel, device = join(resolve_device(cfg.trainer.device))
        directory = shared_run_dir(directory)
    cfg, checkpoint = _resume_config(cfg, directory, overrides)
    inputs = _inputs(cfg, device or resolve_device(cfg.trainer.device), parallel)
    return _execute(dataclasses.replace(
        inputs, run_dir=directory if parallel is None or parallel.writes else None,
        checkpoint=checkpoint, overwrite=bool(cfg.get("overwrite", False))))


def _inputs(cfg: DictConfig, device: torch.device, parallel: DataParallel | None
            ) -> RunInputs:
    """The pipeline's inputs from a composed config: the data loaded (its keys: the command
    line's, else the problem's recipe, else the loader's), the model and optimizer recipe, the
    families' config groups; ``run_dir`` is left to the caller."""
    data_cfg = apply_recipe(OmegaConf.to_container(cfg.data, resolve=True),
                            OmegaConf.to_container(cfg.problem, resolve=True).get("recipe"))
    splits = load_splits(data_cfg, cfg.seed)
    config = {**OmegaConf.to_container(cfg, resolve=True), "data": loaded_keys(data_cfg, splits)}
    input_dim = splits.train.num_features
    problem_cfg = OmegaConf.to_container(cfg.problem, resolve=True)
    spec = _spec_from_config(problem_cfg)
    method = method_for(config)      # raw scores (e.g. the reduction's): deployed as they are
    config["model"] = model_cfg = resolve_output(
        config["model"], spec.bounded_predictions() and not (method and method.raw_scores))
    seed = int(cfg.seed)

    def model_factory() -> torch.nn.Module:
        torch.manual_seed(seed)
        return build_model(**model_options(model_cfg), input_dim=input_dim)

    opt_cfg = OptimizerConfig(**OmegaConf.to_container(cfg.optimizer, resolve=True))
    return RunInputs(
        model=ModelRecipe(model_factory, optimizer_factory(opt_cfg, fused=cfg.trainer.compile),
                          grad_clip=opt_cfg.grad_clip,
                          # build_model's own arguments: the record rebuilds the model
                          config={"input_dim": input_dim, **model_options(model_cfg)}),
        spec=spec, splits=splits, protected=str(config["data"]["protected"]),
        algorithm=AlgorithmConfig.from_mapping(OmegaConf.to_container(cfg.algorithm,
                                                                      resolve=True)),
        trainer=TrainerConfig(**OmegaConf.to_container(cfg.trainer, resolve=True)),
        seed=seed, device=device, run_dir=None, config=config,
        baseline=BaselineSource(path=problem_cfg.get("baseline_path"),
                                fraction=float(problem_cfg.get("baseline_fraction", 0.25))),
        groups={name: group.schema(**OmegaConf.to_container(cfg[name], resolve=True))
                for name, group in family_groups().items() if cfg.get(name) is not None},
        parallel=parallel)


def _resume_config(cfg: DictConfig, directory: Path | None,
                   overrides: Sequence[str] | None
                   ) -> tuple[DictConfig, tuple[Path, dict[str, Any]] | None]:
    """With the command line's ``overrides``, a resumed run's config is its checkpoint's
    (with the explicit overrides a resume may change); else ``cfg`` as it is. Also the
    checkpoint, read once."""
    if overrides is None or cfg.trainer.resume is False:
        return cfg, None
    checkpoint = read_checkpoint(cfg.trainer.resume, directory)
    assert checkpoint is not None
    given = OmegaConf.to_container(cfg, resolve=True)
    # the stored data keys have the problem's recipe applied: compare like with like
    given["data"] = apply_recipe(given["data"], (given.get("problem") or {}).get("recipe"))
    merged = OmegaConf.create(resumed_config(checkpoint[1]["run"]["config"], given, overrides))
    validate(merged)   # also imports the families the stored run named
    return merged, checkpoint


# --------------------------------------------------------------------------- python entry
def fit(model: torch.nn.Module, problem: ProblemSpec | str | Problem, splits: DatasetSplits, *,
        protected: str, optimizer: torch.optim.Optimizer | None = None,
        algorithm: str | Mapping[str, Any] | AlgorithmConfig = "proxy_lagrangian",
        trainer: Mapping[str, Any] | TrainerConfig | None = None, seed: int = 0,
        run_dir: str | Path | None = None, tolerance: float | None = None,
        baseline_scores: Mapping[str, torch.Tensor] | None = None,
        overwrite: bool = False) -> RunResult:
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
            A directory holding another run is refused unless ``overwrite``
            (:mod:`fairgames.train.run_dir`).
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
        baseline=BaselineSource(scores=baseline_scores), overwrite=overwrite))


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


# --------------------------------------------------------------------------- recipes
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


# --------------------------------------------------------------------------- the pipeline
def _execute(inputs: RunInputs) -> RunResult:
    """The pipeline, read top to bottom: load → helpers → problem → method → solutions →
    report. The method is the one the config names (:func:`~fairgames.train.method.method_for`),
    else the game."""
    with claim(inputs.run_dir):     # the run directory's lock, held until the outputs are out
        return _pipeline(inputs)


def _pipeline(inputs: RunInputs) -> RunResult:
    method = method_for(inputs.config) or GameMethod()
    clock = _StageClock()
    ctx = load_context(method.prepare(inputs))
    clock.ctx = ctx
    require_training_subsets(ctx.inputs.spec, ctx.splits.train, ctx.inputs.protected,
                             ctx.inputs.trainer.eval_chunk)
    with clock("helpers"):
        helpers = train_helpers(ctx) if method.helpers else Helpers()
    with clock("problem"):
        built = compile_problem(ctx, helpers.values, surrogates=method.surrogates)
    with clock("method"):
        trained = method.train(ctx, built, helpers)
    try:
        if trained.stopped:
            return RunResult(ctx.inputs.run_dir, None, trained.model, trained.engine,
                             stopped=True, extras=ctx.extras)
        assert trained.candidates is not None, f"{type(method).__name__} returned no candidates"
        # a signal after the last step stops at once, with a checkpoint there (the game's)
        with trained.engine.finishing() if trained.engine is not None \
                else contextlib.nullcontext():
            evaluator = run_evaluator(ctx, built, trained.candidates.model)
            with clock("solutions"):
                results = evaluate_run(ctx, built, trained, evaluator, helpers.baselines)
            with clock("report"):
                write_run(ctx, built, trained, results)
        return RunResult(ctx.inputs.run_dir, results, trained.model, trained.engine,
                         extras=ctx.extras)
    finally:
        if trained.logger is not None:
            trained.logger.close()


class _StageClock:
    """Each stage's wall-clock seconds, in ``ctx.extras["stage_seconds"]`` (the load stage's:
    from the context's start)."""

    def __init__(self) -> None:
        self.ctx: RunContext | None = None

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        assert self.ctx is not None
        seconds = self.ctx.extras.setdefault("stage_seconds", {})
        seconds.setdefault("load", time.perf_counter() - self.ctx.started)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds[stage] = time.perf_counter() - start


# The paper families plug into the pipeline through the seam (fairgames.train.method): the
# package's own and the installed ones, now (fairgames.families.load says when it waits).
load_families(importer=__name__)
