"""The rate evaluator under ``torch.inference_mode()`` (Lightning's default for validation,
test and predict): inference tensors carry no version counter, so the fused pass's layout
cache must not read one; the values equal those computed under ``torch.no_grad()``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.rates import Batch, RateEvaluator, group
from fairgames.rates import positive_prediction_rate as ppr
from fairgames.rates import true_positive_rate as tpr


def _batch(n=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=gen)
    labels = (torch.rand(n, generator=gen) < 0.5).float()
    groups = (torch.rand(n, generator=gen) < 0.4).long()
    return scores, labels, groups


def test_the_fused_pass_runs_on_inference_tensors_and_matches_numpy():
    ev = RateEvaluator([ppr(), tpr(), ppr(group("g", "b")), tpr(group("g", "b"))])
    ev.eval()
    scores, labels, groups = _batch()
    with torch.no_grad():
        reference = ev(Batch(scores=scores, labels=labels, groups={"g": groups},
                             group_values={"g": ["a", "b"]}), update=False).true.clone()
    ev.forget_layout()
    for _ in range(2):       # twice: the second pass meets the cached layout's tensors
        with torch.inference_mode():
            s, y, g = scores.clone(), labels.clone(), groups.clone()   # inference tensors
            values = ev(Batch(scores=s, labels=y, groups={"g": g},
                              group_values={"g": ["a", "b"]}), update=False).true
    assert torch.equal(values, reference)
    hit, pos, b = scores.numpy() > 0, labels.numpy() > 0.5, groups.numpy() == 1
    expected = [hit.mean(), hit[pos].mean(), hit[b].mean(), hit[pos & b].mean()]
    np.testing.assert_allclose(values.numpy(), expected, rtol=1e-6)


def test_an_inference_tensor_changed_in_place_is_not_read_from_a_stale_layout():
    ev = RateEvaluator([ppr(group("g", "b"))])
    ev.eval()
    scores, labels, groups = _batch()
    with torch.inference_mode():
        g = groups.clone()
        batch = Batch(scores=scores.clone(), labels=labels.clone(), groups={"g": g},
                      group_values={"g": ["a", "b"]})
        first = ev(batch, update=False).true.clone()
        g.fill_(1)                                   # every row now in group b
        second = ev(batch, update=False).true
    hit = scores.numpy() > 0
    assert float(first[0]) == pytest.approx(hit[groups.numpy() == 1].mean(), rel=1e-6)
    assert float(second[0]) == pytest.approx(hit.mean(), rel=1e-6)
