"""Denominators: empty-in-batch subsets, the running proportion estimates (a bias-corrected
exponential moving average), their state, and exact whole-split evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fairgames.rates as R
from fairgames.rates import Batch, RateEvaluator, group

NAMES = ["a", "b", "c"]


def make_batch(seed: int, n: int, *, present=(0, 1, 2), dtype=torch.float32) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.tensor(present)[torch.randint(0, len(present), (n,), generator=gen)]
    return Batch(scores=torch.randn(n, generator=gen, dtype=dtype),
                 labels=(torch.rand(n, generator=gen) < 0.5).to(dtype),
                 weights=(torch.rand(n, generator=gen) + 0.2).to(dtype),
                 groups={"g": codes}, group_values={"g": NAMES})


def state(ev: RateEvaluator) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in ev.state_dict().items()}


def test_subset_empty_in_the_batch_reads_the_batch_rate_of_its_kind_in_every_mode():
    exprs = [R.true_positive_rate(group("g", "c")), R.error_rate(group("g", "c")),
             R.positive_prediction_rate(group("g", "a"))]
    batch = make_batch(0, 64, present=(0, 1))
    w, y = batch.weights.double(), batch.labels.double()
    hit = (batch.scores > 0).double()
    tpr, error = float((w * y * hit).sum() / (w * y).sum()), float((w * (hit != y)).sum() / w.sum())
    for denominator in ("batch", "running"):
        ev = RateEvaluator(exprs, denominator=denominator)
        for training in (True, False):
            ev.train(training)
            v = ev(batch)
            assert v.true[:2].tolist() == pytest.approx([tpr, error], rel=1e-6)
            assert v.upper[:2].tolist() == v.lower[:2].tolist() == v.true[:2].tolist()
            assert bool(torch.isfinite(v.true).all() & torch.isfinite(v.upper).all()
                        & torch.isfinite(v.lower).all())
            assert 0.0 < float(v.true[2]) < 1.0
            assert int(v.empty_subsets) == 2


def test_running_estimate_is_a_bias_corrected_moving_average():
    decay, steps = 0.9, 6
    exprs = [R.positive_prediction_rate(group("g", v)) for v in NAMES]
    ev = RateEvaluator(exprs, decay=decay, denominator="running")
    props = []
    for t in range(steps):
        b = make_batch(t, 50, present=(0, 1) if t == 2 else (0, 1, 2))   # "c" absent at t = 2
        w, c = b.weights.double().numpy(), b.groups["g"].numpy()
        props.append([w[c == k].sum() / w.sum() for k in range(3)])
        v = ev(b)
    props = np.array(props)
    ema = sum((1 - decay) * decay ** (steps - 1 - t) * props[t] for t in range(steps))
    np.testing.assert_allclose(ev.running_average.numpy(), ema, rtol=1e-6)
    assert float(ev.running_decay_power) == pytest.approx(decay ** steps)
    # the last pass divided by the bias-corrected estimate: P(s > 0, g = k) / estimate_k
    estimate = ema / (1 - decay ** steps)
    w, c = b.weights.double().numpy(), b.groups["g"].numpy()
    hit = (b.scores.double().numpy() > 0)
    ref = [(w * hit)[c == k].sum() / w.sum() / estimate[k] for k in range(3)]
    np.testing.assert_allclose(v.true.numpy(), ref, rtol=1e-5)


def test_running_state_is_in_state_dict_and_round_trips():
    exprs = [R.true_positive_rate(group("g", v)) for v in NAMES] + [R.error_rate()]
    ev = RateEvaluator(exprs, denominator="running", decay=0.8)
    for t in range(4):
        ev(make_batch(t, 40))
    sd = ev.state_dict()
    assert {"running_average", "running_decay_power", "nonfinite_seen"} <= set(sd)
    fresh = RateEvaluator(exprs, denominator="running", decay=0.8)
    before = fresh.eval()(make_batch(9, 40)).true
    fresh.load_state_dict(sd)
    for k, val in sd.items():
        assert torch.equal(fresh.state_dict()[k], val)
    probe = make_batch(9, 40)
    after = fresh.eval()(probe).true
    torch.testing.assert_close(after, ev.eval()(probe).true)
    assert not torch.allclose(before, after)   # the state matters to the values


def test_running_state_is_not_updated_in_eval_mode_or_with_update_false():
    ev = RateEvaluator([R.true_positive_rate(group("g", "a"))])
    ev(make_batch(0, 30))
    snap = state(ev)
    ev.eval()
    ev(make_batch(1, 30))
    ev.train()
    ev(make_batch(2, 30), update=False)
    ev.evaluate_split([make_batch(3, 30)])
    for k, v in ev.state_dict().items():
        assert torch.equal(v, snap[k]), k
    ev(make_batch(4, 30))                       # a training pass does update
    assert not torch.equal(ev.running_average, snap["running_average"])
    ev.eval()
    ev(make_batch(5, 30), update=True)          # and so does an explicit update
    assert float(ev.running_decay_power) == pytest.approx(0.99 ** 3)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(4, 300), chunks=st.integers(2, 7))
def test_evaluate_split_is_exact_float64_and_chunking_does_not_matter(rates_data, seed, n, chunks):
    data = rates_data.make(seed, n, empty=False)
    # no subset empty over the split: every hard value, and the label / membership combinations
    data.hard[:4] = [0, 1, 2, 3]
    data.y[:4] = [1.0, 0.0, 0.0, 1.0]
    data.soft[:3] = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    exprs = [R.true_positive_rate(group("h", "a") | group("s", "w")), R.error_rate(),
             R.false_positive_rate(~group("s", "u")), R.group_loss("logistic"),
             R.positive_prediction_rate(group("h", "d"))]
    ev = RateEvaluator(exprs)
    whole = data.batch(torch.float64)
    single = ev.evaluate_split([whole])
    cuts = np.array_split(np.arange(n), chunks)
    parts = [data.batch(torch.float32, **_subset_fields(whole, idx)) for idx in cuts if len(idx)]
    chunked = ev.evaluate_split(parts)
    assert single.true.dtype == chunked.true.dtype == torch.float64
    torch.testing.assert_close(chunked.true, single.true, rtol=1e-12, atol=1e-14)
    # numpy float64 reference of the same (float32-exact) data
    w, y, h = data.w, data.y, data.hard
    s = data.scores
    memb = np.concatenate([data.soft, 1 - data.soft.sum(1, keepdims=True)], 1)
    hit = (s > 0).astype(float)
    tpr_w = w * y * (1 - (h != 0) * (1 - memb[:, 2]))    # weight of (h = a) | (s = w), y = 1
    ref = [
        (tpr_w * hit).sum() / tpr_w.sum(),
        (w * (hit != y)).sum() / w.sum(),
        (w * (1 - y) * (1 - memb[:, 0]) * hit).sum() / (w * (1 - y) * (1 - memb[:, 0])).sum(),
        (w * np.logaddexp(0, -(2 * y - 1) * s)).sum() / w.sum(),
        (w * (h == 3) * hit).sum() / (w * (h == 3)).sum(),
    ]
    np.testing.assert_allclose(single.true.numpy(), ref, rtol=1e-12)


def _subset_fields(b: Batch, idx: np.ndarray) -> dict:
    i = torch.from_numpy(idx)
    f = lambda x: x[i].float() if x.is_floating_point() else x[i]  # noqa: E731
    return {"scores": f(b.scores), "labels": f(b.labels), "weights": f(b.weights),
            "groups": {k: f(g) for k, g in b.groups.items()},
            "baseline_scores": f(b.baseline_scores), "sources": f(b.sources)}
