"""The run's typed records and its first stage, load.

Both entry points (:func:`~fairgames.train.run.run`, :func:`~fairgames.train.run.fit`) hand
the pipeline a :class:`RunInputs`; :func:`load_context` turns it into the :class:`RunContext`
every later stage reads (the splits on the device, the run directory made ready, the
checkpoint a resume continues, checked against the config); the helpers stage gives
:class:`Helpers`, the problem stage a :class:`RunProblem`.

Example:
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.problems import load_problem
    >>> from .config import AlgorithmConfig, TrainerConfig
    >>> inputs = RunInputs(ModelRecipe(lambda: torch.nn.Linear(3, 1), torch.optim.Adam),
    ...                    load_problem("error"), make_synthetic(n=300, d=3, seed=0), "group",
    ...                    AlgorithmConfig(), TrainerConfig(steps=2, progress=False), seed=0,
    ...                    device=torch.device("cpu"), run_dir=None, config={})
    >>> ctx = load_context(inputs)
    >>> ctx.steps, ctx.checkpoint is None, len(ctx.splits.train)
    (2, True, 180)
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fairgames.data import DatasetSplits
from fairgames.game import Problem, default_steps
from fairgames.problems import ProblemSpec

from .config import AlgorithmConfig, ConfigError, TrainerConfig
from .config.family_game import family_algorithm
from .config.resume import RESUME_FREE
from .data import write_preprocessing
from .deploy.load import write_run_record
from .loop.checkpoint import CheckpointError, ensure_writable, find_checkpoint, read_latest
from .loop.engine import ENGINE_FORMAT
from .loop.parallel import DataParallel
from .run_dir import check_free
from .subsets import statements

ModelFactory = Callable[[], torch.nn.Module]
OptimizerFactory = Callable[..., torch.optim.Optimizer]


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
        >>> recipe = ModelRecipe(lambda: torch.nn.Linear(2, 1), torch.optim.SGD)
        >>> type(recipe.optimizer(recipe.factory().parameters(), lr=0.1)).__name__
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
    """What both entry points hand the pipeline.

    ``config`` is the run's config as recorded in ``results.json`` and in checkpoints (a
    resumed run must match it); ``run_dir`` ``None`` writes nothing; ``checkpoint``: the
    ``(path, state)`` a resume continues, when already read (else ``trainer.resume`` is read);
    ``groups``: the settings of the families' config groups, by group name (e.g. ``robust``,
    :func:`fairgames.train.method.register_group`); ``parallel``: this rank of a
    ``trainer.distributed`` run (it writes if it is rank 0); ``overwrite``: a new run may
    replace another run's files in ``run_dir`` (:mod:`fairgames.train.run_dir`).
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
    groups: Mapping[str, Any] = field(default_factory=dict)
    parallel: DataParallel | None = None
    overwrite: bool = False


@dataclass
class RunContext:
    """The loaded run: inputs, the splits on the device, the helper models' step count (over
    the whole training split), the checkpoint being resumed (or ``None``), the start time,
    the main model when drawn first, the resumed checkpoint's file, ``extras`` for
    :attr:`~fairgames.train.run.RunResult.extras`, and the problem's default step count
    (``trainer.steps=null``)."""

    inputs: RunInputs
    splits: DatasetSplits
    steps: int
    checkpoint: dict[str, Any] | None
    started: float
    main_model: torch.nn.Module | None
    checkpoint_path: Path | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    default_steps: int = 0


@dataclass
class Helpers:
    """What the helper models give the problem: ``unconstrained_<metric>`` values (and their
    ``results.json`` record), and the churn baseline's scores per split (and its record)."""

    values: dict[str, float] = field(default_factory=dict)
    unconstrained: dict[str, Any] | None = None
    baselines: dict[str, torch.Tensor] | None = None
    baseline_info: dict[str, Any] | None = None


@dataclass
class RunProblem:
    """The compiled problem, its objective and constraints, and the statements for
    ``report.md``."""

    problem: Problem
    objective: Any
    constraints: list[Any]
    statements: dict[str, Any]


