"""The config's value rules and :func:`validate`, which runs them.

Each core group registers its validators here in the check registry
(:mod:`fairgames.train.config.checks`; a preset, player or family registers its own there):
choices, ranges, the rules spanning groups (a held-out constraint split needs a gradient
θ-player; a tuned run never selects on test), and the ``algorithm.<key>`` settings only the
players (:func:`players_of`) or the method that read them may change.

Example:
    >>> from fairgames.train.config import ProblemConfig
    >>> cfg = OmegaConf.structured(TrainConfig(problem=ProblemConfig("p", objective="error()")))
    >>> cfg.trainer.steps = 0
    >>> try:
    ...     validate(cfg)
    ... except ConfigError as e:
    ...     print(e)
    invalid config:
      trainer.steps=0: must be positive and finite
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fairgames.game import PRESETS
from fairgames.game.players import MULTIPLIER_OPTIMIZERS as _LAMBDA_OPTIMIZERS
from fairgames.game.players import MULTIPLIER_PLAYERS, ConfigKey, Player
from fairgames.game.players.multipliers import NUPI_KEYS
from fairgames.game.presets import ROLES, player_label, registered_config_keys
from fairgames.game.solutions.snapshots import OFFSETS as SNAPSHOT_OFFSETS

from .checks import Checks, key_errors, register_validator, value_errors
from .errors import ConfigError
from .groups import EARLY_STOP_DEFAULTS, tune_step_keys
from .schema import TrainConfig, algorithm_methods, method_keys, train_schema

DEVICES = ("auto", "cpu", "cuda")
OPTIMIZERS = ("sgd", "adam", "adamw", "adagrad")
MULTIPLIER_OPTIMIZERS = tuple(_LAMBDA_OPTIMIZERS)
SPLITS = ("train", "validation", "test")
CONSTRAINT_SPLITS = ("train", "validation", "holdout")
STOCHASTIC = ("uniform", "shrunk")
SNAPSHOT_STRATEGIES = ("reservoir", "uniform_stride")
RECOMMEND = ("auto", "final", "best_iterate", "stochastic")
TUNE_MODES = ("validation",)
# algorithm.large_game: the default preset gives way to a linear-cost one above
# SWAP_REGRET_MAX_ROWS rows ("switch"), or is kept as named ("keep")
LARGE_GAME = ("switch", "keep")
# algorithm.family_game: the default preset gives way to the problem family's game
# (fairgames.train.config.family_game) or is kept as named
FAMILY_GAME = ("switch", "keep")


def validate(cfg: DictConfig | TrainConfig) -> None:
    """Check values that types cannot: ranges, choices, names known to fairgames.

    Runs the checks registered in :mod:`fairgames.train.config.checks` (this module registers the
    core groups' validators below; a preset or player registers its own there): first unknown
    keys, then every value rule, each pass listing all its problems at once.

    Raises:
        ConfigError: listing every bad key with its value and what is expected.

    Example:
        >>> from fairgames.train.config import ProblemConfig
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


@register_validator("data")
def _check_data(c: DictConfig, check: Checks) -> None:
    data = c.data
    if not isinstance(data.get("name"), str) or not data.get("name"):
        check.bad("data.name", data.get("name"), "the data set's name (e.g. adult, synthetic)")
    protected = data.get("protected")
    if protected is not None and (not isinstance(protected, str) or not protected):
        check.bad("data.protected", protected,
                  "the protected attribute's name (e.g. sex), or null: the recipe's")
    split = _plain(data.get("split"))
    if isinstance(split, list) and len(split) != 3:
        # the library takes (train, test); a run selects and tunes on its validation split
        check.bad("data.split", split, "give three fractions (train, validation, test), e.g. "
                  "data.split=[0.6,0.2,0.2]: a run picks its solution on the validation split")


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
    method = algorithm_methods()
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
def _check_nupi_gains(c: DictConfig, check: Checks) -> None:
    """νPI's gains are read with ``multiplier_optimizer=nupi`` only (issue 57)."""
    a = c.algorithm
    if a.get("multiplier_optimizer") == "nupi":
        return
    for key in NUPI_KEYS:
        value = a.get(key.name)
        if value is not None:
            check.bad(f"algorithm.{key.name}", value, "a gain of the νPI multiplier optimizer: "
                      "set algorithm.multiplier_optimizer=nupi, or leave it null")


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
    method = algorithm_methods().get(a.name)
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


@register_validator("trainer")
def _check_trainer_mlflow(c: DictConfig, check: Checks) -> None:
    """``trainer.mlflow``: ``auto``, ``true`` or ``false`` (fairgames.train.loop.tracking)."""
    value = c.trainer.get("mlflow", "auto")
    if not (value == "auto" or isinstance(value, bool)):
        check.bad("trainer.mlflow", value, "expected auto, true or false")


def _plain(value: Any) -> Any:
    """A config node as plain Python, for messages."""
    return OmegaConf.to_object(value) if OmegaConf.is_config(value) else value


@register_validator("seed")
def _check_seed(c: DictConfig, check: Checks) -> None:
    if isinstance(c.seed, bool) or not isinstance(c.seed, int) or c.seed < 0:
        check.bad("seed", c.seed, "a non-negative integer")

