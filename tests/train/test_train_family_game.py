"""The problem family's own game (issue 22): a problem whose constraints read threshold rates
(paper 003's statistical-parity grid) plays :data:`~fairgames.game.THRESHOLD_GAME` when the
config leaves the default preset at its defaults, records it as the run's algorithm config, and
plays exactly what the same keys named on the command line play; a named preset, a changed
player key or ``algorithm.family_game=keep`` plays as named; classification is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from fairgames.data import make_synthetic
from fairgames.game import THRESHOLD_GAME, default_game
from fairgames.models import LinearModel
from fairgames.rates import error_rate, group, positive_prediction_rate, score_rates
from fairgames.train import ConfigError, fit, run, validate
from fairgames.train.config import AlgorithmConfig
from fairgames.train.config.family_game import is_default_algorithm
from fairgames.train.sweeps.tune import sweep_overrides

SHORT = ["trainer=smoke", "trainer.steps=6", "trainer.log_every=3", "trainer.snapshot_every=2",
         "trainer.bootstrap=0", "trainer.checkpoint_every=0"]
SP = ["problem=sp_regression", "data=crime"]
# THRESHOLD_GAME's keys as a command line names them
NAMED = ["algorithm=algorithm1", "algorithm.multipliers=exponentiated_gradient",
         "algorithm.radius=10", "algorithm.multiplier_lr=2", "algorithm.theta_steps=5"]


def _players(result) -> set[str]:
    return {type(p).__name__ for p in result.engine.copt.players}


def test_only_constraints_on_threshold_rates_have_a_family_game():
    at_least = score_rates(0.5)[0]
    assert default_game(error_rate(), [at_least <= 0.4]) == THRESHOLD_GAME
    assert default_game(at_least, [error_rate() <= 0.2]) is None     # objective only
    dp = positive_prediction_rate(group("g", "a")) <= positive_prediction_rate() + 0.05
    assert default_game(error_rate(), [dp]) is None


def test_the_composed_default_is_the_default_preset_at_its_defaults(compose_cfg):
    algorithm = AlgorithmConfig.from_mapping(OmegaConf.to_container(compose_cfg().algorithm))
    assert is_default_algorithm(algorithm)
    for key, value in [("multiplier_lr", 0.5), ("theta_steps", 3), ("slack_lr", 0.1)]:
        changed = AlgorithmConfig.from_mapping(
            OmegaConf.to_container(compose_cfg(f"algorithm.{key}={value}").algorithm))
        assert not is_default_algorithm(changed), key


def test_sp_regression_plays_the_threshold_game_and_records_it(compose_cfg):
    result = run(compose_cfg(*SP, *SHORT))
    res = result.results
    assert res["training"]["preset"] == THRESHOLD_GAME["name"]
    assert {k: res["config"]["algorithm"][k] for k in THRESHOLD_GAME} == THRESHOLD_GAME
    assert res["config"]["algorithm"]["family_game"] == "switch"
    assert {"BestResponsePlayer", "ExponentiatedGradient"} <= _players(result)
    # the recorded algorithm is a valid config as it stands (a rerun of it replays the game)
    validate(OmegaConf.merge(compose_cfg(*SP, *SHORT), {"algorithm": res["config"]["algorithm"]}))


def test_the_family_game_is_the_game_its_keys_name(compose_cfg):
    """The switched run and the run naming THRESHOLD_GAME's keys play the same steps."""
    default = run(compose_cfg(*SP, *SHORT)).results
    named = run(compose_cfg(*SP, *SHORT, *NAMED)).results
    assert default["config"]["algorithm"] == named["config"]["algorithm"]
    assert default["training"]["multipliers"] == named["training"]["multipliers"]
    for solution in ("final", "recommended"):
        assert (default["solutions"][solution]["train"]["objective"]
                == named["solutions"][solution]["train"]["objective"])


