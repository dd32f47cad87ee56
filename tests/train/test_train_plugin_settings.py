"""A strategy defined outside ``fairgames/`` joins the command line with its own config key:
registering it is all it takes (no edit of the ``algorithm`` schema or of ``configs/``), the
key composes as ``algorithm.<key>=...``, is checked by its own rule, is refused for a preset
that does not play it, and reaches the player through ``run``'s path."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch
from hydra.errors import ConfigCompositionException

from fairgames.data import make_synthetic
from fairgames.game.players import (
    ConfigKey,
    GradientAscent,
    positive,
    register_multiplier_strategy,
    unregister_multiplier_strategy,
)
from fairgames.game.players.multipliers import MULTIPLIER_LR, RADIUS
from fairgames.train import ConfigError, fit, validate
from fairgames.train.config import algorithm_schema


class WarmAscent(GradientAscent):
    """Gradient ascent that holds λ at 0 for its first ``warm_steps`` updates."""

    strategy = "warm_ascent"
    config_keys = (MULTIPLIER_LR, RADIUS,
                   ConfigKey("warm_steps", int, 5, "updates that leave λ at 0",
                             positive(integer=True)))

    def __init__(self, num_rows: int, *, warm_steps: int = 5, **kw) -> None:
        super().__init__(num_rows, **kw)
        self.warm_steps = warm_steps
        self.seen = torch.zeros((), device=self.device)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        self.seen += 1
        super().update(torch.where(self.seen > self.warm_steps, gain, torch.zeros_like(gain)),
                       ok=ok)


@pytest.fixture
def warm_ascent():
    before = [f.name for f in fields(algorithm_schema())]
    register_multiplier_strategy(WarmAscent)
    yield
    unregister_multiplier_strategy("warm_ascent")
    # forgotten again: the schema is the built-in one
    assert [f.name for f in fields(algorithm_schema())] == before


def test_an_unregistered_key_does_not_compose(compose_cfg):
    with pytest.raises(ConfigCompositionException):
        compose_cfg("algorithm.warm_steps=7")


def test_a_registered_strategy_is_selected_and_configured_from_the_command_line(
        warm_ascent, train_run):
    res = train_run("warm", "problem=equal_opportunity", "algorithm=lagrangian",
                    "algorithm.multipliers=warm_ascent", "algorithm.warm_steps=7",
                    "trainer.steps=20")
    player = res.engine.copt.multipliers
    assert type(player) is WarmAscent
    assert player.warm_steps == 7 and player.seen.item() == 20      # the key reached it
    assert player.lr.item() == 0.5 and player.radius == 10.0        # lagrangian.yaml's
    assert res.results["config"]["algorithm"]["warm_steps"] == 7


def test_the_key_is_checked_by_its_rule_and_refused_where_not_played(warm_ascent,
                                                                       compose_cfg):
    with pytest.raises(ConfigError, match=r"algorithm.warm_steps=0: must be positive"):
        validate(compose_cfg("algorithm=lagrangian", "algorithm.multipliers=warm_ascent",
                             "algorithm.warm_steps=0"))
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg("algorithm=lagrangian", "algorithm.warm_steps=7"))
    msg = str(info.value)
    assert ("algorithm.warm_steps=7: the gradient-ascent λ-player of algorithm=lagrangian has "
            "no warm_steps; the warm-ascent λ-player takes it") in msg
    assert "set algorithm.multipliers to warm_ascent" in msg
    validate(compose_cfg("algorithm=lagrangian", "algorithm.warm_steps=5"))   # its default


def test_fit_takes_the_key_in_a_flat_mapping(warm_ascent):
    splits = make_synthetic(n=300, d=3, seed=0)
    res = fit(torch.nn.Linear(3, 1), "equal_opportunity", splits, protected="group",
              algorithm={"name": "lagrangian", "multipliers": "warm_ascent", "warm_steps": 3},
              trainer={"steps": 4, "log_every": 2})
    assert res.engine.copt.multipliers.warm_steps == 3
    assert res.results["config"]["algorithm"]["warm_steps"] == 3
    with pytest.raises(ConfigError, match=r"unknown key algorithm.warm_stepz; algorithm takes "
                                          r"\[.*'warm_steps'"):
        fit(torch.nn.Linear(3, 1), "equal_opportunity", splits, protected="group",
            algorithm={"name": "lagrangian", "warm_stepz": 3}, trainer={"steps": 4})


def test_a_strategy_whose_key_clashes_is_refused_and_not_registered(compose_cfg):
    from fairgames.game.players import MULTIPLIER_PLAYERS

    class Clash(GradientAscent):
        strategy = "clash"
        config_keys = (ConfigKey("theta_steps", int, 3),)    # the best response's, redefined

    with pytest.raises(ValueError, match="'theta_steps' is declared by"):
        register_multiplier_strategy(Clash)
    assert "clash" not in MULTIPLIER_PLAYERS
    validate(compose_cfg("algorithm=algorithm1", "algorithm.theta_steps=4"))    # still works
