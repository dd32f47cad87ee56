"""The exponentiated-gradient loop's bookkeeping: the paper's start λ₁ = B/(M + 1), the
mixture's weights as iterate shares, the history against the mixture evaluated afresh, the
oracle-call count, determinism under a seed."""

from __future__ import annotations

import pytest
import torch

from fairgames.fair_regression import ReductionConfig, fair_regression
from fairgames.fair_regression.discretize import discretized_loss
from fairgames.rates.losses import SQUARED
from fairgames.rates.thresholds import threshold_grid, threshold_rates


def _data(n: int = 300):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 3, generator=g, dtype=torch.float64)
    codes = (x[:, 0] + 0.3 * torch.rand(n, generator=g, dtype=torch.float64) > 0.6).long()
    y = (0.2 + 0.6 * x[:, 0] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64))
    return x, y.clamp(0, 1), codes


def _linear():
    return torch.nn.Linear(3, 1).double()


def test_start_weights_history_and_calls():
    x, y, codes = _data()
    cfg = ReductionConfig(tolerance=0.02, bound=4.0, gap=1e-6, grid_size=10, step_size=1.0,
                          max_iterations=7, check_every=3)
    r = fair_regression(_linear, x, y, codes, cfg)
    m = 2 * 2 * 10
    assert r.outcome == "max_iterations"
    torch.testing.assert_close(r.history.lambda_hat[0],
                               torch.full((m,), 4.0 / (m + 1), dtype=torch.float64))
    assert r.oracle_calls == 7 + 3 == len(r.oracle_seconds)        # checks at t = 3, 6, 7
    gaps = r.history.gap
    assert [g == g for g in gaps] == [False, False, True, False, False, True, True]
    # weights are shares of the 7 iterates; the history's last loss and |γ̂| are Q̂'s
    q = r.model.weights
    assert torch.allclose(q * 7, (q * 7).round())
    scores = r.model.scores(x).detach()
    loss = sum(float(q[i]) * float(discretized_loss(SQUARED, y, scores[i], 10).mean())
               for i in range(len(q)))
    gamma = threshold_rates(scores, codes, 2, threshold_grid(10), member_weights=q).disparity()
    assert r.history.loss[-1] == pytest.approx(loss, abs=1e-12)
    assert r.history.worst[-1] == pytest.approx(gamma, abs=1e-12)
    assert r.lambda_hat.shape == (m,) and float(r.lambda_hat.sum()) <= 4.0


def test_the_run_is_deterministic_under_a_seed():
    x, y, codes = _data(120)
    cfg = ReductionConfig(tolerance=0.05, bound=2.0, gap=1e-6, grid_size=5, step_size=1.0,
                          max_iterations=4, inner_steps=20, seed=3)

    def net():
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                   torch.nn.Linear(4, 1)).double()

    a = fair_regression(net, x, y, codes, cfg)
    b = fair_regression(net, x, y, codes, cfg)
    assert a.history.loss == b.history.loss and a.history.nu_over == b.history.nu_over
    torch.testing.assert_close(a.model.scores(x), b.model.scores(x), rtol=0, atol=0)
    c = fair_regression(net, x, y, codes, cfg, seed=4)
    assert not torch.equal(c.model.scores(x), a.model.scores(x))
