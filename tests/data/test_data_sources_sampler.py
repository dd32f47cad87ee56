"""Per-source sampling (paper 001, issue 47): every source's minibatch each step, importance
weights that keep a rate over all sources unbiased, and a state that resumes exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.data import DataError, SourcesSampler, combine_sources, make_synthetic


def _data(n1: int = 100, n2: int = 40, n3: int = 25):
    parts = {"d1": make_synthetic(n=n1, seed=0, split=(1.0, 0.0, 0.0)).train,
             "d2": make_synthetic(n=n2, seed=1, split=(1.0, 0.0, 0.0)).train,
             "d3": make_synthetic(n=n3, seed=2, split=(1.0, 0.0, 0.0)).train}
    return combine_sources(parts, unlabeled=["d3"])


def test_each_step_holds_every_sources_minibatch_and_each_epoch_every_row():
    ds = _data()
    sampler = SourcesSampler(ds, {"d1": None, "d2": 10, "d3": 5}, seed=0)
    src = ds.sources.numpy()
    seen = {1: [], 2: []}
    for _ in range(4):                                       # one epoch of d2 (40 / 10)
        idx = next(sampler).numpy()
        counts = np.bincount(src[idx], minlength=3)
        assert counts.tolist() == [100, 10, 5]
        assert sorted(idx[src[idx] == 0]) == list(range(100))   # full batch: all its rows
        for s in (1, 2):
            seen[s].extend(idx[src[idx] == s].tolist())
    assert sorted(seen[1]) == list(np.flatnonzero(src == 1))   # every d2 row once
    assert len(set(seen[2])) == 20                              # d3: 4 of its 5 batches


def test_weights_make_the_mean_over_all_sources_unbiased():
    ds = _data(60, 40, 20)
    sampler = SourcesSampler(ds, {"d1": None, "d2": 10, "d3": 5}, seed=3)
    x = torch.randn(len(ds), generator=torch.Generator().manual_seed(0))
    src = ds.sources
    n, b = np.array([60, 40, 20]), np.array([60, 10, 5])
    want_w = (n / n.sum()) / (b / b.sum())                     # (n_s / N) / (b_s / B)
    means = []
    for _ in range(4):          # one epoch of d2 (4 x 10) and of d3 (4 x 5): every row once
        idx = next(sampler)
        w = sampler.importance_weights(idx)
        np.testing.assert_allclose(w.numpy(), want_w[src[idx].numpy()], rtol=1e-6)
        means.append(float((w * x[idx]).sum() / w.sum()))
    # the epoch's average of the weighted means is the population mean, exactly
    assert np.mean(means) == pytest.approx(float(x.mean()), abs=1e-5)
    # a rate on one source is its own mean: the weights are constant within a source
    idx = next(sampler)
    w = sampler.importance_weights(idx)
    for s in range(3):
        assert torch.unique(w[src[idx] == s]).numel() == 1


def test_a_restored_state_draws_the_same_batches():
    ds = _data()
    sizes = {"d1": 30, "d2": 10, "d3": None}
    a = SourcesSampler(ds, sizes, seed=5)
    for _ in range(7):
        next(a)
    b = SourcesSampler(ds, sizes, seed=5)
    b.load_state_dict(a.state_dict())
    for _ in range(9):
        assert torch.equal(next(a), next(b))
    # each source its own stream: d1's order does not depend on d2's batch size
    c = SourcesSampler(ds, {"d1": 30, "d2": 20, "d3": None}, seed=5)
    d = SourcesSampler(ds, sizes, seed=5)
    assert torch.equal(next(c)[:30], next(d)[:30])
    with pytest.raises(DataError, match="d2"):
        c.load_state_dict(a.state_dict())


def test_unknown_or_missing_sources_are_refused():
    ds = _data()
    with pytest.raises(DataError, match=r"\['d9'\]"):
        SourcesSampler(ds, {"d1": None, "d2": 10, "d3": 5, "d9": 3})
    with pytest.raises(DataError, match="d3"):
        SourcesSampler(ds, {"d1": None, "d2": 10})
