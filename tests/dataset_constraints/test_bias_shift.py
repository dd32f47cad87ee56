"""The bias-shifted baseline (paper 001's thresholded SVM) against a brute-force scan of every
threshold in numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.dataset_constraints.bias_shift import BiasShifted, recall_shift


def _scan(s: np.ndarray, y: np.ndarray, target: float) -> tuple[float, np.ndarray]:
    """The largest candidate threshold (midpoints between distinct scores, and one below the
    least) whose recall is ≥ target, and its predictions: every distinct prediction vector of
    a threshold rule is one of these candidates."""
    u = np.unique(s)
    cands = np.concatenate([[u[0] - 1.0], (u[:-1] + u[1:]) / 2, [u[-1] + 1.0]])
    ok = [t for t in cands if (s[y == 1] > t).mean() >= target]
    best = max(ok)
    return best, s > best


@pytest.mark.parametrize("seed", range(30))
def test_recall_shift_matches_a_brute_force_scan(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    # integer scores: many ties, also between positives and negatives
    s = rng.integers(-5, 6, n).astype(np.float64) / 2
    y = (rng.random(n) < 0.4).astype(np.int64)
    y[0] = 1
    target = float(rng.choice([0.1, 0.5, 0.75, 0.9, 1.0, rng.random() * 0.999 + 0.001]))
    r = recall_shift(torch.tensor(s, dtype=torch.float32), torch.tensor(y), target)
    best, pred = _scan(s, y, target)
    mine = s > r.threshold
    np.testing.assert_array_equal(mine, pred)          # the same predictions on the data
    assert r.recall == pytest.approx((s[y == 1] > best).mean()) and r.recall >= target
    assert r.shift == -r.threshold
    # no threshold above predicts fewer positives while meeting the target
    assert not any((s[y == 1] > t).mean() >= target for t in np.unique(s) if t >= r.threshold)


def test_a_model_shifted_meets_the_recall_on_train():
    torch.manual_seed(0)
    x = torch.randn(400, 3)
    y = (x[:, 0] + 0.5 * torch.randn(400) > 0.8).float()
    model = torch.nn.Linear(3, 1)
    r = recall_shift(model(x).flatten(), y, 0.9)
    shifted = BiasShifted(model, r.shift)
    with torch.no_grad():
        pred = shifted(x).flatten() > 0
    assert float(pred[y == 1].float().mean()) == pytest.approx(r.recall) and r.recall >= 0.9


@pytest.mark.parametrize("target", [0.0, -0.1, 1.5])
def test_a_target_outside_0_1_is_refused(target):
    with pytest.raises(ValueError, match=r"recall target must lie in \(0, 1\]"):
        recall_shift(torch.zeros(3), torch.ones(3), target)


def test_no_positive_is_refused():
    with pytest.raises(ValueError, match="no positive example"):
        recall_shift(torch.zeros(3), torch.zeros(3), 0.5)
