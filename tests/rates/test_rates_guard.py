"""The CPU guard: a minibatch training step through the rates layer makes no host sync, and the
guard does catch the syncs it is meant to catch (so the first test can fail)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fairgames.rates as R
from fairgames.rates import Batch, RateEvaluator, group, no_host_sync

D, N = 8, 256


def problem():
    a, b, u = group("g", "a"), group("g", "b"), group("s", "u")
    return [
        (R.true_positive_rate(a) - R.true_positive_rate(b) <= 0.05).named("tpr_gap"),
        R.fmeasure() >= R.fmeasure(a) - 0.02,
        R.error_rate(u) <= 0.3,
        R.churn_rate() <= 0.2,
        R.group_loss("logistic", b) <= 0.7,
        R.gmean(),
        *R.score_rates([0.0, 0.5], a),
    ]


def data(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=gen)
    y = (x[:, 0] + torch.randn(N, generator=gen) > 0).float()
    g = torch.randint(0, 3, (N,), generator=gen)
    soft = torch.rand(N, 2, generator=gen) / 2
    base = torch.randn(N, generator=gen)
    return x, y, g, soft, base


def step(model, ev, items, x, y, g, soft, base, idx):
    """One training-mode minibatch step: scores, fused rates, Lagrangian-like loss, backward."""
    s = model(x[idx])[:, 0]
    batch = Batch(scores=s, labels=y[idx], groups={"g": g[idx], "s": soft[idx]},
                  group_values={"g": ["a", "b", "c"], "s": ["u", "v"]},
                  baseline_scores=base[idx])
    values = ev(batch)
    multipliers = torch.linspace(0.1, 1.0, len(values.upper))
    loss = F.binary_cross_entropy_with_logits(s, y[idx]) + (multipliers * values.upper).sum()
    loss = loss - values.lower.mean()
    for it in items:   # the true values, as the λ-player reads them, stay on the device
        expr = it.expression if isinstance(it, R.Constraint) else it
        loss = loss + 0.0 * expr.evaluate(values, "true")
    loss.backward()
    return values


def test_minibatch_evaluation_and_backward_make_no_host_sync():
    torch.manual_seed(0)
    model = torch.nn.Linear(D, 1)
    items = problem()
    ev = RateEvaluator(items).train()
    x, y, g, soft, base = data()
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    step(model, ev, items, x, y, g, soft, base, perm[:64])    # warm-up: compiles the plan
    before = ev.running_decay_power.clone()
    with no_host_sync():
        for k in range(1, 4):
            model.zero_grad()
            values = step(model, ev, items, x, y, g, soft, base, perm[64 * k: 64 * (k + 1)])
    assert all(p.grad is not None for p in model.parameters())
    assert bool(torch.isfinite(values.upper).all())
    assert float(ev.running_decay_power) == pytest.approx(float(before) * 0.99 ** 3)
    ev.check_finite()   # syncs, outside the guard: nothing non-finite was seen


@pytest.mark.parametrize("sync", [
    lambda t: t.sum().item(),
    lambda t: bool(t.sum() > 0),
    lambda t: float(t.mean()),
    lambda t: t.nonzero(),
    lambda t: t[t > 0],
    lambda t: torch.unique(t),
    lambda t: torch.equal(t, t),
    lambda t: t.repeat_interleave((t > 0).long()),
], ids=["item", "bool", "float", "nonzero", "mask_index", "unique", "equal", "repeat"])
def test_guard_catches_host_syncs(sync):
    t = torch.randn(10)
    sync(t)   # fine outside the guard
    with pytest.raises(RuntimeError, match="host-device sync"):
        with no_host_sync():
            sync(t)


def test_guard_catches_a_sync_inside_backward_and_inside_the_rates_layer():
    class SyncingIdentity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            if grad.sum().item() > 1e30:   # a data-dependent branch: a sync
                return grad * 0
            return grad

    x = torch.randn(5, requires_grad=True)
    with pytest.raises(RuntimeError, match="host-device sync"):
        with no_host_sync():
            SyncingIdentity.apply(x).sum().backward()
    # whole-split evaluation syncs by design (it checks values and names empty subsets)
    ev = RateEvaluator([R.error_rate()])
    b = Batch(scores=torch.randn(4), labels=torch.tensor([0.0, 1.0, 1.0, 0.0]))
    ev(b)
    with pytest.raises(RuntimeError, match="host-device sync"):
        with no_host_sync():
            ev.evaluate_split([b])
