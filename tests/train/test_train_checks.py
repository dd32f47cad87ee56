"""The config-check registry: a group, preset or player adds its keys and rules without
editing ``validate``, and every problem still arrives in one ConfigError."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from fairgames.train import ConfigError, validate
from fairgames.train.config.checks import (
    Checks,
    register_validator,
    unregister_validator,
    value_errors,
)


def _dual_decay(cfg, check: Checks) -> None:
    check.positive("algorithm.dual_decay", cfg.algorithm.get("dual_decay", 1.0))


@pytest.fixture
def dual_decay_rule():
    register_validator("algorithm", _dual_decay, keys=("dual_decay",))
    yield
    unregister_validator("algorithm", _dual_decay)


def test_a_registered_rule_is_listed_with_the_built_in_ones(compose_cfg, dual_decay_rule):
    cfg = compose_cfg("+algorithm.dual_decay=-2", "trainer.device=gpu", "optimizer.lr=-1",
                      "seed=-1")
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid config:"
    # One message, in group order: optimizer, algorithm (built-in, then the plug-in), trainer,
    # seed.
    assert [ln.strip().split("=")[0] for ln in lines[1:]] == [
        "optimizer.lr", "algorithm.dual_decay", "trainer.device", "seed"]
    assert "algorithm.dual_decay=-2: must be positive and finite" in lines[2]


def test_a_declared_key_is_known_and_an_undeclared_one_is_not(compose_cfg, dual_decay_rule):
    validate(compose_cfg("+algorithm.dual_decay=0.5"))      # declared: accepted, value fine
    with pytest.raises(ConfigError, match=r"unknown key algorithm.dual_dacay; algorithm takes "
                                          r"\[.*'dual_decay'"):
        validate(compose_cfg("+algorithm.dual_dacay=0.5"))


def test_an_unregistered_rule_no_longer_runs(compose_cfg):
    register_validator("algorithm", _dual_decay, keys=("dual_decay",))
    cfg = compose_cfg("+algorithm.dual_decay=-2")
    assert value_errors(cfg, groups=["algorithm"]) == [
        "algorithm.dual_decay=-2: must be positive and finite"]
    unregister_validator("algorithm", _dual_decay)
    assert value_errors(cfg, groups=["algorithm"]) == []
    with pytest.raises(ConfigError, match="unknown key algorithm.dual_decay"):
        validate(cfg)


def test_checks_match_the_documented_rules():
    check = Checks()
    check.positive("a", None, allow_none=True)       # allowed
    check.positive("b", None)                        # must be set
    check.positive("c", True)                        # a bool is not a number
    check.positive("d", 1.5, integer=True)           # not an integer
    check.positive("e", 0, zero=True)                # zero allowed
    check.positive("f", 0)                           # zero refused
    check.positive("g", float("nan"))
    check.choice("h", "x", {"b", "a"})
    assert check.errors == [
        "b=None: must be set", "c=True: expected a number", "d=1.5: expected a number",
        "f=0: must be positive and finite", "g=nan: must be positive and finite",
        "h='x': expected one of ['a', 'b']"]


def test_validate_still_takes_a_dataclass():
    from fairgames.train import ProblemConfig, TrainConfig

    cfg = TrainConfig(problem=ProblemConfig("p", objective="error()"))
    validate(cfg)
    cfg.trainer.steps = 0
    with pytest.raises(ConfigError, match="trainer.steps=0"):
        validate(cfg)
    assert OmegaConf.structured(cfg).trainer.steps == 0
