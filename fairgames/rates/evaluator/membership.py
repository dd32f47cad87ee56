"""Which cells of a plan each subset covers: the subsets' literals resolved against the batch's
group values and source names, and/or/not as sorted cell-id sets (:class:`_Membership`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..batch import Batch
from ..errors import RatesError
from ..subsets import And, BaselineIs, Everything, GroupIs, LabelIs, Not, Or, SourceIs, Subset


class _Membership:
    """Each subset's cells as sorted cell ids, in time and memory O(its cells): never a
    ``[subsets, cells]`` mask (10 000 groups make 20 000 cells and 10 000 subsets)."""

    def __init__(self, coords: Mapping[str, np.ndarray], cells: int, batch: Batch) -> None:
        self.coords, self.n, self.batch = coords, cells, batch
        self._groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._positions: dict[str, dict[str, int]] = {}

    def literal(self, s: Subset) -> tuple[str, int]:
        """The factor a literal reads and the code it asks for."""
        if isinstance(s, LabelIs):
            return "label", int(s.value)
        if isinstance(s, BaselineIs):
            return "baseline", int(s.value)
        if isinstance(s, SourceIs):
            return "source", _resolve(s.value, self.batch.source_names or [], "source")
        if isinstance(s, GroupIs):
            names = self.batch.group_values[s.attribute]
            if s.attribute not in self._positions:   # name → code once: K lookups, not K²
                self._positions[s.attribute] = {
                    n: i for i, n in reversed(list(enumerate(names)))}
            return "group:" + s.attribute, _resolve(
                s.value, names, f"group {s.attribute!r}", self._positions[s.attribute])
        raise TypeError(f"unknown subset node {type(s).__name__}")

    def of_value(self, factor: str, code: int) -> np.ndarray:
        """The cells whose ``factor`` coordinate is ``code`` (sorted)."""
        if factor not in self._groups:
            c = self.coords[factor]
            order = np.argsort(c, kind="stable")
            starts = np.concatenate([[0], np.cumsum(np.bincount(c))])
            self._groups[factor] = (order, starts)
        order, starts = self._groups[factor]
        if not 0 <= code < len(starts) - 1:
            return np.zeros(0, dtype=np.int64)
        return order[starts[code]:starts[code + 1]]

    def cells(self, s: Subset) -> np.ndarray:
        """The sorted cell ids of subset ``s``."""
        if isinstance(s, Everything):
            return np.arange(self.n)
        if _is_literal(s):
            return self.of_value(*self.literal(s))
        if isinstance(s, And):
            left, right = _is_literal(s.left), _is_literal(s.right)
            if not (left or right):
                return np.intersect1d(self.cells(s.left), self.cells(s.right),
                                      assume_unique=True)
            if left and right:     # the smaller literal's cells, filtered by the other
                lo, ro = self.of_value(*self.literal(s.left)), self.of_value(
                    *self.literal(s.right))
                ids, test = (lo, s.right) if len(lo) <= len(ro) else (ro, s.left)
            else:
                test, other = (s.left, s.right) if left else (s.right, s.left)
                ids = self.cells(other)
            factor, code = self.literal(test)
            return ids[self.coords[factor][ids] == code]
        if isinstance(s, Or):
            return np.union1d(self.cells(s.left), self.cells(s.right))
        if isinstance(s, Not):
            return np.setdiff1d(np.arange(self.n), self.cells(s.inner), assume_unique=True)
        raise TypeError(f"unknown subset node {type(s).__name__}")


def _is_literal(s: Subset) -> bool:
    return isinstance(s, (LabelIs, BaselineIs, SourceIs, GroupIs))


def _resolve(value: str | int, names: Sequence[str], what: str,
             positions: Mapping[str, int] | None = None) -> int:
    if isinstance(value, str):
        if positions is not None and value in positions:
            return positions[value]
        if value in names:
            return list(names).index(value)
        raise RatesError(f"unknown value {value!r} of {what}; known values: {list(names)}")
    if not 0 <= value < len(names):
        raise RatesError(f"code {value} of {what} is out of range 0..{len(names) - 1} "
                         f"(values {list(names)})")
    return int(value)
