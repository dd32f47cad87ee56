"""The best-response θ-player of Algorithm 1 / Frank-Wolfe with its inner loop (a FIXED number
of gradient steps on the cost-sensitive surrogate at the current multipliers), on real
training: the oracle path is covered by the LP test (test_game_lp.py)."""

from __future__ import annotations

import numpy as np
import torch

from fairgames.game import BestResponsePlayer, ConstrainedOptimizer, Problem
from fairgames.game.solutions import SnapshotRecorder
from fairgames.rates import Batch, error_rate, group, no_host_sync, true_positive_rate


def _tpr_gap(model, ds) -> float:
    with torch.no_grad():
        pred = (model(ds.features)[:, 0] > 0).numpy()
    y, g = ds.labels.numpy() == 1, ds.groups["group"].numpy()
    return float(pred[y & (g == 0)].mean() - pred[y & (g == 1)].mean())


def _problem() -> Problem:
    t0, t1 = true_positive_rate(group("group", 0)), true_positive_rate(group("group", 1))
    return Problem(error_rate(), [(t0 - t1 <= 0.05).named("gap_10"),
                                  (t1 - t0 <= 0.05).named("gap_01")])


def _algorithm1(problem: Problem, ds, inner_steps: int, multiplier_lr: float | None = None):
    """A linear model and Algorithm 1's optimizer with an inner-loop best response."""
    torch.manual_seed(0)
    model = torch.nn.Linear(ds.features.shape[1], 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset="algorithm1", theta=BestResponsePlayer(steps=inner_steps),
                                multiplier_lr=multiplier_lr)
    return model, copt


def test_inner_loop_descends_on_the_cost_sensitive_surrogate(synthetic, helpers):
    problem = _problem()
    model, copt = _algorithm1(problem, synthetic, inner_steps=10, multiplier_lr=1.0)
    f = helpers.fields(synthetic)
    x = synthetic.features
    for _ in range(5):     # let the multipliers move off zero
        copt.step_batch(model, x, **f)
    omega, lam = (w.detach().clone() for w in copt.multipliers.weights())
    costs = copt.terms.leaf_costs(omega, lam, copt.terms.slack_lo)
    assert bool((costs != 0).any())
    ev = problem.make_evaluator()

    def surrogate_cost() -> float:   # Σ c_k·R̃_k with each leaf's sign-correct bound
        with torch.no_grad():
            values = ev(Batch(scores=model(x)[:, 0], **f), update=False)
            bound = torch.where(costs >= 0, values.upper, values.lower)
            return float((costs * bound).sum())

    before = surrogate_cost()
    copt.step_batch(model, x, **f)      # the inner loop plays against (ω, λ) of this step
    assert surrogate_cost() < before - 1e-4


def test_algorithm1_with_the_inner_loop_meets_tpr_parity(synthetic, helpers):
    free, _ = helpers.train(Problem(error_rate()), synthetic, steps=150)
    assert _tpr_gap(free, synthetic) > 0.2          # the unconstrained model violates it
    model, copt = _algorithm1(_problem(), synthetic, inner_steps=5, multiplier_lr=0.5)
    snapshots = SnapshotRecorder(model, every=5, capacity=100)
    f = helpers.fields(synthetic)
    for _ in range(120):
        copt.step_batch(model, synthetic.features, **f)
        snapshots.step()
    mixture = snapshots.to_stochastic_model()
    with torch.no_grad():
        q = mixture.predict_proba(synthetic.features).double().numpy()
    y, g = synthetic.labels.numpy() == 1, synthetic.groups["group"].numpy()
    mix_gap = q[y & (g == 0)].mean() - q[y & (g == 1)].mean()   # the mixture's exact TPR gap
    assert abs(mix_gap) <= 0.05 + 0.03, mix_gap
    err = np.mean(q * (1 - synthetic.labels.numpy()) + (1 - q) * synthetic.labels.numpy())
    assert err < 0.45


def test_a_best_response_step_makes_no_host_sync(synthetic, helpers):
    model, copt = _algorithm1(_problem(), synthetic, inner_steps=3)
    f = helpers.fields(synthetic)
    copt.step_batch(model, synthetic.features, **f)
    with no_host_sync():
        copt.step_batch(model, synthetic.features, **f)
