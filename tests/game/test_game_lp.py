"""The game's averaged solution reaches the LP optimum of a finite-hypothesis problem.

With a finite set of fixed classifiers, the best stochastic classifier (a distribution ``q``
over them) under rate constraints is a linear program: every rate of the mixture is
``Σ_h q_h R(h)``. Algorithm 1 of paper 000 (θ best-responds with an exact cost-sensitive oracle,
λ plays OGD on the true rates) must bring the uniform mixture of its iterates to the LP's
value and feasibility (Theorem 1: O(1/√T)); scipy's HiGHS is the independent reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from fairgames.game import BestResponsePlayer, ConstrainedOptimizer, Problem
from fairgames.rates import Batch, error_rate, group, true_positive_rate

TOLERANCE = 0.01   # on the objective and on every constraint, after 800 steps


class Selector(torch.nn.Module):
    """A model that outputs the scores of one of H fixed classifiers (the chosen one)."""

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scores", scores)
        self.register_buffer("choice", torch.tensor(0))
        self.unused = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scores[self.choice] + 0.0 * self.unused


@pytest.mark.parametrize("multipliers", ["gradient_ascent", "exponentiated_gradient"])
def test_mixture_of_iterates_reaches_the_lp_optimum(helpers, multipliers):
    from fairgames.data import make_synthetic

    ds = make_synthetic(n=1000, d=5, group_shift=1.5, seed=1).train
    gen = torch.Generator().manual_seed(0)
    w, b = torch.randn(16, 5, generator=gen), 0.5 * torch.randn(16, generator=gen)
    scores = (ds.features @ w.T + b).T                               # [H, N]
    tpr = lambda v: true_positive_rate(group("group", v))  # noqa: E731
    problem = Problem(error_rate(), [tpr("0") - tpr("1") <= 0.05, tpr("1") - tpr("0") <= 0.05])
    ev = problem.make_evaluator()
    f = helpers.fields(ds)
    rates = torch.stack([ev.evaluate_split([Batch(scores=s, **f)]).true for s in scores])
    objective = np.array([float(problem.true_values(r)[0]) for r in rates])
    g = np.stack([problem.true_values(r)[1].numpy() for r in rates])    # [H, C]
    lp = linprog(objective, A_ub=g.T, b_ub=np.zeros(g.shape[1]),
                 A_eq=np.ones((1, len(objective))), b_eq=[1.0], bounds=(0, None),
                 method="highs")
    assert lp.status == 0
    feasible = (g <= 0).all(1)
    # The problem needs a mixture: the best feasible single classifier is clearly worse.
    assert lp.fun < objective[feasible].min() - 0.05

    model = Selector(scores)
    table = rates.double()

    def oracle(costs: torch.Tensor, objective_weight: torch.Tensor) -> None:
        # Exact CSO oracle (Definition 1): the classifier minimising Σ_k c_k R_k.
        model.choice.copy_(torch.argmin(table @ costs.double()))

    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                                preset="algorithm1", multipliers=multipliers,
                                theta=BestResponsePlayer(oracle=oracle), multiplier_lr=0.5)
    counts = np.zeros(len(objective))
    for _ in range(800):
        copt.step_batch(model, ds.features, **f)
        counts[int(model.choice)] += 1
    q = counts / counts.sum()
    assert q @ objective == pytest.approx(lp.fun, abs=TOLERANCE)
    assert (g.T @ q).max() <= TOLERANCE
    assert (q > 0.05).sum() >= 2             # a genuine mixture
