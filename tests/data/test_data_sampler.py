"""MinibatchSampler: epochs, determinism, balance, state round-trip."""

import itertools

import pytest
import torch

from fairgames.data import DataError, MinibatchSampler, make_synthetic


@pytest.fixture(scope="module")
def train():
    return make_synthetic(n=1000, group_proportions=(0.8, 0.2), seed=0).train  # 600 rows


def _take(sampler, k):
    return [b.clone() for b in itertools.islice(sampler, k)]


def test_epoch_is_a_permutation(train):
    s = MinibatchSampler(train, batch_size=128, seed=0)
    assert s.batches_per_epoch == 5
    batches = _take(s, 5)
    assert [len(b) for b in batches] == [128, 128, 128, 128, 88]
    assert torch.equal(torch.cat(batches).sort().values, torch.arange(600))
    nxt = torch.cat(_take(s, 5))
    assert torch.equal(nxt.sort().values, torch.arange(600))
    assert not torch.equal(nxt, torch.cat(batches))  # a new permutation each epoch


def test_drop_last(train):
    s = MinibatchSampler(train, batch_size=128, drop_last=True)
    assert [len(b) for b in _take(s, 8)] == [128] * 8
    assert s.epoch == 1


def test_same_seed_same_batches_different_seed_different(train):
    a = _take(MinibatchSampler(train, batch_size=64, seed=7), 20)
    b = _take(MinibatchSampler(train, batch_size=64, seed=7), 20)
    c = _take(MinibatchSampler(train, batch_size=64, seed=8), 20)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_full_batch(train):
    s = MinibatchSampler(train)
    assert torch.equal(next(s), torch.arange(600))
    assert s.batches_per_epoch == 1


@pytest.mark.parametrize("balanced", [None, "group"])
def test_state_round_trip(train, balanced):
    s = MinibatchSampler(train, batch_size=100, seed=3, balanced_by=balanced)
    _take(s, 13)
    state = s.state_dict()
    expected = _take(s, 17)
    r = MinibatchSampler(train, batch_size=100, seed=0, balanced_by=balanced)
    r.load_state_dict(state)
    got = _take(r, 17)
    assert all(torch.equal(x, y) for x, y in zip(expected, got, strict=True))
    assert r.steps == s.steps


def test_state_mismatch_is_an_error(train):
    state = MinibatchSampler(train, batch_size=100).state_dict()
    with pytest.raises(DataError, match="batch_size"):
        MinibatchSampler(train, batch_size=50).load_state_dict(state)


def test_balanced_batches(train):
    codes = train.groups["group"]
    s = MinibatchSampler(train, batch_size=101, balanced_by="group", seed=1)
    seen = []
    for b in _take(s, 12):
        assert torch.bincount(codes[b], minlength=2).tolist() == [51, 50]
        seen.append(b[codes[b] == 1])
    # the minority group (about 120 rows) cycles through all its rows, each once per cycle
    minority = torch.cat(seen)
    n1 = int((codes == 1).sum())
    assert torch.equal(minority[:n1].sort().values, torch.nonzero(codes == 1).flatten())
    w = s.importance_weights(b)
    share1 = n1 / len(train)
    assert float(w[codes[b] == 1][0]) == pytest.approx(share1 / (50 / 101), rel=1e-5)
    assert float(w.sum()) == pytest.approx(101, rel=1e-5)


def test_sampler_errors(train):
    with pytest.raises(DataError, match="unknown protected attribute"):
        MinibatchSampler(train, batch_size=10, balanced_by="race")
    with pytest.raises(DataError):
        MinibatchSampler(train, batch_size=0)
    with pytest.raises(DataError):
        MinibatchSampler(train, balanced_by="group")
    with pytest.raises(DataError):
        MinibatchSampler(0, batch_size=4)


def test_int_rows_and_device():
    s = MinibatchSampler(10, batch_size=4, device="cpu")
    assert [len(b) for b in _take(s, 3)] == [4, 4, 2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_same_batches_as_cpu(train):
    cpu = _take(MinibatchSampler(train, batch_size=64, seed=2), 10)
    gpu = _take(MinibatchSampler(train.to("cuda"), batch_size=64, seed=2), 10)
    assert all(g.device.type == "cuda" and torch.equal(c, g.cpu())
               for c, g in zip(cpu, gpu, strict=True))
