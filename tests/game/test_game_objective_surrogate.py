"""Problem(objective_surrogate=...): θ bounds an affine objective under its own surrogate while
the constraints keep the problem's; the game's records and reports keep the 0/1 objective."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fairgames.game import BestResponsePlayer, ConstrainedOptimizer, Problem
from fairgames.game.problem import ObjectiveBound
from fairgames.rates import (
    Batch,
    Surrogate,
    error_rate,
    fmeasure,
    group,
    positive_prediction_rate,
    true_positive_rate,
)


def _data(n: int = 400, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = (x[:, 0] + 0.5 * torch.randn(n, generator=g) > 0).float()
    a = (torch.rand(n, generator=g) < 0.4).long()
    w = torch.rand(n, generator=g) + 0.5
    return x, y, a, w


def _batch(scores, y, a, w=None) -> Batch:
    return Batch(scores=scores, labels=y, groups={"g": a}, group_values={"g": ["0", "1"]},
                 weights=w)


def _parity(gap: float = 0.02):
    ppr = [positive_prediction_rate(group("g", v)) for v in ("0", "1")]
    return {"hi": ppr[1] <= ppr[0] + gap, "lo": ppr[1] >= ppr[0] - gap}


def test_logistic_bound_of_the_error_is_the_weighted_cross_entropy_in_bits():
    x, y, a, w = _data()
    s = (x @ torch.tensor([1.0, -0.5, 0.3])).requires_grad_(True)
    bound = ObjectiveBound(error_rate(), Surrogate("logistic"), {})
    value = bound(_batch(s, y, a, w), torch.tensor(0.7))
    value.backward()
    # reference: numpy cross-entropy of the weighted rows, in bits, times ω
    sn, yn, wn = s.detach().double().numpy(), y.double().numpy(), w.double().numpy()
    ce = np.where(yn == 1, np.logaddexp(0, -sn), np.logaddexp(0, sn)) / math.log(2.0)
    assert float(value) == pytest.approx(0.7 * (wn * ce).sum() / wn.sum(), rel=1e-5)
    sig = 1.0 / (1.0 + np.exp(-sn))
    grad = 0.7 * wn * (sig - yn) / math.log(2.0) / wn.sum()
    np.testing.assert_allclose(s.grad.double().numpy(), grad, rtol=1e-4, atol=1e-8)


def test_theta_sees_the_objective_bound_plus_the_constraints_own_surrogate():
    x, y, a, _ = _data()
    model = torch.nn.Linear(3, 1)
    own = ConstrainedOptimizer(Problem(error_rate(), _parity(), surrogate="hinge",
                                       objective_surrogate="logistic"),
                               torch.optim.SGD(model.parameters(), lr=0.0), preset="lagrangian")
    # constraints alone under the hinge: the same problem with a constant objective
    cons = ConstrainedOptimizer(Problem(error_rate() * 0.0 + 0.3, _parity(), surrogate="hinge",
                                        loss=lambda s, b: s.sum() * 0.0),
                                torch.optim.SGD(model.parameters(), lr=0.0), preset="lagrangian")
    for copt in (own, cons):   # the same multipliers in both games
        for p in copt.players:
            if p.name == "multipliers":
                p.lam.data.copy_(torch.tensor([0.3, 0.8]))
    s = model(x)[:, 0]
    omega, lam = own.weights()
    assert float(omega) == 1.0 and lam.tolist() == pytest.approx([0.3, 0.8])
    got = own.lagrangian(_batch(s, y, a))
    ref = (ObjectiveBound(error_rate(), Surrogate("logistic"), {})(_batch(s, y, a), omega)
           + cons.lagrangian(_batch(s, y, a)))
    assert float(got) == pytest.approx(float(ref), rel=1e-6)
    g_got = torch.autograd.grad(got, model.weight, retain_graph=True)[0]
    g_ref = torch.autograd.grad(ref, model.weight)[0]
    torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-7)
    # the game still records the 0/1 error as the objective
    own.step()
    err = float(((s.detach() > 0).float() != y).float().mean())
    assert float(own.last.objective_true) == pytest.approx(err, abs=1e-6)


def test_training_with_the_logistic_objective_meets_the_constraint_and_beats_chance():
    x, y, a, _ = _data(2000, seed=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    tpr = [true_positive_rate(group("g", v)) for v in ("0", "1")]
    problem = Problem(error_rate(), [tpr[1] >= tpr[0] - 0.02, tpr[0] >= tpr[1] - 0.02],
                      objective_surrogate="logistic")
    copt = ConstrainedOptimizer(problem, torch.optim.Adam(model.parameters(), lr=0.05))
    for _ in range(300):
        copt.zero_grad()
        copt.lagrangian(_batch(model(x)[:, 0], y, a)).backward()
        copt.step()
    with torch.no_grad():
        pred = (model(x)[:, 0] > 0).numpy()
    yn, an = y.numpy().astype(bool), a.numpy()
    rates = [pred[yn & (an == v)].mean() for v in (0, 1)]
    assert abs(rates[0] - rates[1]) <= 0.06     # near the 0.02 bound (last iterate)
    assert (pred != yn).mean() < 0.25           # the majority class errs at ~0.5


def test_objective_surrogate_refuses_what_it_cannot_bound():
    with pytest.raises(ValueError, match="affine in the rates"):
        Problem(1.0 - fmeasure(), _parity(), objective_surrogate="logistic")
    with pytest.raises(ValueError, match="objective over rates"):
        Problem(None, _parity(), loss=lambda s, b: s.mean(), objective_surrogate="logistic")
    with pytest.raises(ValueError, match="unknown surrogate"):
        Problem(error_rate(), _parity(), objective_surrogate="cross_entropy")
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="oracle"):
        ConstrainedOptimizer(Problem(error_rate(), _parity(), objective_surrogate="logistic"),
                             torch.optim.SGD(model.parameters(), lr=0.1),
                             theta=BestResponsePlayer(oracle=lambda costs, omega: None))


def test_the_default_is_unchanged():
    p = Problem(error_rate(), _parity())
    assert p.objective_surrogate is None and p.make_objective_bound() is None
    assert not p.terms.affine.costs_without_objective
