"""``algorithm=mm`` on the command line (paper 001, Algorithm 1 as a run method): the run's
solutions are the randomised (ramp) classifier, evaluated exactly in expectation, P(ŷ=1) = σ(z);
the constraint holds on train for it (numpy recomputation from the saved weights); the
deterministic classifier (threshold at 0) is reported beside; every MM round is in
results.json; what MM cannot play is a config error naming why."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fairgames.train import ConfigError, run
from fairgames.train.data import load_splits

FAIR = "+problem.constraints.fair='ppr(group=0) >= 0.8 * ppr(group=1)'"
MM = ["algorithm=mm", "problem=error", "data=synthetic", "data.n=600", "data.group_shift=1.5",
      "algorithm.rounds=3", "algorithm.round_gap=1e-5", "trainer.progress=false",
      "trainer.bootstrap=0", "trainer.plots=false"]


@pytest.fixture(scope="module")
def mm_run(compose_cfg, tmp_path_factory):
    return run(compose_cfg(*MM, FAIR), run_dir=tmp_path_factory.mktemp("mm"))


def _numpy_view(mm_run):
    res = json.loads((mm_run.run_dir / "results.json").read_text())
    splits = load_splits(res["config"]["data"], res["config"]["seed"])
    lin = mm_run.model.model.linear
    w, b = lin.weight.detach().double().numpy()[0], float(lin.bias.detach()[0])
    ds = splits.train
    z = ds.features.double().numpy() @ w + b
    return res, ds, z


def test_the_randomised_classifier_meets_the_constraint_on_train_in_expectation(mm_run):
    res, ds, z = _numpy_view(mm_run)
    p = np.clip(0.5 + z, 0.0, 1.0)                     # the ramp, written out
    g, y = ds.groups["group"].numpy(), ds.labels.numpy()
    code = {str(name): k for k, name in enumerate(ds.group_names["group"])}
    ppr = {k: p[g == code[k]].mean() for k in ("0", "1")}
    assert ppr["0"] >= 0.8 * ppr["1"] - 1e-9           # met on train, in expectation
    final = res["solutions"]["final"]["train"]
    expected_error = float(np.mean(np.where(y == 1, 1 - p, p)))
    assert final["objective"] == pytest.approx(expected_error, abs=1e-6)
    (value,) = [c["value"] for c in final["constraints"].values()]
    assert value == pytest.approx(0.8 * ppr["1"] - ppr["0"], abs=1e-6)
    # the deterministic classifier is reported, thresholded at 0 (not guaranteed feasible)
    det = res["training"]["mm"]["deterministic"]["train"]
    assert det["error"] == pytest.approx(float(np.mean((z > 0) != (y == 1))), abs=1e-6)


def test_every_mm_round_is_recorded_feasible_and_monotone(mm_run):
    res = json.loads((mm_run.run_dir / "results.json").read_text())
    mm = res["training"]["mm"]
    res_train = load_splits(res["config"]["data"], res["config"]["seed"]).train
    assert mm["start"] == "zero" and mm["lam"] == pytest.approx(1 / len(res_train))
    rounds = mm["rounds"]
    assert 2 <= len(rounds) <= 4 and rounds[0]["round"] == 0
    for before, after in zip(rounds, rounds[1:], strict=False):
        assert after["objective"] <= before["objective"] + after["gap"] + 1e-9
        assert max(after["constraints"]) <= 1e-9
        assert after["gap"] <= 1e-5
    assert any("mm:" in line for line in mm_run_lines(res))


def mm_run_lines(res):
    from fairgames.train.method import summary_lines
    return summary_lines(res)


@pytest.mark.parametrize(("extra", "needle"), [
    (["+problem.constraints.fair='ppr(group=0) >= -0.5 * ppr(group=1)'"],
     "holds for every classifier"),
    (["+problem.constraints.fair='ppr(group=0) / ppr(group=1) >= 0.8'"], "MM plays combinations"),
])
def test_what_mm_cannot_play_is_a_config_error(compose_cfg, tmp_path, extra, needle):
    with pytest.raises(ConfigError, match=needle):
        run(compose_cfg(*MM, *extra), run_dir=tmp_path)


@pytest.mark.parametrize(("overrides", "needle"), [
    (["model=mlp"], "algorithm=mm trains a linear model"),
    (["model.output=unit"], "ramp reads raw scores"),
    (["trainer.resume=true"], "whole MM rounds"),
    (["algorithm.rounds=0"], "algorithm.rounds"),
])
def test_what_mm_cannot_honour_is_refused_before_training(compose_cfg, overrides, needle):
    from fairgames.train import validate
    with pytest.raises(ConfigError, match=needle):
        validate(compose_cfg("algorithm=mm", "data=synthetic", "trainer=smoke", *overrides))


def test_the_mm_keys_are_refused_by_the_other_algorithms(compose_cfg):
    from fairgames.train import validate
    with pytest.raises(ConfigError, match="only algorithm=mm reads it"):
        validate(compose_cfg("algorithm=lagrangian", "algorithm.round_gap=0.05"))