def total_steps(trainer: TrainerConfig, n_train: int, default: int) -> int:
    """``trainer.steps``, ``default`` when it is ``None`` (the problem's family), or the steps
    of ``trainer.epochs``.

    Example:
        >>> total_steps(TrainerConfig(epochs=2, batch_size=100), 250, 500)
        6
    """
    if trainer.epochs is None:
        return default if trainer.steps is None else int(trainer.steps)
    per_epoch = 1 if trainer.batch_size is None else math.ceil(n_train / trainer.batch_size)
    return max(1, math.ceil(trainer.epochs * per_epoch))


# --------------------------------------------------------------------------- the load stage
def load_context(inputs: RunInputs) -> RunContext:
    """The splits on the device, the run directory, and the checkpoint a resume continues
    (refused when written with another config)."""
    started = time.perf_counter()
    splits = inputs.splits.to(inputs.device)
    train, protected, run_dir = splits.train, inputs.protected, inputs.run_dir
    if protected not in train.groups:
        raise ConfigError(f"data.protected={protected!r}: the data has {sorted(train.groups)}")
    found = (inputs.checkpoint if inputs.checkpoint is not None
             else read_checkpoint(inputs.trainer.resume, run_dir))
    stated = statements(inputs.spec, train, protected)
    default = default_steps(*stated)
    inputs = _family_game(inputs, stated, found)
    steps = total_steps(inputs.trainer, len(train), default)
    if run_dir is not None:
        # another run's finished outputs or checkpoint are refused (resume, overwrite=true)
        config = inputs.config
        check_free(run_dir, overwrite=inputs.overwrite, resuming=found is not None,
                   differs=lambda stored: diff_config(stored, config))
        ensure_writable(run_dir)
        write_preprocessing(run_dir, splits)   # own table data: new rows need its encoders
        write_run_record(run_dir, splits, protected)   # run.json: format version, for load_run
    ckpt_path, ckpt = found if found is not None else (None, None)
    if ckpt is not None:
        _same_config(found, inputs.config)
    main_model = inputs.model.factory() if inputs.model.first_is_main else None
    return RunContext(inputs, splits, steps, ckpt, started, main_model, ckpt_path,
                      default_steps=default)


def _same_config(checkpoint: tuple[Path, dict[str, Any]], config: Mapping[str, Any]) -> None:
    """Refuse to resume a checkpoint written with another config (keys a resume may change,
    :data:`~fairgames.train.config.resume.RESUME_FREE`, aside)."""
    if _before_family_games(checkpoint):     # the key it lacks did not change its game
        config = {**config, "algorithm": {k: v for k, v in config["algorithm"].items()
                                          if k != "family_game"}}
    diffs = diff_config(checkpoint[1]["run"]["config"], config)
    if diffs:
        raise ConfigError("trainer.resume: the checkpoint was written with another config:"
                          "\n  " + "\n  ".join(diffs))


def diff_config(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``key: old -> new`` for every key whose value differs, a resume's free keys aside.

    Example:
        >>> diff_config({"seed": 0, "trainer": {"steps": 5}}, {"seed": 1, "trainer": {"steps": 9}})
        ['seed: 0 -> 1']
    """
    out = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += diff_config(a, b, path + ".")
        elif a != b and path not in RESUME_FREE:
            out.append(f"{path}: {a!r} -> {b!r}")
    return out


def read_checkpoint(resume: bool | str, run_dir: Path | None
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


def _family_game(inputs: RunInputs, stated: tuple[Any, list[Any]],
                 checkpoint: tuple[Path, dict[str, Any]] | None) -> RunInputs:
    """``inputs`` with the problem family's game where the config leaves the default preset
    at its defaults (:func:`~fairgames.train.config.family_game.family_algorithm`), recorded
    as the run's ``algorithm`` config. A held-out constraint split keeps the named preset
    (the family's best-response θ-player evaluates its own batches), and so does a resumed
    checkpoint written before families had their own game."""
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
