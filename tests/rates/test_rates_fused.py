"""The fused pass over 1,000 group rates equals evaluating the rates one by one."""

from __future__ import annotations

import numpy as np
import torch

from fairgames.rates import Batch, RateEvaluator, group, true_positive_rate

K, B = 1000, 4096


def test_fused_evaluation_of_1000_group_rates_equals_one_by_one():
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, K, (B,), generator=gen)     # ~2% of the values are absent
    labels = (torch.rand(B, generator=gen) < 0.4).float()
    weights = torch.rand(B, generator=gen) + 0.5
    scores = (torch.randn(B, generator=gen) * 2).requires_grad_()
    names = [f"g{i}" for i in range(K)]
    fields = {"labels": labels, "weights": weights, "groups": {"attr": codes},
              "group_values": {"attr": names}}
    rates = [true_positive_rate(group("attr", v)) for v in names]
    coef = torch.randn(K, generator=gen)

    fused = RateEvaluator(rates, surrogate="logistic")
    v = fused(Batch(scores=scores, **fields))
    (grad_fused,) = torch.autograd.grad((coef * v.upper).sum() - (coef * v.lower).sum(), scores)

    true, upper, lower = (torch.empty(K) for _ in range(3))
    grad_single = torch.zeros(B)
    for i, r in enumerate(rates):
        one = RateEvaluator([r], surrogate="logistic")(Batch(scores=scores, **fields))
        true[i], upper[i], lower[i] = one.true[0], one.upper[0].detach(), one.lower[0].detach()
        (g,) = torch.autograd.grad(coef[i] * (one.upper[0] - one.lower[0]), scores)
        grad_single += g
    torch.testing.assert_close(v.true, true, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v.upper.detach(), upper, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v.lower.detach(), lower, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_fused, grad_single, rtol=1e-4, atol=1e-6)

    # and both equal a numpy per-group count (groups without positives: the batch's TPR,
    # the value of an empty subset before any observation)
    c, y, w = codes.numpy(), labels.numpy(), weights.numpy().astype(np.float64)
    hit = (scores.detach().numpy() > 0).astype(np.float64)
    num = np.bincount(c, weights=w * y * hit, minlength=K)
    den = np.bincount(c, weights=w * y, minlength=K)
    overall = (w * y * hit).sum() / (w * y).sum()
    ref = np.divide(num, den, out=np.full(K, overall), where=den > 0)
    assert (den == 0).any(), "the data should leave some group without positives"
    np.testing.assert_allclose(v.true.numpy(), ref, rtol=1e-5, atol=1e-6)
