"""A λ strategy named in place of a preset's plays at its own settings on both paths (issue 57):
``algorithm=<preset> algorithm.multipliers=<strategy>`` on the command line and
``ConstrainedOptimizer(..., preset=<preset>, multipliers=<strategy>)`` / ``fit(...)`` in Python
build the same λ-player — the preset's step size and κ belong to the preset's own λ-player,
and a value the command line names is the user's."""

from __future__ import annotations

import inspect

import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.players import AugmentedLagrangian, NuPI
from fairgames.game.players.multipliers import MULTIPLIER_PLAYERS
from fairgames.rates import error_rate, group, positive_prediction_rate
from fairgames.train import ConfigError, fit, validate

SHORT = ["problem=equal_opportunity", "trainer.steps=4", "trainer.log_every=2"]


def _python_player(preset: str, strategy: str):
    """The λ-player Python builds for ``preset`` with ``multipliers=strategy``."""
    problem = Problem(error_rate(), [positive_prediction_rate(group("g", "b")) >= 0.4])
    model = torch.nn.Linear(2, 1)
    return ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset=preset, multipliers=strategy).multipliers


def _own_default(strategy: str, argument: str):
    """The strategy class's own default for a constructor argument (the independent
    reference: its signature)."""
    return inspect.signature(MULTIPLIER_PLAYERS[strategy]).parameters[argument].default


@pytest.mark.parametrize("preset, strategy", [("proxy_lagrangian", "gradient_ascent"),
                                              ("lagrangian", "exponentiated_gradient"),
                                              ("algorithm3", "swap_regret")])
def test_the_command_line_plays_the_named_strategy_at_its_own_step(train_run, preset,
                                                                   strategy):
    res = train_run(f"own-{strategy}", *SHORT, f"algorithm={preset}",
                    f"algorithm.multipliers={strategy}")
    player = res.engine.copt.multipliers
    assert type(player) is MULTIPLIER_PLAYERS[strategy]
    assert player.lr.item() == pytest.approx(_own_default(strategy, "lr"))
    assert player.lr.item() == pytest.approx(_python_player(preset, strategy).lr.item())


def test_a_strategy_without_a_step_is_not_refused_for_the_presets_step(compose_cfg, train_run):
    # follow-the-leader takes no step size: proxy_lagrangian's must not be handed to it
    validate(compose_cfg("algorithm=proxy_lagrangian", "algorithm.multipliers=follow_the_leader"))
    res = train_run("own-ftl", *SHORT, "algorithm=proxy_lagrangian",
                    "algorithm.multipliers=follow_the_leader")
    player = res.engine.copt.multipliers
    assert player.radius == _own_default("follow_the_leader", "radius")
    assert player.radius == _python_player("proxy_lagrangian", "follow_the_leader").radius


def test_a_named_value_is_the_users_on_both_paths(train_run):
    res = train_run("own-named", *SHORT, "algorithm=proxy_lagrangian",
                    "algorithm.multipliers=gradient_ascent", "algorithm.multiplier_lr=1.0")
    assert res.engine.copt.multipliers.lr.item() == 1.0
    splits = make_synthetic(n=300, d=3, seed=0)
    out = fit(torch.nn.Linear(3, 1), "equal_opportunity", splits, protected="group",
              algorithm={"name": "proxy_lagrangian", "multipliers": "gradient_ascent",
                         "multiplier_lr": 1.0}, trainer={"steps": 2, "log_every": 1})
    assert out.engine.copt.multipliers.lr.item() == 1.0
    out = fit(torch.nn.Linear(3, 1), "equal_opportunity", splits, protected="group",
              algorithm={"name": "proxy_lagrangian", "multipliers": "gradient_ascent"},
              trainer={"steps": 2, "log_every": 1})
    assert out.engine.copt.multipliers.lr.item() == _own_default("gradient_ascent", "lr")


def test_the_presets_own_strategy_keeps_the_presets_settings(train_run):
    # algorithm3's λ step is the preset's 0.3, not gradient ascent's 0.5 (nothing named)
    res = train_run("own-alg3", *SHORT, "algorithm=algorithm3")
    assert res.engine.copt.multipliers.lr.item() == pytest.approx(0.3)
    res = train_run("own-default", *SHORT)
    assert res.engine.copt.multipliers.lr.item() == 1.0       # the default swap regret's


def test_nupi_and_the_penalties_are_played_from_the_command_line(train_run):
    res = train_run("nupi", *SHORT, "algorithm=lagrangian", "algorithm.multiplier_optimizer=nupi",
                    "algorithm.nupi_kp=1.0", "algorithm.nupi_ki=1.0")
    group = res.engine.copt.multipliers.optimizer.param_groups[0]
    assert type(res.engine.copt.multipliers.optimizer) is NuPI
    assert (group["kp"], group["ki"], group["nu"], group["lr"]) == (1.0, 1.0, 0.0, 0.5)
    res = train_run("alm", *SHORT, "algorithm.multipliers=augmented_lagrangian",
                    "algorithm.penalty=2.0", "algorithm.penalty_growth=1.0")
    player = res.engine.copt.multipliers
    assert type(player) is AugmentedLagrangian and player.growth == 1.0
    assert player.rho0.tolist() == [2.0] * player.num_rows
    assert res.results["config"]["algorithm"]["penalty"] == 2.0


def test_scheme_settings_are_checked_and_refused_where_not_played(compose_cfg):
    validate(compose_cfg("algorithm.multipliers=quadratic_penalty"))
    with pytest.raises(ConfigError, match=r"algorithm.penalty=2.0: the swap-regret λ-player of "
                                          r"algorithm=proxy_lagrangian has no penalty"):
        validate(compose_cfg("algorithm.penalty=2.0"))
    with pytest.raises(ConfigError, match=r"algorithm.nupi_nu=1.0: must lie in \[0, 1\)"):
        validate(compose_cfg("algorithm=lagrangian", "algorithm.multiplier_optimizer=nupi",
                             "algorithm.nupi_nu=1.0"))
    with pytest.raises(ConfigError, match=r"algorithm.nupi_kp=1.0: a gain of the νPI multiplier "
                                          r"optimizer: set algorithm.multiplier_optimizer=nupi"):
        validate(compose_cfg("algorithm=lagrangian", "algorithm.multiplier_optimizer=adam",
                             "algorithm.nupi_kp=1.0"))
    with pytest.raises(ConfigError, match=r"algorithm.multiplier_lr=0.1: the "
                                          r"augmented-lagrangian λ-player .* has no multiplier_lr"):
        validate(compose_cfg("algorithm.multipliers=augmented_lagrangian",
                             "algorithm.multiplier_lr=0.1"))
