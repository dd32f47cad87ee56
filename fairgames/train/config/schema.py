"""The training config's structured schema, registered with Hydra.

``configs/train.yaml`` starts its defaults list with ``train_schema`` (registered here in
Hydra's ConfigStore), so every group file (``problem/``, ``model/``, ``optimizer/``,
``algorithm/``, ``trainer/``) is merged into a typed node: a misspelt key fails at compose
time ("Key 'stepz' not in 'TrainerConfig'"), and a value of the wrong type too. The groups'
dataclasses are in :mod:`fairgames.train.config.groups`; this module assembles them into the
root schema (:func:`train_schema`, with the families' groups) and the ``algorithm`` group's
(:func:`algorithm_schema`, with the players' and methods' keys), and registers both. Values
are then checked by :func:`~fairgames.train.config.validation.validate`, which lists every
problem at once in a :class:`~fairgames.train.config.ConfigError`. The ``data`` group is owned
by the data loaders: it is a mapping whose ``name`` picks the loader and whose ``protected``
names the attribute that defines the groups; its other keys are the loader's keyword
arguments (checked against its signature).

Keys every issue and user agrees on: ``data.protected``, ``problem.tolerance``,
``trainer.steps``, ``trainer.batch_size`` (``null`` = full batch), ``trainer.device``
(``auto`` / ``cpu`` / ``cuda``), ``seed``, ``algorithm.multiplier_lr``, ``algorithm.radius``,
``problem.baseline_path``.

Example:
    >>> from omegaconf import OmegaConf
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
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore

from fairgames.game.players import ConfigKey, watch_strategies
from fairgames.game.presets import registered_config_keys

from .checks import register_group
from .groups import (
    EARLY_STOP_DEFAULTS,
    TUNE_STEPS,
    AlgorithmConfig,
    ModelConfig,
    OptimizerConfig,
    ProblemConfig,
    TrainerConfig,
    tune_step_keys,
)

# the groups' dataclasses, re-exported: the root schema is made of them
__all__ = ["EARLY_STOP_DEFAULTS", "TUNE_STEPS", "AlgorithmConfig", "ModelConfig",
           "OptimizerConfig", "ProblemConfig", "TrainConfig", "TrainerConfig",
           "algorithm_methods", "algorithm_schema", "method_keys", "register", "store_schema",
           "train_schema", "tune_step_keys"]

_SCHEMA: dict[tuple[Any, ...], type] = {}


def algorithm_methods() -> dict[str, Any]:
    """The methods a family registered as ``algorithm`` options (e.g. paper 003's
    ``reduction``), by name."""
    from ..registry import methods

    return methods("algorithm.name")


def method_keys() -> list[tuple[ConfigKey, str]]:
    """The ``algorithm.<key>`` settings the registered methods declare, each with its
    method's name."""
    return [(key, name) for name, m in algorithm_methods().items() for key in m.config_keys]


def algorithm_schema() -> type:
    """The ``algorithm`` group's Hydra schema (a dataclass named ``AlgorithmConfig``): the
    shared keys of :class:`AlgorithmConfig`, every key a registered player class declares
    (``fairgames.game.presets.registered_config_keys``) and every key a registered method
    declares (:attr:`fairgames.train.method.Method.config_keys`), typed and with its default — so
    ``algorithm.<key>=...`` composes for any registered strategy, and a misspelt key fails at
    compose time. Rebuilt when the strategies change.

    Example:
        >>> names = [f.name for f in fields(algorithm_schema())]
        >>> names[:5]        # the shared keys first; then the players' and the methods'
        ['name', 'multipliers', 'multiplier_optimizer', 'multiplier_lr', 'radius']
        >>> {"nupi_kp", "penalty", "slack_lr", "gap", "family_game"} <= set(names)
        True
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


@dataclass
class TrainConfig:
    """The whole run, the core's groups: a family's own group (e.g. ``robust``) joins them in
    :func:`train_schema`. ``run_dir`` defaults to Hydra's output directory (``overwrite``: a
    new run may replace another run there, :mod:`fairgames.train.run_dir`); ``families``
    names modules of families of your own, imported before the config is composed
    (:mod:`fairgames.families`).

    Example:
        >>> from omegaconf import OmegaConf
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
    overwrite: bool = False


_ROOTS: dict[tuple[Any, ...], type] = {}


def train_schema() -> type:
    """The run's root schema (a dataclass named ``TrainConfig``): :class:`TrainConfig`'s groups
    with every registered family's group before ``seed``
    (:func:`fairgames.train.method.register_group`). Rebuilt when a family registers one.

    Example:
        >>> [f.name for f in fields(train_schema())][-4:]
        ['seed', 'run_dir', 'families', 'overwrite']
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


# Groups in the order their problems are listed; `data`'s keys belong to its loader.
register_group("data")
register_group("problem", ProblemConfig)
register_group("model", ModelConfig)
register_group("optimizer", OptimizerConfig)
register_group("algorithm", algorithm_schema())   # refreshed by register() at the end
register_group("trainer", TrainerConfig)
register_group("seed")

store_schema()
watch_strategies(store_schema)   # a strategy registered later composes with its keys too
