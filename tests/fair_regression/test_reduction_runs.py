"""``algorithm=reduction`` on the command line: paper 003's reduction played from a run
config. Its Q̂ is the run's stochastic solution, and the run's evaluation agrees with the
reduction's own bookkeeping (Lemma 1: loss_α = cost + Ê ℓ(Y, α/2); the mixture's worst
|γ̂| on the grid); the saved solutions are the rounded predictors (a numpy KS recomputation);
an infeasible demand is said plainly; the keys only the reduction reads, and what it cannot
honour, are config errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fairgames.fair_regression.method import outcome_line
from fairgames.game.solutions import load_solution
from fairgames.models import GridRounded, LinearModel
from fairgames.train import ConfigError, run, validate
from fairgames.train.data import load_splits


def _ks(members: np.ndarray, q: np.ndarray, codes: np.ndarray) -> float:
    """max_a sup_z |P_Q[f ≥ z | a] − P_Q[f ≥ z]| over every prediction value (brute force)."""
    points = np.unique(members)
    at_least = members[:, :, None] >= points[None, None, :]
    overall = np.einsum("r,rnp->p", q, at_least) / members.shape[1]
    return max(float(np.abs(np.einsum("r,rnp->p", q, at_least[:, codes == a]) / (codes == a).sum()
                            - overall).max()) for a in np.unique(codes))


@pytest.fixture(scope="module")
def sp_run(compose_cfg, tmp_path_factory):
    cfg = compose_cfg("algorithm=reduction", "problem=sp_regression", "data=crime",
                      "trainer.steps=300", "trainer.log_every=25", "trainer.progress=false",
                      "trainer.bootstrap=0")
    return run(cfg, run_dir=tmp_path_factory.mktemp("reduction_sp"))


def test_the_stochastic_solution_is_the_reductions_mixture_and_its_figures_agree(sp_run):
    res = json.loads((sp_run.run_dir / "results.json").read_text())
    red, result = res["training"]["reduction"], sp_run.extras["reduction"]
    assert sp_run.engine is None and res["config"]["model"]["output"] == "score"
    assert red["outcome"] in ("converged", "max_iterations") and red["iterations"] <= 300
    assert red["game"] == "sp" and red["best_response"] == "ls" and red["loss"] == "squared"
    assert red["certificate"]["violation_ok"] and red["members"] == len(result.model)
    assert red["certificate"]["scope"] == "oracle"      # ls keeps Algorithm 1's reading
    assert res["training"]["stochastic"]["weights"] == pytest.approx(
        result.model.weights.tolist())
    train = res["solutions"]["stochastic"]["train"]
    # the evaluator's loss of the rounded mixture is Lemma 1's loss_α of Q̂ (the game's cost
    # plus Ê ℓ(Y, α/2)), and its worst gap on the grid the game's running max |γ̂|
    assert train["objective"] == pytest.approx(result.history.loss[-1], abs=1e-5)
    assert train["grid_disparity"] == pytest.approx(result.history.worst[-1], abs=1e-5)
    assert len(res["training"]["multipliers"]) == 2 * 2 * 40
    # λ's rows are the problem's constraints, in order
    assert list(res["training"]["multipliers"]) == list(train["constraints"])
    assert sum(res["training"]["multipliers"].values()) <= 10.0 + 1e-9     # ‖λ̂‖₁ ≤ B


def test_the_saved_solutions_are_rounded_predictors_and_their_ks_is_reported(sp_run):
    res = json.loads((sp_run.run_dir / "results.json").read_text())
    splits = load_splits(res["config"]["data"], res["config"]["seed"])
    template = GridRounded(LinearModel(splits.train.num_features), 40)
    mix, meta = load_solution(sp_run.run_dir / "stochastic.pt", template, with_metadata=True)
    assert meta["rounded_to_grid"] == 40
    for split in ("train", "test"):
        ds = getattr(splits, split)
        with torch.no_grad():
            members = mix.scores(ds.features).double().numpy()
        cells = members * 40 - 0.5
        # cell midpoints only (1 from 1 up)
        assert (np.isclose(cells, np.round(cells), atol=1e-4) | (members == 1.0)).all()
        ks = _ks(members, mix.weights.double().numpy(),
                 ds.groups["majority_white"].numpy())
        assert res["solutions"]["stochastic"][split]["ks_disparity"] == pytest.approx(
            ks, abs=1e-5)


def test_tensorboard_and_the_plot_show_the_gap_the_multipliers_and_the_parity(sp_run):
    ea = EventAccumulator(str(sp_run.run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    assert {"reduction/gap", "reduction/nu_over", "reduction/loss", "parity/worst_gap",
            "multiplier/sp_high[yes_0.025]"} <= tags
    assert [e.step for e in ea.Scalars("reduction/loss")] == list(range(25, 301, 25))
    assert (sp_run.run_dir / "dynamics.png").stat().st_size > 0


def test_bgl_below_what_the_model_class_reaches_is_reported_infeasible(compose_cfg, tmp_path,
                                                                        capsys):
    cfg = compose_cfg("algorithm=reduction", "problem=bounded_group_loss", "data=crime",
                      "problem.tolerance=0.0", "algorithm.radius=200", "algorithm.multiplier_lr=20",
                      "algorithm.gap=0.02",
                      "trainer.steps=600", "trainer.progress=false", "trainer.bootstrap=0")
    result = run(cfg, run_dir=tmp_path)
    red = result.results["training"]["reduction"]
    assert red["outcome"] == "infeasible", red
    assert red["certificate"]["max_violation"] > red["certificate"]["violation_bound"]
    assert result.results["training"]["likely_infeasible"] is True
    assert "INFEASIBLE" in outcome_line(red)
    cons = result.results["solutions"]["recommended"]["train"]["constraints"].values()
    assert max(c["violation"] for c in cons) > 0.005          # NOT met on train, and said


def test_a_found_scope_certificate_is_named_in_the_outcome_line():
    record = {"outcome": "converged", "iterations": 9, "gap_target": 0.01,
              "certificate": {"gap": 0.005, "max_violation": 0.0, "violation_bound": 0.1,
                              "scope": "found"}}
    assert "hypotheses found" in outcome_line(record)
    record["certificate"]["scope"] = "oracle"
    assert "hypotheses found" not in outcome_line(record)


@pytest.mark.parametrize(("overrides", "needle"), [
    (["problem=equal_opportunity"], "names none"),
    (["problem=sp_regression", "algorithm.best_response=svm"], "algorithm.best_response"),
    (["problem=sp_regression", "algorithm.surrogate=sigmoid"], "algorithm.surrogate"),
    (["problem=sp_regression", "trainer.batch_size=64"], "trainer.batch_size"),
    (["problem=sp_regression", "algorithm.slack_lr=0.1"], "algorithm.slack_lr"),
    (["problem=sp_regression", "algorithm.multipliers=gradient_ascent"],
     "algorithm.multipliers"),
])
def test_what_the_reduction_cannot_play_is_a_config_error(compose_cfg, overrides, needle):
    cfg = compose_cfg("algorithm=reduction", "data=synthetic", "trainer=smoke", *overrides)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        validate(cfg)
        run(cfg)


def test_the_reductions_own_keys_are_refused_by_the_other_algorithms(compose_cfg):
    cfg = compose_cfg("algorithm=lagrangian", "algorithm.gap=0.05")
    with pytest.raises(ConfigError, match="only algorithm=reduction reads it"):
        validate(cfg)
