"""The large-game switch from the command line's config: a crossed attribute with more than
SWAP_REGRET_MAX_ROWS groups plays the linear-cost preset, says so and records it;
``algorithm.large_game=keep`` keeps dense swap regret; a small game is untouched."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from fairgames.game import SWAP_REGRET_MAX_ROWS, LargeGameWarning
from fairgames.train import ConfigError, run, validate

A, B = 37, 30            # 1 110 crossed cells, one equal-opportunity row each
SHORT = ["trainer=smoke", "trainer.steps=4", "trainer.log_every=4", "trainer.snapshot_every=2",
         "trainer.bootstrap=0", "trainer.checkpoint_every=0", "trainer.plots=false",
         "trainer.tensorboard=false", "problem=equal_opportunity"]


@pytest.fixture(scope="module")
def crossed(tmp_path_factory):
    """A table whose columns a × b cross into 1 110 groups, each with positives on the
    training split (24 rows a cell, half of them positive)."""
    rng = np.random.default_rng(0)
    cells = [(i, j) for i in range(A) for j in range(B)]
    rows = np.repeat(np.arange(len(cells)), 24)
    a = np.array([f"a{cells[r][0]}" for r in rows])
    b = np.array([f"b{cells[r][1]}" for r in rows])
    y = np.tile(np.arange(24) % 2, len(cells))
    x = rng.normal(size=len(rows)) + y
    path = tmp_path_factory.mktemp("crossed") / "crossed.csv"
    pd.DataFrame({"x": x, "a": a, "b": b, "y": y}).to_csv(path, index=False)
    return ["data=table", f"data.path={path}", "data.target=y", "data.protected=a*b",
            "data.numerical=[x]", "data.categorical=[]"]


def test_a_crossed_attribute_above_the_limit_switches_to_the_linear_player(
        compose_cfg, crossed, tmp_path):
    # (stopped after 2 steps: the game is made and played; the report of 1 110 constraints
    # takes ~6 s here (benchmarks/speed/report_cost.py), see the slow test below for results.json)
    cfg = compose_cfg(*crossed, *SHORT, "trainer.stop_after=2")
    assert cfg.algorithm.name == "proxy_lagrangian" and cfg.algorithm.large_game == "switch"
    with pytest.warns(LargeGameWarning, match=r"1110 multiplier rows > 1024.*"
                                              r"algorithm.large_game=keep"):
        result = run(cfg, run_dir=tmp_path / "run")
    copt = result.engine.copt
    assert result.engine.step == 2 and copt.terms.num_rows == A * B > SWAP_REGRET_MAX_ROWS
    assert copt.preset.name == "lagrangian"
    assert copt.preset_note.startswith(f"{A * B} multiplier rows > {SWAP_REGRET_MAX_ROWS}")
    strategies = {type(p).__name__ for p in copt.players}
    assert "GradientAscent" in strategies and "SwapRegret" not in strategies


@pytest.mark.slow
def test_the_switch_is_recorded_in_results_json(compose_cfg, crossed, tmp_path):
    with pytest.warns(LargeGameWarning):
        run(compose_cfg(*crossed, *SHORT), run_dir=tmp_path / "run")
    training = json.loads((tmp_path / "run" / "results.json").read_text())["training"]
    assert len(training["multipliers"]) == A * B
    assert training["preset"] == "lagrangian"
    assert training["preset_note"].startswith(f"{A * B} multiplier rows > "
                                              f"{SWAP_REGRET_MAX_ROWS}")


def test_the_explicit_key_keeps_dense_swap_regret(compose_cfg, crossed, tmp_path):
    # (stopped after 2 steps: the game is made and played, the report of 1 110
    # constraints is not needed to see which player plays)
    cfg = compose_cfg(*crossed, *SHORT, "algorithm.large_game=keep", "trainer.stop_after=2")
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeGameWarning)
        result = run(cfg, run_dir=tmp_path / "run")
    copt = result.engine.copt
    assert result.engine.step == 2
    assert copt.preset.name == "proxy_lagrangian" and copt.preset_note is None
    assert copt.terms.num_rows == A * B
    assert "SwapRegret" in {type(p).__name__ for p in copt.players}


def test_a_small_game_plays_the_named_preset(compose_cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeGameWarning)
        result = run(compose_cfg("data=synthetic", "data.n=600", *SHORT))
    assert result.results["training"]["preset"] == "proxy_lagrangian"
    assert result.results["training"]["preset_note"] is None


def test_large_game_takes_switch_or_keep(compose_cfg):
    with pytest.raises(ConfigError, match=r"algorithm.large_game.*\['keep', 'switch'\]"):
        validate(compose_cfg("algorithm.large_game=dense"))