@pytest.mark.parametrize("overrides, preset, lam", [
    (["algorithm.family_game=keep"], "proxy_lagrangian", "SwapRegret"),
    (["algorithm.multiplier_lr=0.5"], "proxy_lagrangian", "SwapRegret"),
    (["algorithm=algorithm2"], "algorithm2", "GradientAscent"),
    # a held-out constraint split: the family's best-response θ cannot play it
    (["trainer.constraint_split=holdout"], "proxy_lagrangian", "SwapRegret"),
])
def test_a_config_that_names_its_game_plays_it(compose_cfg, overrides, preset, lam):
    result = run(compose_cfg(*SP, *SHORT, *overrides))
    assert result.results["training"]["preset"] == preset
    assert result.results["config"]["algorithm"]["name"] == preset
    assert lam in _players(result)


def test_classification_keeps_the_default_preset(compose_cfg):
    cfg = compose_cfg("problem=demographic_parity", "data=synthetic", "data.n=600", *SHORT)
    result = run(cfg)
    assert result.results["training"]["preset"] == "proxy_lagrangian"
    assert result.results["config"]["algorithm"] == OmegaConf.to_container(cfg.algorithm)


def test_fit_plays_the_family_game_too():
    splits = make_synthetic(n=400, d=3, seed=0)
    result = fit(LinearModel(3, output="unit"), "sp_regression", splits, protected="group",
                 trainer={"steps": 4, "log_every": 2, "bootstrap": 0})
    assert result.results["training"]["preset"] == "algorithm1"
    assert result.results["config"]["algorithm"]["multipliers"] == "exponentiated_gradient"
    kept = fit(LinearModel(3, output="unit"), "sp_regression", splits, protected="group",
               algorithm={"name": "proxy_lagrangian", "family_game": "keep"},
               trainer={"steps": 4, "log_every": 2, "bootstrap": 0})
    assert kept.results["training"]["preset"] == "proxy_lagrangian"


def test_family_game_takes_switch_or_keep(compose_cfg):
    with pytest.raises(ConfigError, match=r"algorithm.family_game.*\['keep', 'switch'\]"):
        validate(compose_cfg("algorithm.family_game=always"))


def test_a_tuned_sweep_of_the_lambda_step_keeps_the_named_preset_in_every_job():
    """The sweep's centre job (multiplier_lr × 1 = the default preset's step) would otherwise
    switch to the family's game while the other jobs play the named preset."""
    lam = sweep_overrides(["problem=sp_regression"], {"algorithm.multiplier_lr": [0.3, 1.0, 3.0]},
                          Path("/tmp/sweep"))
    assert "algorithm.family_game=keep" in lam
    theta = sweep_overrides(["problem=sp_regression"], {"optimizer.lr": [0.003, 0.01]},
                            Path("/tmp/sweep"))
    assert not any(o.startswith("algorithm.family_game") for o in theta)


def test_a_checkpoint_from_before_family_games_resumes_its_named_preset(compose_cfg, tmp_path):
    # a run written before algorithm.family_game existed played the preset its config names:
    # resuming it keeps that preset (switching would change the game mid-run and refuse)
    cfg = compose_cfg(*SP, *SHORT, "trainer.steps=8", "trainer.checkpoint_every=4",
                      "trainer.stop_after=4", "algorithm.family_game=keep")
    run(cfg, run_dir=tmp_path)
    path = tmp_path / "checkpoint.pt"
    state = torch.load(path, weights_only=False)
    del state["run"]["config"]["algorithm"]["family_game"]      # as an older version wrote it
    torch.save(state, path)
    resumed = run(compose_cfg(*SP, *SHORT, "trainer.steps=8", "trainer.checkpoint_every=4",
                              f"trainer.resume={tmp_path}"), run_dir=tmp_path)
    assert resumed.engine.step == 8
    assert resumed.results["config"]["algorithm"]["name"] == "proxy_lagrangian"
