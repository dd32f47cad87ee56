"""Fixtures of the game tests: small synthetic data and training helpers.

The helpers are handed out through the ``helpers`` fixture (pytest imports test modules in
importlib mode, so a test module cannot import a sibling helper module).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fairgames.data import MinibatchSampler, make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import Batch


@pytest.fixture(scope="session")
def synthetic():
    """Two groups with unequal base rates: an unconstrained model violates TPR parity."""
    return make_synthetic(n=3000, d=5, group_shift=1.5, seed=0).train


def fields(ds, idx=None) -> dict:
    g = ds.groups["group"] if idx is None else ds.groups["group"][idx]
    y = ds.labels if idx is None else ds.labels[idx]
    return {"labels": y, "groups": {"group": g}, "group_values": {"group": ds.group_names["group"]}}


def train(problem: Problem, ds, *, steps: int, batch_size: int = 256, seed: int = 0,
          lr: float = 0.1, model: torch.nn.Module | None = None,
          hook: Callable[[ConstrainedOptimizer, torch.nn.Module], None] | None = None,
          **options) -> tuple[torch.nn.Module, ConstrainedOptimizer]:
    """Train a linear model with the game on minibatches of ``ds`` (deterministic)."""
    torch.manual_seed(seed)
    if model is None:
        model = torch.nn.Linear(ds.features.shape[1], 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=lr), **options)
    sampler = iter(MinibatchSampler(ds, batch_size=batch_size, seed=seed))
    for _ in range(steps):
        idx = next(sampler)
        copt.step_batch(model, ds.features[idx], **fields(ds, idx))
        if hook is not None:
            hook(copt, model)
    return model, copt


def split_values(problem: Problem, model: torch.nn.Module, ds):
    """Exact (float64) leaf values of ``model`` over the whole split."""
    with torch.no_grad():
        scores = model(ds.features)[:, 0]
    return problem.make_evaluator().evaluate_split([Batch(scores=scores, **fields(ds))])


def numpy_rate(pred: np.ndarray, mask: np.ndarray) -> float:
    return float(pred[mask].mean())


@pytest.fixture(scope="session")
def helpers() -> SimpleNamespace:
    """``fields``, ``train``, ``split_values`` and ``numpy_rate`` (see above)."""
    return SimpleNamespace(fields=fields, train=train, split_values=split_values,
                           numpy_rate=numpy_rate)
