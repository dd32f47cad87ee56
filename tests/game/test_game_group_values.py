"""Group value names declared once, on the problem (``Problem(group_values=...)``): the
optimizer's ``batch`` and ``step_batch`` fill them in; a batch may still override them."""

from __future__ import annotations

import pytest
import torch

from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.problems import ProblemSpec
from fairgames.rates import Batch, RatesError, error_rate, group
from fairgames.rates import true_positive_rate as tpr

NAMES = {"g": ["a", "b", "c"]}


def _data(n=300, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=gen)
    g = torch.randint(0, 3, (n,), generator=gen)
    y = ((x[:, 0] + 0.5 * g - 0.5 + 0.3 * torch.randn(n, generator=gen)) > 0).float()
    return x, y, g


def _problem(**kw):
    return Problem(error_rate(), [tpr(group("g", v)) >= tpr() - 0.05 for v in ("a", "c")], **kw)


def test_declared_once_the_games_play_as_with_names_in_every_batch():
    x, y, g = _data()
    runs = []
    for declared in (True, False):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        copt = ConstrainedOptimizer(_problem(group_values=NAMES if declared else None),
                                    torch.optim.SGD(model.parameters(), lr=0.1))
        for _ in range(15):
            fields = {"labels": y, "groups": {"g": g}}
            if not declared:
                fields["group_values"] = NAMES
            copt.step_batch(model, x, **fields)
        runs.append((model.weight.detach().clone(), copt.weights()[1].clone()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_batch_fills_the_names_and_a_batch_may_override_them():
    copt = ConstrainedOptimizer(_problem(group_values=NAMES),
                                torch.optim.SGD(torch.nn.Linear(3, 1).parameters(), lr=0.1))
    codes = torch.tensor([0, 1, 2, 1])
    made = copt.batch(torch.zeros(4), torch.ones(4), groups={"g": codes})
    direct = Batch(scores=torch.zeros(4), labels=torch.ones(4), groups={"g": codes},
                   group_values=NAMES)
    assert made.group_values == direct.group_values == NAMES
    other = copt.batch(torch.zeros(4), torch.ones(4), groups={"g": codes},
                       group_values={"g": ["x", "y", "z"]})
    assert other.group_values == {"g": ["x", "y", "z"]}


def test_undeclared_names_are_asked_for_and_bad_declarations_refused():
    copt = ConstrainedOptimizer(_problem(),
                                torch.optim.SGD(torch.nn.Linear(3, 1).parameters(), lr=0.1))
    with pytest.raises(RatesError, match="group_values"):
        copt.batch(torch.zeros(4), torch.ones(4), groups={"g": torch.tensor([0, 1, 2, 1])})
    for bad in ({"g": "abc"}, {"g": []}):
        with pytest.raises(ValueError, match="group_values"):
            _problem(group_values=bad)


def test_a_built_problem_carries_the_names_it_was_compiled_against():
    spec = ProblemSpec("eo", "error()", {"tpr": "for g in groups: tpr(group=g) >= tpr() - 0.05"},
                       tolerance=0.05, tolerance_kind="difference")
    built = spec.build("g", NAMES)
    assert built.group_values == NAMES
    problem = Problem(built.objective, built.constraints, group_values=built.group_values)
    assert problem.group_values == NAMES
