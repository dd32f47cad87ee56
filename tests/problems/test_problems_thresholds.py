"""Threshold grids in the problem language (paper 003's statistical parity): the
``for g in groups, z in thresholds:`` form, ``score_at_least``, their errors, and compiled rows
whose exact values equal :func:`fairgames.rates.threshold_rates`' gaps."""

from __future__ import annotations

import pytest
import torch

from fairgames import rates as R
from fairgames.problems import (
    Environment,
    ProblemError,
    ProblemSpec,
    ProblemSyntaxError,
    compile_constraint,
    compile_expression,
    free_names,
    load_problem,
    parse,
)

GROUPS = {"race": ["non_white", "white", "other"]}
HIGH = ("for g in groups, z in thresholds: "
        "score_at_least(z, group=g) <= score_at_least(z) + tolerance")
LOW = ("for g in groups, z in thresholds: "
       "score_at_least(z, group=g) >= score_at_least(z) - tolerance")


def _env(n: int = 5) -> Environment:
    return Environment("race", GROUPS, {"tolerance": 0.05}, grid_size=n)


def test_two_loops_parse_with_their_columns_and_bind_both_names():
    tree = parse(HIGH, "constraint")
    assert [(v, it.id, it.pos) for v, it in tree.loops] == [
        ("g", "groups", HIGH.index("groups")), ("z", "thresholds", HIGH.index("thresholds"))]
    assert free_names(tree) == {"groups", "thresholds", "tolerance"}


def test_one_row_per_group_and_threshold_named_by_both():
    rows = compile_constraint(HIGH, _env(4), "sp")
    assert len(rows) == 3 * 4
    assert [c.name for c in rows[:5]] == ["sp[non_white,0.25]", "sp[non_white,0.5]",
                                          "sp[non_white,0.75]", "sp[non_white,1]",
                                          "sp[white,0.25]"]
    assert all(c.sense == "<=" for c in rows)


@pytest.mark.parametrize("source, token, fragment", [
    ("for g in groups, g in thresholds: score_at_least(g) <= 0.5", "g in thresholds",
     "loop variable 'g' is used twice"),
    ("for g in groups, z in thresholdz: score_at_least(z, group=g) <= 0.5", "thresholdz",
     "did you mean 'thresholds'"),
    ("for g in groups z in thresholds: score_at_least(z) <= 0.5", "z in",
     "expected ':' (or ', name in ...' for another loop)"),
    ("for g in groups, z: score_at_least(z) <= 0.5", ":", "expected 'in'"),
    ("for z in thresholds: score_at_least(thresholds) <= 0.5", "thresholds)",
     "'thresholds' can only be looped over"),
    ("for z in thresholds: score_at_least(group=1) <= 0.5", "score_at_least(group=1)",
     "score_at_least() needs z"),
    ("for z in thresholds: score_at_least('a') <= 0.5", "score_at_least('a')",
     "z of score_at_least() must be a number"),
])
def test_errors_point_at_the_token(source, token, fragment):
    with pytest.raises(ProblemSyntaxError) as info:
        compile_constraint(source, _env(), "sp")
    assert fragment in str(info.value)
    assert info.value.position == source.index(token)


def test_thresholds_also_loop_inside_sum():
    e = compile_expression("sum(score_at_least(z) for z in thresholds)", _env(4))
    assert len(e.leaves()) == 4


def test_compiled_rows_equal_threshold_rates_gaps_on_a_split():
    """γ̂_{a,z} of every compiled row (exact, float64) is threshold_rates' gap, with ties at
    grid points (scores on the grid) and a group of 3 rows."""
    n, size, tol = 403, 8, 0.05
    g = torch.Generator().manual_seed(5)
    scores = torch.rand(n, generator=g, dtype=torch.float64)
    scores[:60] = torch.randint(0, size + 1, (60,), generator=g).double() / size   # ties
    codes = torch.randint(0, 2, (n,), generator=g)
    codes[:3] = 2
    env = Environment("race", GROUPS, {"tolerance": tol}, grid_size=size)
    high, low = compile_constraint(HIGH, env, "hi"), compile_constraint(LOW, env, "lo")
    ev = R.RateEvaluator([c.expression for c in high + low])
    batch = R.Batch(scores=scores, labels=torch.rand(n, generator=g, dtype=torch.float64),
                    label_kind="real", groups={"race": codes}, group_values=GROUPS)
    values = ev.evaluate_split([batch])
    ref = R.threshold_rates(scores, codes, 3, R.threshold_grid(size)).gaps      # [3, N]
    got_hi = torch.stack([c.expression.evaluate(values) for c in high]).reshape(3, size)
    got_lo = torch.stack([c.expression.evaluate(values) for c in low]).reshape(3, size)
    torch.testing.assert_close(got_hi.double(), ref - tol, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_lo.double(), -ref - tol, rtol=0, atol=1e-12)


def test_target_loss_follows_the_label_kind():
    spec = load_problem("sp_regression")
    real = spec.build("race", GROUPS, label_kind="real")
    binary = spec.build("race", GROUPS, label_kind="binary")
    assert "squared" in str(real.objective) and "bounded_logistic" in str(binary.objective)
    assert len(real.constraints) == 2 * 3 * 40          # 2·|𝒜|·N one-sided rows, N = 40
    with pytest.raises(ProblemError, match="reads target_loss.*label kind"):
        spec.build("race", GROUPS)


@pytest.mark.parametrize("size", [0, -3, 2.5, True])
def test_a_bad_grid_size_is_refused(size):
    with pytest.raises(ProblemError, match="grid_size must be a positive whole number"):
        ProblemSpec("sp", "group_loss('squared')", {"sp": HIGH}, tolerance=0.05,
                    tolerance_kind="difference", grid_size=size)


def test_a_negative_tolerance_is_refused_naming_the_rows():
    spec = load_problem("sp_regression")
    with pytest.raises(ProblemError, match=r"'sp_high', 'sp_low'.*\[0, 1\).*got -0.01"):
        ProblemSpec(**{**spec.__dict__, "tolerance": -0.01})
    bgl = load_problem("bounded_group_loss")
    with pytest.raises(ProblemError, match=r"'bgl'.*\[0, 1\].*got -0.1"):
        ProblemSpec(**{**bgl.__dict__, "tolerance": -0.1})
