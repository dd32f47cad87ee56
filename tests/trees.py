"""Nested states (results.json, checkpoints) flattened to their leaves by path, the one way
the tests that compare two runs leaf by leaf read them.

Example:
    >>> leaves({"a": [1, {"b": 2.5}], "c": True})
    {'/a/0': 1, '/a/1/b': 2.5, '/c': True}
    >>> numbers({"a": [1, {"b": 2.5}], "c": True, "d": "x"})
    {'/a/0': 1.0, '/a/1/b': 2.5}
"""

from __future__ import annotations

from typing import Any


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of nested dicts, lists and tuples, keyed by its ``/``-joined path."""
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, list | tuple):
        items = enumerate(tree)
    else:
        return {prefix: tree}
    return {k: v for key, sub in items for k, v in leaves(sub, f"{prefix}/{key}").items()}


def numbers(tree: Any) -> dict[str, float]:
    """Every number (not a bool) among :func:`leaves`, as a float."""
    return {k: float(v) for k, v in leaves(tree).items()
            if isinstance(v, int | float) and not isinstance(v, bool)}
