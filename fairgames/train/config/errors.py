"""The error of a bad config, in a leaf module: every stage raises it without importing the
schema (whose checks import the game)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config with bad values; the message lists each bad key and why.

    Example:
        >>> from omegaconf import OmegaConf
        >>> from fairgames.train.config import ProblemConfig, TrainConfig, validate
        >>> cfg = OmegaConf.structured(TrainConfig(problem=ProblemConfig("p", objective="error()")))
        >>> cfg.trainer.steps, cfg.optimizer.lr = 0, -1.0
        >>> try:
        ...     validate(cfg)
        ... except ConfigError as e:
        ...     print(e)
        invalid config:
          optimizer.lr=-1.0: must be positive and finite
          trainer.steps=0: must be positive and finite
    """
