"""The training config: structured schemas registered with Hydra, and value validation.

``configs/train.yaml`` starts its defaults list with ``train_schema`` (registered here in
Hydra's ConfigStore), so every group file (``problem/``, ``model/``, ``optimizer/``,
``algorithm/``, ``trainer/``) is merged into a typed node: a misspelt key fails at compose
time ("Key 'stepz' not in 'TrainerConfig'"), and a value of the wrong type too. Values are
then checked by :func:`validate`, which lists every problem at once in a
:class:`ConfigError`. The ``data`` group is owned by the data loaders: it is a mapping whose
``name`` picks the loader and whose ``protected`` names the attribute that defines the groups;
its other keys are the loader's keyword arguments (checked against its signature).

Keys every issue and user agrees on: ``data.protected``, ``problem.tolerance``,
``trainer.steps``, ``trainer.batch_size`` (``null`` = full batch), ``trainer.device``
(``auto`` / ``cpu`` / ``cuda``), ``seed``, ``algorithm.multiplier_lr``, ``algorithm.radius``,
``problem.baseline_path``.

Example:
    >>> cfg = OmegaConf.structured(TrainConfig)
    >>> cfg.trainer.device, cfg.algorithm.name
    ('auto', 'proxy_lagrangian')
    >>> try:
    ...     cfg.trainer.stepz = 3
    ... except Exception as e:
    ...     print(str(e).splitlines()[0])
    Key 'stepz' not in 'TrainerConfig'
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fairgames.game import PRESETS
from fairgames.game.players import MULTIPLIER_OPTIMIZERS as _LAMBDA_OPTIMIZERS
from fairgames.game.players import (
    MULTIPLIER_PLAYERS,
    ConfigKey,
    Player,
    watch_strategies,
)
from fairgames.game.presets import ROLES, player_label, registered_config_keys
from fairgames.game.solutions.snapshots import OFFSETS as SNAPSHOT_OFFSETS

from .checks import Checks, key_errors, register_group, register_validator, value_errors
from .errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
OPTIMIZERS = ("sgd", "adam", "adamw", "adagrad")
MULTIPLIER_OPTIMIZERS = tuple(_LAMBDA_OPTIMIZERS)
SPLITS = ("train", "validation", "test")
CONSTRAINT_SPLITS = ("train", "validation", "holdout")
STOCHASTIC = ("uniform", "shrunk")
SNAPSHOT_STRATEGIES = ("reservoir", "uniform_stride")
RECOMMEND = ("auto", "final", "best_iterate", "stochastic")
TUNE_MODES = ("validation",)
# trainer.tune_grid's keys: the step sizes a tuned run sweeps, and the config keys they scale
# (a family adds its own: fairgames.train.method.register_tune_step; tune_step_keys() has all).
TUNE_STEPS = {"lr": "optimizer.lr", "multiplier_lr": "algorithm.multiplier_lr"}




@dataclass
class ProblemConfig:
    """An objective and named constraints in the problem language (see ``docs/problems.md``).

    ``tolerance`` is the value of the name ``tolerance`` in the statements; ``tolerance_kind``
    says whether it is a ``difference`` of rates, a multiplicative ``ratio`` or an absolute
    ``bound``. ``protected_group`` (a value name or code of ``data.protected``; ``null``: the
    least frequent value on the training split) is what ``protected_group`` means.
    ``baseline_path`` is a churn baseline (a ``model.pt`` of an earlier run, or its directory);
    ``null`` trains one on a ``baseline_fraction`` share of the training split.
    ``data_sets`` documents the data sets the problem is meant for (the solved-by-default
    matrix, ``benchmarks/solved_by_default.py``, runs each); it does not restrict ``data``.
    ``recipe`` gives data keys the problem is documented with (e.g. ``paper: "003"``: that
    paper's target, group and split); each applies where the ``data`` config leaves the key
    null (:func:`fairgames.train.data.apply_recipe`). ``grid_size`` is N of the name
    ``thresholds`` (the grid 1/N, ..., 1). ``reduction`` (``sp`` / ``bgl`` / null) names
    the paper-003 game the problem is, which ``algorithm=reduction`` plays.
    ``objective_surrogate`` is the θ surrogate of the objective this problem defaults to
    where ``algorithm.objective_surrogate`` is null (demographic parity: ``logistic``,
    measured in docs/solved_by_default.md); null: the constraints' surrogate.

    Example:
        >>> pc = ProblemConfig(name="f1", objective="1 - fmeasure()")
        >>> pc.tolerance, pc.tolerance_kind, pc.baseline_fraction
        (None, 'none', 0.25)
    """

    name: str = MISSING
    description: str = ""
    objective: str = MISSING
    constraints: Any = field(default_factory=dict)
    tolerance: float | None = None
    tolerance_kind: str = "none"
    protected_group: Any = None
    variables: dict[str, Any] = field(default_factory=dict)
    baseline_path: str | None = None
    baseline_fraction: float = 0.25
    data_sets: list[str] = field(default_factory=list)
    recipe: dict[str, Any] = field(default_factory=dict)
    grid_size: int = 40
    reduction: str | None = None
    objective_surrogate: str | None = None


@dataclass
class ModelConfig:
    """``linear`` (``bias``) or ``mlp`` (``hidden`` widths, ``activation``, ``dropout``).
    ``output``: ``score`` (the raw score), ``unit`` (a sigmoid head: predictions in (0, 1),
    for bounded regression) or ``auto`` (``unit`` where the problem's statements assume
    predictions in [0, 1]: thresholds, ``target_loss``, bounded group losses; else ``score``).
    ``sparse_inputs`` (linear only): ``auto`` multiplies a large mostly-zero full batch through
    its CSR form in training (:mod:`fairgames.models.sparse_inputs`); ``off`` keeps the dense
    kernels bit for bit.

    Example:
        >>> ModelConfig(name="mlp", hidden=[32, 16]).hidden
        [32, 16]
    """

    name: str = "linear"
    bias: bool = True
    hidden: list[int] = field(default_factory=lambda: [64])
    activation: str = "relu"
    dropout: float = 0.0
    output: str = "auto"
    sparse_inputs: str = "auto"


@dataclass
class OptimizerConfig:
    """The θ-player's torch optimizer; ``grad_clip`` clips the gradient norm (null: off).

    Example:
        >>> OptimizerConfig().name, OptimizerConfig().lr
        ('adam', 0.01)
    """

    name: str = "adam"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float | None = None


@dataclass
class AlgorithmConfig:
    """A preset of paper 000 Table 2 (``fairgames.game.PRESETS``, ``algorithm.name``) and the
    settings of its players.

    The keys every preset shares are fields: ``name``; ``multipliers``, a λ strategy in place of
    the preset's; and the problem's ``surrogate`` (the θ-player's stand-in for the 0/1
    indicator; ``auto``: the sigmoid for KLD or ratios on both sides, else the hinge,
    :func:`fairgames.game.default_surrogate`), ``objective_surrogate`` (null: the problem's
    ``problem.objective_surrogate``, else the same; ``none``: the same whatever the problem
    says; a kind: θ's stand-in for an affine objective's rates alone,
    ``Problem(objective_surrogate=)`` — ``logistic`` on the error is the cross-entropy), its
    ``temperature`` (the scale of the margin it reads; null:
    :func:`fairgames.game.default_temperature`, 1 on classifier scores, 0.05 on threshold rates
    of predictions in [0, 1]) and ``ratio_floor``; ``large_game``: above
    :data:`~fairgames.game.SWAP_REGRET_MAX_ROWS` multiplier rows the default preset
    ``proxy_lagrangian`` (its swap-regret λ costs O(rows²) per step) plays ``lagrangian``
    (projected gradient ascent at its own step size and radius, O(rows)) with a
    ``LargeGameWarning`` when ``switch`` (the default), and is kept as named when ``keep``;
    ``family_game``: a problem family with its own game (threshold rates:
    :func:`fairgames.game.default_game`) plays it in place of the default preset left at its
    defaults when ``switch`` (the default), the preset as named when ``keep``
    (:func:`fairgames.train.config.family_game.family_algorithm`).
    Every other ``algorithm.<key>`` is declared
    by a player class (``config_keys``, :class:`fairgames.game.ConfigKey`) and lands in
    ``settings``: ``theta_steps`` (the best-response θ-player of algorithm1, frank_wolfe),
    ``multiplier_lr`` and ``radius`` (κ of ‖λ‖₁ ≤ κ; null: the preset's, else the strategy's),
    ``multiplier_optimizer`` (``sgd``/``adam``/``adagrad`` stepping a gradient-ascent λ-player,
    TFCO's ``constraint_optimizer``), ``slack_lr``, ``psi_steps``. A key is accepted for a
    preset when one of its players (after ``multipliers``) declares it; the Hydra schema of the
    group is :func:`algorithm_schema`.

    Example:
        >>> a = AlgorithmConfig.from_mapping({"name": "lagrangian", "multiplier_lr": 0.1})
        >>> a.name, a.settings, a.surrogate
        ('lagrangian', {'multiplier_lr': 0.1}, 'auto')
        >>> a.to_mapping()["multiplier_lr"]
        0.1
    """

    name: str = "proxy_lagrangian"
    multipliers: str | None = None
    surrogate: str = "auto"
    objective_surrogate: str | None = None
    temperature: float | None = None
    ratio_floor: float = 0.01
    large_game: str = "switch"
    family_game: str = "switch"
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> AlgorithmConfig:
        """From the flat ``algorithm`` group (shared keys, and the players' keys)."""
        shared = {f.name for f in fields(cls)} - {"settings"}
        return cls(**{k: v for k, v in values.items() if k in shared},
                   settings={k: v for k, v in values.items() if k not in shared})

    def to_mapping(self) -> dict[str, Any]:
        """The flat ``algorithm`` group, in the schema's order (the preset, its players' keys,
        the problem's)."""
        return {"name": self.name, "multipliers": self.multipliers, **self.settings,
                "surrogate": self.surrogate, "objective_surrogate": self.objective_surrogate,
                "temperature": self.temperature,
                "ratio_floor": self.ratio_floor, "large_game": self.large_game,
                "family_game": self.family_game}


# algorithm.large_game: the default preset gives way to a linear-cost one above
# SWAP_REGRET_MAX_ROWS rows ("switch"), or is kept as named ("keep")
LARGE_GAME = ("switch", "keep")
# algorithm.family_game: the default preset gives way to the problem family's game
# (fairgames.train.config.family_game) or is kept as named
FAMILY_GAME = ("switch", "keep")
_SCHEMA: dict[tuple[Any, ...], type] = {}


def _algorithm_methods() -> dict[str, Any]:
    """The methods a family registered as ``algorithm`` options (e.g. paper 003's
    ``reduction``), by name."""
    from ..registry import methods

    return methods("algorithm.name")


def method_keys() -> list[tuple[ConfigKey, str]]:
    """The ``algorithm.<key>`` settings the registered methods declare, each with its
    method's name."""
    return [(key, name) for name, m in _algorithm_methods().items() for key in m.config_keys]


def tune_step_keys() -> dict[str, str]:
    """``trainer.tune_grid``'s step sizes (the core's, :data:`TUNE_STEPS`, and the families'),
    each with the config key it scales.

    Example:
        >>> tune_step_keys()["lr"]
        'optimizer.lr'
    """
    from ..registry import tune_steps

    return {**TUNE_STEPS, **{name: key for name, (key, _) in tune_steps().items()}}


def _tune_grid() -> dict[str, list[float]]:
    """``trainer.tune_grid``'s default: θ's and λ's steps 3 × 3, a family's at its defaults."""
    from ..registry import tune_steps

    return {"lr": [0.3, 1.0, 3.0], "multiplier_lr": [0.3, 1.0, 3.0],
            **{name: list(default) for name, (_, default) in tune_steps().items()}}


def algorithm_schema() -> type:
    """The ``algorithm`` group's Hydra schema (a dataclass named ``AlgorithmConfig``): the
    shared keys of :class:`AlgorithmConfig`, every key a registered player class declares
    (``fairgames.game.presets.registered_config_keys``) and every key a registered method
    declares (:attr:`fairgames.train.method.Method.config_keys`), typed and with its default — so
    ``algorithm.<key>=...`` composes for any registered strategy, and a misspelt key fails at
    compose time. Rebuilt when the strategies change.

    Example:
        >>> [f.name for f in fields(algorithm_schema())]    # doctest: +NORMALIZE_WHITESPACE
        ['name', 'multipliers', 'multiplier_optimizer', 'multiplier_lr', 'radius', 'slack_lr',
         'psi_steps', 'theta_steps', 'best_response', 'gap', 'surrogate', 'objective_surrogate',
         'temperature', 'ratio_floor', 'large_game', 'family_game']
    """
    declared = ([key for key, _ in registered_config_keys().values()]
                + [key for key, _ in method_keys()])
    signature = tuple((k.name, k.type, k.default) for k in declared)
    if signature not in _SCHEMA:
        shared = {f.name: f for f in fields(AlgorithmConfig) if f.name != "settings"}
        own = [(k.name, k.type if k.default is not None else k.type | None,
                field(default=k.default)) for k in declared]
        front = [(n, shared[n].type, field(default=shared[n].default))
                 for n in ("name", "multipliers")]
        back = [(n, shared[n].type, field(default=shared[n].default))
                for n in ("surrogate", "objective_surrogate", "temperature", "ratio_floor",
                          "large_game", "family_game")]
        schema = make_dataclass("AlgorithmConfig", [*front, *own, *back])
        schema.__module__ = __name__
        schema.__doc__ = "The ``algorithm`` group's schema (see :func:`algorithm_schema`)."
        _SCHEMA[signature] = schema
    return _SCHEMA[signature]


# trainer.early_stop's keys and defaults (fairgames.train.results.early_stop reads them too)
EARLY_STOP_DEFAULTS: dict[str, Any] = {"enabled": False, "patience": 3, "objective_tol": 0.002,
                                       "best_tol": 0.005}


@dataclass
class TrainerConfig:
    """Steps, batches, device, logging, snapshots and checkpoints.

    * ``steps`` game steps (``null``: by the problem's family,
      :func:`~fairgames.game.default_steps` — 500 where every statement is affine in the
      rates, 1 000 for ratios and ψ), or ``epochs`` passes over the training split (wins
      when set);
      ``batch_size: null`` is the full batch; ``balanced_batches`` draws every group equally
      (re-weighted to the population); ``device``: ``auto`` / ``cpu`` / ``cuda``.
    * ``log_every``: the logging interval, the only place the loop reads device values.
    * ``snapshot_every`` / ``max_snapshots`` / ``snapshot_strategy`` (``reservoir``: a seeded
      uniform sample of all snapshots; ``uniform_stride``: evenly spaced): the iterates kept
      for the stochastic model and the best iterate, which are chosen on ``selection_split``;
      ``stochastic``: ``uniform`` (the mixture of all kept snapshots, paper 000's output) or
      ``shrunk`` (the LP mixture of at most m + 1 of them, Cotter et al. 2019; moved
      towards the best iterate where a ratio constraint makes it infeasible in truth, then
      at most m + 2: ``fairgames.train.results.solutions.repair_lp_mixture``).
      ``snapshot_offset``: where in each window of ``snapshot_every`` steps the snapshot is
      taken, ``random`` (seeded: a cycling game is seen in every phase) or ``fixed`` (the
      window's last step, the behaviour before offsets).
    * ``recommend``: the solution to deploy (``results.json``'s ``recommended``,
      ``recommended.pt``, the CLI's last line). ``auto``: the LP mixture of the snapshots and
      the final model chosen on train when it is feasible there, else the best of them on
      train (:mod:`fairgames.train.results.recommend`); ``final`` / ``best_iterate`` /
      ``stochastic``: that solution as chosen above (``stochastic``, with ``snapshot_offset=fixed``,
      is the output of published protocols).
    * ``checkpoint_every`` (0: only at the end) and ``resume`` (``true``: the run directory's
      checkpoint, or a run directory or checkpoint file, whose stored config the run takes)
      let a killed run continue; ``stop_after`` ends the run after that many steps with a
      checkpoint there, without evaluating (a resumed run continues from that step).
    * ``constraint_split``: where the multipliers and slacks see the constraints. ``train``:
      on the θ-player's own batches (paper 000's game); ``validation``: on the validation
      split, scored at every step without gradients (Cotter et al. 2019's two-dataset game,
      for constraints that θ satisfies on its training data but not beyond it). Then the
      game's logged violations are validation ones, and the validation split is no longer
      untouched for ``selection_split`` or model selection: compare on test. ``holdout``:
      on a seeded share ``constraint_fraction`` of the training rows (stratified by group and
      label) that θ does not train on, as Cotter et al. split their training data; validation
      stays untouched, and results on ``train`` are on the whole training split.
    * ``progress`` (tqdm bar), ``tensorboard``, ``plots`` (dynamics.png), ``eval_chunk``
      (rows per evaluation chunk).
    * ``bootstrap``: resamples of the constraints' 95 % percentile bootstrap intervals in
      ``results.json`` and the verdict (stratified by group × label; 0: no intervals).
    * ``tune``: ``null`` (one run) or ``validation``: a Hydra multirun on the joblib launcher
      over ``tune_grid`` (``lr``: multiples of ``optimizer.lr``; ``multiplier_lr``: of
      ``algorithm.multiplier_lr``; ``robust_lr``: of ``robust.lr``), picking the job whose
      deployable solution is best on validation (:mod:`fairgames.train.sweeps.tune`).
    * ``distributed``: one run on the processes ``torchrun`` launched (gloo on CPU, NCCL on
      CUDA; ``batch_size`` is the global batch; :mod:`fairgames.train.loop.parallel`).
    * ``early_stop``: end the game at a log interval once the recommendation has settled
      (:mod:`fairgames.train.results.early_stop`): ``enabled`` (``false``, the default: every step
      is played; ``true``; ``auto``: on where the check is exact from integer counts, the
      run is one process and ``recommend=auto``), ``patience`` (the
      checks in the window), ``objective_tol`` (how far the recommendation's train
      objective may move over the window) and ``best_tol`` (how far above the best iterate
      objective logged in the window it may be).
    * ``compile``: record the training step once and replay it as one graph
      (:mod:`fairgames.train.loop.captured`): inductor on CPU where a C++ compiler exists (else
      replayed op by op, with a warning), CUDA graphs on CUDA; Adam, AdamW and Adagrad are
      then built ``fused=True`` (their step count stays on the device).

    Example:
        >>> t = TrainerConfig(steps=200, batch_size=128, device="cpu")
        >>> t.steps, t.batch_size, t.log_every
        (200, 128, 50)
    """

    steps: int | None = None
    epochs: float | None = None
    batch_size: int | None = None
    balanced_batches: bool = False
    device: str = "auto"
    log_every: int = 50
    snapshot_every: int = 10
    max_snapshots: int = 100
    snapshot_strategy: str = "reservoir"
    snapshot_offset: str = "random"
    checkpoint_every: int = 500
    resume: Any = False
    stop_after: int | None = None
    progress: bool = True
    tensorboard: bool = True
    plots: bool = True
    selection_split: str = "validation"
    constraint_split: str = "train"
    constraint_fraction: float = 0.5
    stochastic: str = "uniform"
    recommend: str = "auto"
    eval_chunk: int = 65536
    bootstrap: int = 1000
    tune: str | None = None
    tune_grid: dict[str, list[float]] = field(default_factory=_tune_grid)
    distributed: bool = False
    compile: bool = False
    early_stop: dict[str, Any] = field(default_factory=lambda: dict(EARLY_STOP_DEFAULTS))


@dataclass
class TrainConfig:
    """The whole run, the core's groups: a family's own group (e.g. ``robust``) joins them in
    :func:`train_schema`. ``run_dir`` defaults to Hydra's output directory; ``families``
    names modules of families of your own, imported before the config is composed
    (:mod:`fairgames.families`).

    Example:
        >>> cfg = OmegaConf.structured(TrainConfig)
        >>> cfg.data, cfg.model.name, cfg.seed
        ({'name': 'synthetic', 'protected': 'group'}, 'linear', 0)
    """

    data: dict[str, Any] = field(default_factory=lambda: {"name": "synthetic",
                                                          "protected": "group"})
    problem: ProblemConfig = field(default_factory=ProblemConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    algorithm: Any = field(default_factory=lambda: algorithm_schema()())
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    seed: int = 0
    run_dir: str | None = None
    families: list[str] = field(default_factory=list)


_ROOTS: dict[tuple[Any, ...], type] = {}


def train_schema() -> type:
    """The run's root schema (a dataclass named ``TrainConfig``): :class:`TrainConfig`'s groups
    with every registered family's group before ``seed``
    (:func:`fairgames.train.method.register_group`). Rebuilt when a family registers one.

    Example:
        >>> [f.name for f in fields(train_schema())][-4:]
        ['robust', 'seed', 'run_dir', 'families']
    """
    from ..registry import family_groups

    groups = family_groups()
    signature = tuple((g.name, g.schema) for g in groups.values())
    if signature not in _ROOTS:
        core = [(f.name, f.type, _copy(f)) for f in fields(TrainConfig)]
        at = [name for name, _, _ in core].index("seed")
        own = [(g.name, Any, field(default_factory=g.schema)) for g in groups.values()]
        root = make_dataclass("TrainConfig", [*core[:at], *own, *core[at:]])
        root.__module__ = __name__
        root.__doc__ = "The run's root schema (see :func:`train_schema`)."
        _ROOTS[signature] = root
    return _ROOTS[signature]


def _copy(f: Any) -> Any:
    """A dataclass field's default, as a new field (a field object belongs to one class)."""
    if f.default_factory is not dataclasses.MISSING:
        return field(default_factory=f.default_factory)
    return field(default=f.default)


def register() -> None:
    """Register the paper families (:func:`fairgames.families.load`), then ``train_schema``
    (:func:`train_schema`) in Hydra's ConfigStore and the ``algorithm`` group's keys in the
    check registry: call it before composing with Hydra's compose API if the config module
    was not the first of fairgames you imported (its import does it; the families wait while
    another of fairgames' modules is being imported).

    Example:
        >>> register()
        >>> "train_schema.yaml" in ConfigStore.instance().list("/")
        True
    """
    from fairgames.families import load

    load(importer=__name__)
    store_schema()


def store_schema() -> None:
    """``train_schema`` in Hydra's ConfigStore and the ``algorithm`` group's keys in the check
    registry, as the registry holds them now (idempotent; done on import, and again whenever a
    strategy, a method or a family's group is registered, so its keys compose)."""
    ConfigStore.instance().store(name="train_schema", node=train_schema())
    register_group("algorithm", algorithm_schema())


# --------------------------------------------------------------------------- validation
def validate(cfg: DictConfig | TrainConfig) -> None:
    """Check values that types cannot: ranges, choices, names known to fairgames.

    Runs the checks registered in :mod:`fairgames.train.config.checks` (this module registers one
    validator per group below; a preset or player registers its own there): first unknown
    keys, then every value rule, each pass listing all its problems at once.

    Raises:
        ConfigError: listing every bad key with its value and what is expected.

    Example:
        >>> cfg = OmegaConf.structured(TrainConfig(problem=ProblemConfig("p", objective="error()")))
        >>> validate(cfg)    # the defaults are valid
        >>> cfg.trainer.device = "tpu"
        >>> try:
        ...     validate(cfg)
        ... except ConfigError as e:
        ...     print(e)
        invalid config:
          trainer.device='tpu': expected one of ['auto', 'cpu', 'cuda']
    """
    from fairgames.families import load

    c = cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)
    load(list(c.get("families") or ()))     # the families the config names check their keys
    # Keys forced in with Hydra's `+key=value` bypass the schema's struct flag: check them too.
    for errors in (lambda: key_errors(c, train_schema()), lambda: value_errors(c)):
        found = errors()
        if found:
            raise ConfigError("invalid config:\n  " + "\n  ".join(found))


# Groups in the order their problems are listed; `data`'s keys belong to its loader.
register_group("data")
register_group("problem", ProblemConfig)
register_group("model", ModelConfig)
register_group("optimizer", OptimizerConfig)
register_group("algorithm", algorithm_schema())   # refreshed by register() at the end
register_group("trainer", TrainerConfig)
register_group("seed")


@register_validator("data")
def _check_data(c: DictConfig, check: Checks) -> None:
    data = c.data
    if not isinstance(data.get("name"), str) or not data.get("name"):
        check.bad("data.name", data.get("name"), "the data set's name (e.g. adult, synthetic)")
    protected = data.get("protected")
    if protected is not None and (not isinstance(protected, str) or not protected):
        check.bad("data.protected", protected,
                  "the protected attribute's name (e.g. sex), or null: the recipe's")


@register_validator("problem")
def _check_problem(c: DictConfig, check: Checks) -> None:
    from fairgames.problems.spec import TOLERANCE_KINDS

    p = c.problem
    check.choice("problem.tolerance_kind", p.tolerance_kind, TOLERANCE_KINDS)
    if p.get("objective_surrogate") is not None:
        from fairgames.rates.surrogates import KINDS

        check.choice("problem.objective_surrogate", p.objective_surrogate, KINDS)
    if p.tolerance is not None and not math.isfinite(p.tolerance):
        check.bad("problem.tolerance", p.tolerance, "must be finite")
    if not 0.0 < p.baseline_fraction <= 1.0:
        check.bad("problem.baseline_fraction", p.baseline_fraction, "must lie in (0, 1]")
    if p.protected_group is not None and (isinstance(p.protected_group, bool) or
                                          not isinstance(p.protected_group, int | str)):
        check.bad("problem.protected_group", p.protected_group, "a value name or integer code")


@register_validator("model")
def _check_model(c: DictConfig, check: Checks) -> None:
    from fairgames.models import ACTIVATIONS, MODELS, OUTPUTS, SPARSE_INPUTS

    m = c.model
    check.choice("model.name", m.name, MODELS)
    check.choice("model.activation", m.activation, ACTIVATIONS)
    check.choice("model.output", m.output, ("auto", *OUTPUTS))
    # a resumed run's stored config from before the key: the dense kernels it trained with
    check.choice("model.sparse_inputs", m.get("sparse_inputs", "off"), SPARSE_INPUTS)
    if not 0.0 <= m.dropout < 1.0:
        check.bad("model.dropout", m.dropout, "must lie in [0, 1)")
    if m.name == "mlp" and (not m.hidden or any(h < 1 for h in m.hidden)):
        check.bad("model.hidden", list(m.hidden), "positive layer widths, at least one")


@register_validator("optimizer")
def _check_optimizer(c: DictConfig, check: Checks) -> None:
    o = c.optimizer
    check.choice("optimizer.name", o.name, OPTIMIZERS)
    check.positive("optimizer.lr", o.lr)
    check.positive("optimizer.momentum", o.momentum, zero=True)
    check.positive("optimizer.weight_decay", o.weight_decay, zero=True)
    check.positive("optimizer.grad_clip", o.grad_clip, allow_none=True)


@register_validator("algorithm")
def _check_algorithm(c: DictConfig, check: Checks) -> None:
    from fairgames.rates.surrogates import KINDS

    a = c.algorithm
    method = _algorithm_methods()
    check.choice("algorithm.name", a.name, [*PRESETS, *method])
    if a.multipliers is not None and a.name not in method:    # a method checks its own

        check.choice("algorithm.multipliers", a.multipliers, MULTIPLIER_PLAYERS)
    check.choice("algorithm.surrogate", a.surrogate, ("auto", *KINDS))
    if a.get("objective_surrogate") is not None:
        check.choice("algorithm.objective_surrogate", a.objective_surrogate, (*KINDS, "none"))
    check.positive("algorithm.temperature", a.get("temperature"), allow_none=True)
    if not 0.0 < a.ratio_floor < 1.0:
        check.bad("algorithm.ratio_floor", a.ratio_floor, "must lie in (0, 1)")
    check.choice("algorithm.large_game", a.get("large_game", "switch"), LARGE_GAME)
    check.choice("algorithm.family_game", a.get("family_game", "switch"), FAMILY_GAME)


@register_validator("algorithm")
def _check_player_settings(c: DictConfig, check: Checks) -> None:
    """Every key a player declares: its rule where the preset plays it, else it must be left
    at its default (a key no player of this game reads would be silently ignored)."""
    a = c.algorithm
    players = players_of(a)
    played = ({} if players is None else
              {k.name: k for cls in players.values() for k in cls.config_keys})
    for name, (key, owners) in registered_config_keys().items():
        value = a.get(name, key.default)
        if players is None or name in played:
            problem = played.get(name, key).problem(value)
            if problem is not None:
                check.bad(f"algorithm.{name}", value, problem)
        elif value != key.default:
            check.bad(f"algorithm.{name}", value, _not_played(a, players, key, owners))


@register_validator("algorithm")
def _check_method_settings(c: DictConfig, check: Checks) -> None:
    """Every key a registered method declares: its rule where the method is played, else it
    must be left at its default (only that method reads it)."""
    a = c.algorithm
    for key, name in method_keys():
        value = a.get(key.name, key.default)
        if a.name == name:
            problem = key.problem(value)
            if problem is not None:
                check.bad(f"algorithm.{key.name}", value, problem)
        elif value != key.default:
            check.bad(f"algorithm.{key.name}", value, f"only algorithm={name} reads it "
                      f"({key.doc.split(':')[0]}): leave it at {key.default!r} or pick "
                      f"algorithm={name}")


def players_of(a: DictConfig) -> dict[str, type[Player]] | None:
    """The classes of the players ``algorithm=a.name`` plays, by role (a registered method:
    the players whose keys it reads; ``None`` when the name or the λ strategy is unknown:
    reported by ``_check_algorithm``)."""
    method = _algorithm_methods().get(a.name)
    if method is not None:
        return dict(method.players)
    if a.name not in PRESETS or (a.multipliers is not None and
                                 a.multipliers not in MULTIPLIER_PLAYERS):
        return None
    return PRESETS[a.name].player_classes(a.multipliers)


def _not_played(a: DictConfig, players: Mapping[str, type[Player]], key: ConfigKey,
                owners: list[type[Player]]) -> str:
    """Why ``key`` is refused: which of the game's players lacks it, which players take it,
    and what to do."""
    roles = [role for role in ROLES if any(cls.name == role for cls in owners)]
    lacking = " and the ".join(player_label(players[r]) for r in roles if r in players)
    remedies = ["leave it null" if key.default is None else f"leave it at {key.default!r}"]
    lam = [cls.strategy for cls in owners if cls.name == "multipliers"]
    if lam:
        remedies.append(f"set algorithm.multipliers to {' / '.join(lam)}")
    presets = [name for name, p in PRESETS.items() if key.name in p.config_keys()]
    if presets:
        remedies.append(f"pick an algorithm that plays it ({', '.join(presets)})")
    remedy = " or ".join(remedies) if len(remedies) < 3 else (
        f"{', '.join(remedies[:-1])}, or {remedies[-1]}")
    return (f"the {lacking or 'players'} of algorithm={a.name} "
            f"{'has' if lacking else 'have'} no {key.name}; {_takers(owners)}: {remedy}")


def _takers(owners: list[type[Player]]) -> str:
    """``the gradient-ascent and swap-regret λ-players take it``."""
    labels = [player_label(cls) for cls in owners]
    if len(labels) == 1:
        return f"the {labels[0]} takes it"
    # "a-b λ-player" for each owner of one role: name the strategies once, the role once
    strategies = [label.rsplit(" ", 1)[0] for label in labels]
    roles = {label.rsplit(" ", 1)[-1] for label in labels}
    if len(roles) == 1:
        return (f"the {', '.join(strategies[:-1])} and {strategies[-1]} {roles.pop()}s "
                "take it")
    return f"the {', '.join(labels[:-1])} and {labels[-1]} take it"


@register_validator("trainer")
def _check_trainer_loop(c: DictConfig, check: Checks) -> None:
    """Steps, batches, device and intervals."""
    t = c.trainer
    if t.epochs is None:     # steps null: the problem's default (default_steps)
        check.positive("trainer.steps", t.steps, allow_none=True, integer=True)
    else:
        check.positive("trainer.epochs", t.epochs)
    check.positive("trainer.batch_size", t.batch_size, allow_none=True, integer=True)
    if t.balanced_batches and t.batch_size is None:
        check.bad("trainer.balanced_batches", True, "needs a trainer.batch_size")
    check.choice("trainer.device", t.device, DEVICES)
    if t.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            check.bad("trainer.device", "cuda", "CUDA is not available on this machine (use "
                      "auto or cpu)")
    check.positive("trainer.log_every", t.log_every, integer=True)
    check.positive("trainer.snapshot_every", t.snapshot_every, integer=True)
    check.positive("trainer.max_snapshots", t.max_snapshots, integer=True)
    check.positive("trainer.checkpoint_every", t.checkpoint_every, integer=True, zero=True)
    check.positive("trainer.stop_after", t.stop_after, allow_none=True, integer=True)
    check.positive("trainer.eval_chunk", t.eval_chunk, integer=True)
    check.positive("trainer.bootstrap", t.bootstrap, integer=True, zero=True)


@register_validator("trainer")
def _check_trainer_data(c: DictConfig, check: Checks) -> None:
    """Where the game sees the constraints, how solutions are chosen, resuming."""
    t, a = c.trainer, c.algorithm
    check.choice("trainer.selection_split", t.selection_split, SPLITS)
    # Test stays out of training: the multipliers play on training or validation rows only.
    check.choice("trainer.constraint_split", t.constraint_split, CONSTRAINT_SPLITS)
    if not 0.0 < t.constraint_fraction < 1.0:
        check.bad("trainer.constraint_fraction", t.constraint_fraction, "must lie in (0, 1)")
    players = players_of(a)
    inside = [player_label(cls) for cls in (players or {}).values() if cls.plays_inside_step]
    if t.constraint_split != "train" and inside:
        check.bad("trainer.constraint_split", t.constraint_split,
                  f"algorithm={a.name}'s {inside[0]} evaluates its own batches inside the "
                  "step (a best response computes the multipliers' step itself); a held-out "
                  "split needs players that do not, e.g. a gradient θ-player")
    check.choice("trainer.snapshot_strategy", t.snapshot_strategy, SNAPSHOT_STRATEGIES)
    check.choice("trainer.snapshot_offset", t.snapshot_offset, SNAPSHOT_OFFSETS)
    check.choice("trainer.stochastic", t.stochastic, STOCHASTIC)
    check.choice("trainer.recommend", t.recommend, RECOMMEND)
    if not (isinstance(t.resume, bool) or isinstance(t.resume, str)):
        check.bad("trainer.resume", t.resume, "true, false or a checkpoint path")


@register_validator("trainer")
def _check_trainer_tune(c: DictConfig, check: Checks) -> None:
    """A tuned run: its grid, and nothing that would let selection see test or validation
    data it must not."""
    t = c.trainer
    if t.tune is None:
        return
    check.choice("trainer.tune", t.tune, TUNE_MODES)
    steps = tune_step_keys()
    for name, factors in t.tune_grid.items():
        key = f"trainer.tune_grid.{name}"
        if name not in steps:
            close = difflib.get_close_matches(name, steps, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            check.bad(key, _plain(factors), f"unknown step size; {hint}the grid takes "
                      f"{sorted(steps)} (multiples of {', '.join(steps.values())})")
        elif not factors or any(isinstance(f, bool) or not isinstance(f, int | float) or
                                not 0.0 < f < math.inf for f in factors):
            check.bad(key, _plain(factors), "a non-empty list of positive multiples of the "
                      f"run's {steps[name]}, e.g. [0.3, 1, 3]")
    players = players_of(c.algorithm)
    lam = t.tune_grid.get("multiplier_lr")
    if players is not None and lam and list(lam) != [1.0] and not any(
            k.name == "multiplier_lr" for k in players["multipliers"].config_keys):
        check.bad("trainer.tune_grid.multiplier_lr", _plain(lam),
                  f"the {player_label(players['multipliers'])} of algorithm={c.algorithm.name} "
                  "has no step size: set trainer.tune_grid.multiplier_lr=[1] (tune θ's only)")
    # Selection must stay honest: validation is what the tuner compares on.
    if t.constraint_split == "validation":
        check.bad("trainer.constraint_split", "validation", "trainer.tune=validation compares "
                  "runs on the validation split, which this game's multipliers play on; use "
                  "constraint_split=holdout (a held-out share of train) or train")
    if t.selection_split == "test":
        check.bad("trainer.selection_split", "test", "trainer.tune=validation never selects "
                  "on test; use validation or train")
    if t.resume is not False or t.stop_after is not None:
        check.bad("trainer.tune", t.tune, "a tuned run is not resumable and runs to the end: "
                  "leave trainer.resume=false and trainer.stop_after=null")


@register_validator("trainer")
def _check_trainer_distributed(c: DictConfig, check: Checks) -> None:
    """What a data-parallel run cannot do: NCCL without GPUs, a tuned grid (its own jobs); a
    method that cannot says so in its own validator."""
    if not c.trainer.distributed:
        return
    if c.trainer.tune is not None:
        check.bad("trainer.distributed", True, "a tuned run launches its own jobs: leave "
                  "trainer.tune=null under torchrun")
    import torch

    if c.trainer.device == "cuda" and not torch.cuda.is_available():
        check.bad("trainer.distributed", True, "with trainer.device=cuda the ranks talk over "
                  "NCCL, which needs GPUs, and this machine has none: use trainer.device=cpu "
                  "(gloo)")


@register_validator("trainer")
def _check_trainer_early_stop(c: DictConfig, check: Checks) -> None:
    """``trainer.early_stop``: its keys and values, and what it cannot certify (another
    recommendation rule, a data-parallel game)."""
    t = c.trainer
    given = t.get("early_stop") or {}   # a resumed run stored before the key: the defaults (off)
    es = {**EARLY_STOP_DEFAULTS, **given}
    for key in given:
        if key not in EARLY_STOP_DEFAULTS:
            check.bad(f"trainer.early_stop.{key}", _plain(es[key]),
                      f"unknown key; trainer.early_stop takes {list(EARLY_STOP_DEFAULTS)}")
    enabled = es["enabled"]
    if not (isinstance(enabled, bool) or enabled == "auto"):
        check.bad("trainer.early_stop.enabled", enabled, "auto, true or false")
    check.positive("trainer.early_stop.patience", es["patience"], integer=True)
    for key in ("objective_tol", "best_tol"):
        check.positive(f"trainer.early_stop.{key}", es[key], zero=True)
    if enabled is True and t.recommend != "auto":
        check.bad("trainer.early_stop.enabled", True, "the stop certifies the recommendation "
                  f"of trainer.recommend=auto; with recommend={t.recommend} set "
                  "trainer.early_stop.enabled=false")
    if enabled is True and t.distributed:
        check.bad("trainer.early_stop.enabled", True, "not available with "
                  "trainer.distributed=true (the ranks would have to agree on the stop); set "
                  "it to false or auto")


@register_validator("trainer")
def _check_trainer_compile(c: DictConfig, check: Checks) -> None:
    """What a recorded step cannot replay, known from the config alone (algorithm=reduction
    and robust=soft_assignments_ideal refuse it with their other trainer keys; the game's own
    refusals, e.g. an optimizer that reads its step on the host, come when it is built)."""
    if c.trainer.compile and c.trainer.distributed:
        check.bad("trainer.compile", True, "the data-parallel game's collective is not "
                  "recorded: set trainer.compile=false with trainer.distributed=true")


def _plain(value: Any) -> Any:
    """A config node as plain Python, for messages."""
    return OmegaConf.to_object(value) if OmegaConf.is_config(value) else value


@register_validator("seed")
def _check_seed(c: DictConfig, check: Checks) -> None:
    if isinstance(c.seed, bool) or not isinstance(c.seed, int) or c.seed < 0:
        check.bad("seed", c.seed, "a non-negative integer")


store_schema()
watch_strategies(store_schema)   # a strategy registered later composes with its keys too
