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


def test_a_problems_objective_surrogate_is_the_default_and_none_turns_it_off(train_run):
    """``problem.objective_surrogate`` (a problem file's recommendation: demographic parity's
    is the cross-entropy) reaches θ where ``algorithm.objective_surrogate`` is null; ``none``
    turns it off; the two runs differ and both report the 0/1 error."""
    dp = train_run("dp_logistic", "problem=demographic_parity")
    off = train_run("dp_none", "problem=demographic_parity", "algorithm.objective_surrogate=none")
    assert dp.results["training"]["objective_surrogate"] == "logistic"
    assert off.results["training"]["objective_surrogate"] is None
    assert dp.results["config"]["problem"]["objective_surrogate"] == "logistic"
    a, b = (r.results["training"]["objective_weight"] for r in (dp, off))
    final = [r.results["solutions"]["final"]["train"]["objective"] for r in (dp, off)]
    assert (a, final[0]) != (b, final[1])
    for r in (dp, off):
        train = r.results["solutions"]["recommended"]["train"]
        assert train["objective"] == pytest.approx(train["error"])


def test_a_problems_objective_surrogate_is_checked(compose_cfg):
    with pytest.raises(ConfigError, match="problem.objective_surrogate"):
        validate(compose_cfg("problem=demographic_parity",
                             "problem.objective_surrogate=cross_entropy"))
    # the problem's own recommendation on an objective it cannot bound names the problem key
    with pytest.raises(ConfigError, match="problem.objective_surrogate=logistic"):
        run(compose_cfg("data=synthetic", "data.n=600", "trainer=smoke", "trainer.steps=5",
                        "problem=demographic_parity", "problem.objective_surrogate=logistic",
                        "problem.objective='1 - fmeasure()'"))
    # algorithm=reduction fits the exact Lagrangian: the problem's recommendation is not used,
    # and `none` is accepted there
    validate(compose_cfg("algorithm=reduction", "problem=sp_regression", "data=law",
                         "algorithm.objective_surrogate=none"))


def test_under_a_process_group_the_message_names_the_key_that_works():
    """Issue 55: ``problem=demographic_parity`` under torchrun said "leave
    objective_surrogate unset" though the user set nothing (its problem file's default);
    the key that turns it off is ``algorithm.objective_surrogate=none``. Checked with the
    distributed flag rather than torchrun."""
    from fairgames.rates import error_rate
    from fairgames.train.config import AlgorithmConfig
    from fairgames.train.problem import objective_surrogate_setting
    # the problem file's default (the user set nothing)
    with pytest.raises(ConfigError, match=r"problem\.objective_surrogate=logistic.*"
                                          r"algorithm\.objective_surrogate=none"):
        objective_surrogate_setting(AlgorithmConfig(), "logistic", error_rate(), 1.0,
                                    parallel=True)
    # the user's own setting
    with pytest.raises(ConfigError, match=r"algorithm\.objective_surrogate=logistic.*"
                                          r"algorithm\.objective_surrogate=none"):
        objective_surrogate_setting(AlgorithmConfig(objective_surrogate="logistic"), None,
                                    error_rate(), 1.0, parallel=True)
    # what the message says works: none, under a process group, and the default in one process
    assert objective_surrogate_setting(AlgorithmConfig(objective_surrogate="none"), "logistic",
                                       error_rate(), 1.0, parallel=True) is None
    assert objective_surrogate_setting(AlgorithmConfig(), "logistic", error_rate(), 1.0,
                                       parallel=False).kind == "logistic"
