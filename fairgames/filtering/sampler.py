"""Algorithm 2 of paper 002: rejection filtering. An example with soft cell membership
``W(x)`` is kept with probability ``W(x)·ρ``: one uniform draw per example, in order, from a
seeded ``numpy.random.Generator`` — so the batch filter and the stream, started from the same
seed, keep the same examples.

Example:
    >>> import numpy as np
    >>> p = np.array([1.0, 0.0, 0.5, 0.5])
    >>> kept = keep_indices(p, np.random.default_rng(0))
    >>> s = Stream(np.random.default_rng(0))
    >>> [i for i, pi in enumerate(p) if s.accept_probability(pi)] == kept.tolist()
    True
"""

from __future__ import annotations

import numpy as np


def keep_indices(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices of the kept examples, each kept with its probability ``p_i``."""
    return np.flatnonzero(rng.random(len(p)) < p)


class Stream:
    """One example at a time: ``accept_probability(p)`` draws the next uniform."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.seen = 0
        self.kept = 0

    def accept_probability(self, p: float) -> bool:
        keep = bool(self.rng.random() < p)
        self.seen += 1
        self.kept += keep
        return keep
