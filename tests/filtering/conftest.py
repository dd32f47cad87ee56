"""Synthetic data for the filtering tests: three groups of shares 0.7 / 0.2 / 0.1 whose
features carry z weakly (a proxy learns something, not everything)."""

from __future__ import annotations

import numpy as np
import pytest


def synthetic(n: int, seed: int = 0, signal: float = 1.0):
    rng = np.random.default_rng(seed)
    z = rng.choice(3, size=n, p=[0.7, 0.2, 0.1])
    X = rng.normal(size=(n, 4)) + signal * np.eye(3, 4)[z]
    return X, z


@pytest.fixture(scope="module")
def data():
    return synthetic(6000)


@pytest.fixture(scope="module")
def make_data():
    return synthetic
