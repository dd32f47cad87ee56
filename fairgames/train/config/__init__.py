"""The run's config and its checks: the groups' dataclasses (:mod:`.groups`), the structured
schema registered with Hydra (:mod:`.schema`), the core's value rules and :func:`validate`
(:mod:`.validation`), the check registry every group, preset, player and family adds to
(:mod:`.checks`), :class:`ConfigError` (:mod:`.errors`), a resumed run's config
(:mod:`.resume`) and the problem family's own game (:mod:`.family_game`). Importing it loads
the paper families (:func:`fairgames.families.load`), whose groups and options join the
schema.

Example:
    >>> from omegaconf import OmegaConf
    >>> OmegaConf.structured(TrainConfig).trainer.device
    'auto'
"""

from fairgames import families as _families

from .errors import ConfigError
from .schema import (
    EARLY_STOP_DEFAULTS,
    TUNE_STEPS,
    AlgorithmConfig,
    ModelConfig,
    OptimizerConfig,
    ProblemConfig,
    TrainConfig,
    TrainerConfig,
    algorithm_schema,
    register,
    store_schema,
    train_schema,
    tune_step_keys,
)
from .validation import MULTIPLIER_OPTIMIZERS, OPTIMIZERS, players_of, validate

__all__ = ["EARLY_STOP_DEFAULTS", "MULTIPLIER_OPTIMIZERS", "OPTIMIZERS", "TUNE_STEPS",
           "AlgorithmConfig", "ConfigError", "ModelConfig", "OptimizerConfig", "ProblemConfig",
           "TrainConfig", "TrainerConfig", "algorithm_schema", "players_of", "register",
           "store_schema", "train_schema", "tune_step_keys", "validate"]

# The paper families add their groups, options and checks to this schema (the seam,
# fairgames.train.method): the package's own and the installed ones register now.
_families.load(importer=__name__)
