"""Group-noise utilities of paper 004."""

import numpy as np
import pytest
import torch

from fairgames.data import DataError, estimate_group_noise, flip_groups


def test_flip_exact_count_and_always_another_group():
    g = torch.from_numpy(np.random.default_rng(0).integers(0, 3, 5000))
    for gamma in (0.1, 0.3, 0.5):
        noisy = flip_groups(g, gamma, n_groups=3, seed=1)
        changed = noisy != g
        assert int(changed.sum()) == int(gamma * 5000)
        assert noisy.min() >= 0 and noisy.max() <= 2


def test_flip_is_uniform_over_other_groups_and_seeded():
    g = torch.zeros(30000, dtype=torch.int64)
    noisy = flip_groups(g, 0.5, n_groups=3, seed=0)
    counts = torch.bincount(noisy, minlength=3).tolist()
    assert counts[0] == 15000
    assert abs(counts[1] - 7500) < 300 and abs(counts[2] - 7500) < 300
    assert torch.equal(noisy, flip_groups(g, 0.5, n_groups=3, seed=0))
    assert not torch.equal(noisy, flip_groups(g, 0.5, n_groups=3, seed=1))
    assert torch.equal(flip_groups(g, 0.0, n_groups=3), g)


def test_estimate_against_numpy():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 3, 4000)
    h = np.where(rng.random(4000) < 0.25, rng.integers(0, 3, 4000), t)
    est = estimate_group_noise(torch.from_numpy(t), torch.from_numpy(h))
    for j in range(3):
        assert float(est.p_noisy_differs_given_true[j]) == pytest.approx(np.mean(h[t == j] != j))
        assert float(est.p_true[j]) == pytest.approx(np.mean(t == j))
        for k in range(3):
            assert float(est.p_true_given_noisy[j, k]) == pytest.approx(np.mean(t[h == k] == j))
    assert torch.allclose(est.p_true_given_noisy.sum(0), torch.ones(3, dtype=torch.float64))
    assert int(est.counts.sum()) == 4000


def test_noise_errors():
    with pytest.raises(DataError):
        flip_groups(torch.tensor([0, 1]), 1.5)
    with pytest.raises(DataError):
        flip_groups(torch.tensor([0.0, 1.0]), 0.1)
    with pytest.raises(DataError):
        estimate_group_noise(torch.tensor([0, 1]), torch.tensor([0]))
