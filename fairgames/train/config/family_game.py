"""The game a run plays when its config leaves the algorithm at the default: the problem
family's own (:func:`fairgames.game.default_game`), as ``trainer.steps=null`` is the family's
step budget (:func:`fairgames.game.default_steps`).

The default preset ``proxy_lagrangian`` at its default settings, under
``algorithm.family_game=switch`` (the default), gives way to the family's game; any other
preset, a λ strategy (``algorithm.multipliers``), a changed player key, or
``algorithm.family_game=keep`` plays what the config names. The run records the game it
plays as its ``algorithm`` config (``results.json``), so a rerun of that config replays it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from omegaconf import OmegaConf

from fairgames.game import DEFAULT_PRESET, default_game, get_preset
from fairgames.problems.catalog import catalog_dir
from fairgames.rates import Constraint, Expression

from .schema import AlgorithmConfig, algorithm_schema


@functools.cache
def default_settings() -> Mapping[str, Any]:
    """The default preset's settings as its config file sets them
    (``configs/algorithm/<DEFAULT_PRESET>.yaml``), with the λ step size and κ its λ-player
    plays when the file leaves them null (:meth:`~fairgames.game.Preset.lambda_defaults`):
    naming those values is not choosing another game. Every other player key at the schema's
    default (or null) has not been chosen either.

    Example:
        >>> default_settings()["multiplier_lr"]
        1.0
    """
    path = catalog_dir().parent / "algorithm" / f"{DEFAULT_PRESET}.yaml"
    data = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(data, dict)
    return {**get_preset(DEFAULT_PRESET).lambda_defaults(),
            **{k: v for k, v in data.items() if k != "name" and v is not None}}


def is_default_algorithm(algorithm: AlgorithmConfig) -> bool:
    """Whether ``algorithm`` is the default preset at its default settings.

    Example:
        >>> is_default_algorithm(AlgorithmConfig(settings={"multiplier_lr": 1.0}))
        True
        >>> is_default_algorithm(AlgorithmConfig(settings={"multiplier_lr": 0.5}))
        False
    """
    defaults = {f.name: f.default for f in fields(algorithm_schema())}
    defaults.update(default_settings())
    return (algorithm.name == DEFAULT_PRESET and algorithm.multipliers is None
            and all(v is None or v == defaults.get(k) for k, v in algorithm.settings.items()))


def family_algorithm(algorithm: AlgorithmConfig, objective: Expression | None,
                     constraints: Iterable[Constraint]) -> AlgorithmConfig:
    """The algorithm a run plays: the family's game (:func:`~fairgames.game.default_game`)
    where ``algorithm`` is the default preset at its defaults and ``family_game`` is
    ``switch``, else ``algorithm`` unchanged. The family's game keeps the shared keys
    (surrogate, temperature, ...) and gets the player keys it names.

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> sp = [score_rates(0.5)[0] <= 0.4]
        >>> family_algorithm(AlgorithmConfig(), error_rate(), sp).name
        'algorithm1'
        >>> family_algorithm(AlgorithmConfig(family_game="keep"), error_rate(), sp).name
        'proxy_lagrangian'
    """
    game = default_game(objective, constraints)
    if game is None or algorithm.family_game != "switch" or not is_default_algorithm(algorithm):
        return algorithm
    keys = dict(game)
    settings = {**algorithm.settings,
                **{k: v for k, v in keys.items() if k not in ("name", "multipliers")}}
    return AlgorithmConfig(**{**vars(algorithm), "name": keys["name"],
                              "multipliers": keys.get("multipliers"), "settings": settings})
