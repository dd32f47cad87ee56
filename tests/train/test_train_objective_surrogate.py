"""``algorithm.objective_surrogate`` on the command line: θ's objective under its own
surrogate, recorded in results.json; refused where the objective is not affine."""

from __future__ import annotations

import pytest

from fairgames.train import ConfigError, run, validate


def test_logistic_objective_run_records_it_and_reports_the_error(train_run):
    result = train_run("objective_surrogate", "algorithm.objective_surrogate=logistic")
    training = result.results["training"]
    assert training["objective_surrogate"] == "logistic"
    assert training["surrogate"] == "hinge"     # the constraints' (auto on equal opportunity)
    test = result.results["solutions"]["recommended"]["test"]
    assert test["objective"] == pytest.approx(test["error"])   # the 0/1 error, not the loss
    default = train_run("objective_surrogate_default")
    assert default.results["training"]["objective_surrogate"] is None


def test_objective_surrogate_is_refused_where_it_cannot_apply(compose_cfg):
    with pytest.raises(ConfigError, match="algorithm.objective_surrogate"):
        validate(compose_cfg("algorithm.objective_surrogate=cross_entropy"))
    with pytest.raises(ConfigError, match="not affine in the rates"):
        run(compose_cfg("data=synthetic", "data.n=600", "trainer=smoke", "trainer.steps=5",
                        "problem=fmeasure", "algorithm.objective_surrogate=logistic"))
    with pytest.raises(ConfigError, match="algorithm.objective_surrogate"):
        validate(compose_cfg("algorithm=reduction", "problem=sp_regression", "data=law",
                             "algorithm.objective_surrogate=logistic"))
