"""Quartiles of a sample: the benchmarks' spread statistic.

Example:
    >>> quartiles([1.0, 2.0, 3.0, 4.0, 5.0])
    (2.0, 3.0, 4.0)
    >>> quartiles([7.0])
    (7.0, 7.0, 7.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3), inclusive method (the sample's own extremes bound the quartiles)."""
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]
