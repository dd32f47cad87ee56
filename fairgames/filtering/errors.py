"""The filtering family's error: bad input to the filter, each message naming the problem and
the remedy (``docs/troubleshooting.md``).

Example:
    >>> issubclass(FilterError, ValueError)
    True
"""

from __future__ import annotations


class FilterError(ValueError):
    """Bad input to a balanced filter (paper 002): an ``eta`` outside [0, 1], a ``z`` with one
    value, a target that is not a distribution, mismatched lengths, NaN features, columns that
    differ from the fitted ones, an unfitted or damaged saved filter."""
