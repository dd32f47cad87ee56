"""The config groups' dataclasses: ``problem`` (:class:`ProblemConfig`), ``model``
(:class:`ModelConfig`), ``optimizer`` (:class:`OptimizerConfig`), ``algorithm``'s shared keys
(:class:`AlgorithmConfig`; the group's Hydra schema adds the players' keys:
:func:`~fairgames.train.config.schema.algorithm_schema`) and ``trainer``
(:class:`TrainerConfig`, with its step sizes to tune, :func:`tune_step_keys`, and its early
stop's defaults). The run's root schema assembles them
(:mod:`fairgames.train.config.schema`).

Example:
    >>> TrainerConfig().device, ModelConfig().name, OptimizerConfig().lr
    ('auto', 'linear', 0.01)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import MISSING

# trainer.tune_grid's keys: the step sizes a tuned run sweeps, and the config keys they scale
# (a family adds its own: fairgames.train.method.register_tune_step; tune_step_keys() has all).
TUNE_STEPS = {"lr": "optimizer.lr", "multiplier_lr": "algorithm.multiplier_lr"}
# trainer.early_stop's keys and defaults (fairgames.train.results.early_stop reads them too)
EARLY_STOP_DEFAULTS: dict[str, Any] = {"enabled": False, "patience": 3, "objective_tol": 0.002,
                                       "best_tol": 0.005}


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
    matrix, ``benchmarks/reproduce/solved_by_default.py``, runs each); it does not restrict
    ``data``.
    ``recipe`` gives data keys the problem is documented with (e.g. ``paper: "003"``: that
    paper's target, group and split); each applies where the ``data`` config leaves the key
    null (:func:`fairgames.train.data.apply_recipe`). ``grid_size`` is N of the name
    ``thresholds`` (the grid 1/N, ..., 1). ``reduction`` (``sp`` / ``bgl`` / null) names
    the paper-003 game the problem is, which ``algorithm=reduction`` plays.
    ``objective_surrogate`` is the θ surrogate of the objective this problem defaults to
    where ``algorithm.objective_surrogate`` is null (demographic parity: ``logistic``,
    measured in benchmarks/results/solved_by_default.discussion.md); null: the constraints'
    surrogate.

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
    group is :func:`~fairgames.train.config.schema.algorithm_schema`.

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
      (rows per evaluation chunk), ``validation_curves`` (the model on the whole validation
      split at every log interval, beside the training batch's curves: the split the best
      iterate is chosen on), ``mlflow`` (``auto``: the same scalars, params and files to MLflow
      where it is installed and ``MLFLOW_TRACKING_URI`` is set; ``true``; ``false``:
      :mod:`fairgames.train.loop.tracking`).
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
    validation_curves: bool = True
    mlflow: Any = "auto"
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

