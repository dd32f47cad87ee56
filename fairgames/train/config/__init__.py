"""The run's config and its checks: the structured schema registered with Hydra
(:mod:`.schema`), the check registry every group, preset, player and family adds to
(:mod:`.checks`), :class:`ConfigError` (:mod:`.errors`), a resumed run's config
(:mod:`.resume`) and the problem family's own game (:mod:`.family_game`).

Example:
    >>> from omegaconf import OmegaConf
    >>> OmegaConf.structured(TrainConfig).trainer.device
    'auto'
"""

from .errors import ConfigError
from .schema import (
    EARLY_STOP_DEFAULTS,
    MULTIPLIER_OPTIMIZERS,
    OPTIMIZERS,
    TUNE_STEPS,
    AlgorithmConfig,
    ModelConfig,
    OptimizerConfig,
    ProblemConfig,
    TrainConfig,
    TrainerConfig,
    algorithm_schema,
    players_of,
    register,
    train_schema,
    tune_step_keys,
    validate,
)

__all__ = ["EARLY_STOP_DEFAULTS", "MULTIPLIER_OPTIMIZERS", "OPTIMIZERS", "TUNE_STEPS",
           "AlgorithmConfig", "ConfigError", "ModelConfig", "OptimizerConfig", "ProblemConfig",
           "TrainConfig", "TrainerConfig", "algorithm_schema", "players_of", "register",
           "train_schema", "tune_step_keys", "validate"]
