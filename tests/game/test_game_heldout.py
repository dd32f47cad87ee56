"""The two-dataset game (Cotter et al. 2019): ``record_heldout`` gives every player but θ the
held-out rates — the multipliers' step is the held-out violation (numpy), the slacks and
multipliers play exactly as a game whose batch is the held-out data, θ's step is untouched —
and clear errors. That a step with a held-out record makes no host sync is tested with the
other games' steps (``test_game_optimizer.py``, the ``+heldout`` cases)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.game import ConstrainedOptimizer, GradientAscent, Problem
from fairgames.rates import (
    Batch,
    error_rate,
    fmeasure,
    group,
    kld,
    true_positive_rate,
)

TRAIN, HELDOUT = torch.arange(0, 600), torch.arange(1000, 1800)


def tpr_parity(gap: float):
    tpr = [true_positive_rate(group("group", v)) for v in ("0", "1")]
    return [(tpr[1] >= tpr[0] - gap).named("gap_10"), (tpr[0] >= tpr[1] - gap).named("gap_01")]


def _batch(model, ds, idx, helpers, grad: bool = True) -> Batch:
    with torch.set_grad_enabled(grad):
        scores = model(ds.features[idx])[:, 0]
    return Batch(scores=scores, **helpers.fields(ds, idx))


def test_multipliers_step_on_the_heldout_violation_and_theta_on_its_batch(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    twin = torch.nn.Linear(5, 1)
    twin.load_state_dict(model.state_dict())
    player = GradientAscent(2, lr=1.0, radius=1e6)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                multipliers=player)
    plain = ConstrainedOptimizer(problem, torch.optim.SGD(twin.parameters(), lr=0.1),
                                 multipliers=GradientAscent(2, lr=1.0, radius=1e6))
    with torch.no_grad():
        pred = (model(synthetic.features)[:, 0] > 0).numpy()
    y, g = synthetic.labels.numpy() == 1, synthetic.groups["group"].numpy()
    gains = []
    copt.zero_grad()
    copt.lagrangian(_batch(model, synthetic, TRAIN, helpers)).backward()
    for half in HELDOUT.chunk(2):     # two records average, as lagrangian()'s do
        copt.record_heldout(_batch(model, synthetic, half, helpers, grad=False))
        h = half.numpy()
        d = pred[h][y[h] & (g[h] == 0)].mean() - pred[h][y[h] & (g[h] == 1)].mean()
        gains.append([d - 0.05, -d - 0.05])
    copt.step()
    plain.step_batch(twin, synthetic.features[TRAIN], **helpers.fields(synthetic, TRAIN))
    expected = np.mean(gains, axis=0)
    np.testing.assert_allclose(copt.last.rows_true.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(player.weights()[1].numpy(), np.maximum(expected, 0), atol=1e-6)
    # The train batch's own violation differs, so the test can tell the two apart ...
    t = TRAIN.numpy()
    d_train = pred[t][y[t] & (g[t] == 0)].mean() - pred[t][y[t] & (g[t] == 1)].mean()
    assert abs(d_train - (expected[0] + 0.05)) > 1e-3
    np.testing.assert_allclose(plain.last.rows_true.numpy(),
                               [d_train - 0.05, -d_train - 0.05], atol=1e-6)
    # ... and θ took the same step as without a held-out record (λ_0 is the same).
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)


def _problem(case: str) -> tuple[Problem, dict]:
    a, b = group("group", "0"), group("group", "1")
    if case == "algorithm3":        # ratio slacks (a, b) of F-measure parity
        return Problem(-fmeasure(), [fmeasure(b) >= fmeasure(a) - 0.02]), {"preset": "algorithm3"}
    if case == "kld_algorithm2":    # ψ slacks of KLD
        return Problem(kld(a) + kld(b), [error_rate() <= 0.3]), {"preset": "algorithm2"}
    return Problem(error_rate(), tpr_parity(0.05)), {"preset": "proxy_lagrangian"}


@pytest.mark.parametrize("case", ["proxy_lagrangian", "algorithm3", "kld_algorithm2"])
def test_the_game_plays_as_if_its_batch_were_the_heldout_data(synthetic, helpers, case):
    # With θ frozen, a game fed train batches plus held-out records and a game fed the
    # held-out data itself must play the same multipliers, slacks and violations.
    problem, options = _problem(case)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    games = [ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                                  **options) for _ in range(2)]
    with torch.no_grad():         # a model that is not constant on the data
        model.weight.copy_(torch.linspace(-1.0, 1.0, 5))
    for _ in range(15):
        two, one = games
        two.zero_grad()
        two.lagrangian(_batch(model, synthetic, TRAIN, helpers)).backward()
        two.record_heldout(_batch(model, synthetic, HELDOUT, helpers, grad=False))
        two.step()
        one.step_batch(model, synthetic.features[HELDOUT], **helpers.fields(synthetic, HELDOUT))
    two, one = games
    assert torch.allclose(two.last.rows_true, one.last.rows_true, atol=1e-6)
    assert torch.allclose(two.last.multipliers, one.last.multipliers, atol=1e-6)
    assert torch.allclose(two.last.slacks, one.last.slacks, atol=1e-6)
    assert torch.allclose(two.last.leaves_true, one.last.leaves_true, atol=1e-6)
    assert two.last.multipliers.abs().sum() > 0      # the game moved


def test_bad_heldout_calls_raise_clear_errors(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match="record_heldout\\(\\) takes a fairgames.rates.Batch"):
        copt.record_heldout(synthetic.features)
    copt.record_heldout(_batch(model, synthetic, HELDOUT, helpers, grad=False))
    with pytest.raises(RuntimeError, match="record_heldout"):
        copt.state_dict()
    with pytest.raises(RuntimeError, match="needs the values of a lagrangian"):
        copt.step()        # a held-out record alone is no step: θ has nothing to descend
    best = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset="algorithm1")
    with pytest.raises(ValueError, match="gradient θ-player"):
        best.record_heldout(_batch(model, synthetic, HELDOUT, helpers, grad=False))
