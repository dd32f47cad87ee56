"""The leaf values a pass returns: every leaf's true value and surrogate bounds in leaf order,
looked up by leaf (:class:`LeafValues`)."""

from __future__ import annotations

import torch

from ..expressions import Leaf, LeafLookup


class LeafValues(LeafLookup):
    """Values of every leaf of an evaluator: ``true`` (0/1 rates, no gradient), and the
    differentiable surrogate bounds ``upper`` and ``lower``, each ``[K]`` in leaf order.
    ``proportions`` are the subsets' weights relative to the batch (``[K]``, per leaf).
    ``flat_bounds``, when set, is ``[upper, lower]`` as one differentiable ``[2K]`` tensor: a
    consumer can take both bounds in one op, and ``upper`` / ``lower`` are then its views,
    made on first access. ``subset_weights`` (whole splits only) are the subsets' total
    weights ``[K]`` (per leaf; the row counts of an unweighted split). ``empty_subsets`` is
    the number of subsets with no weight in the batch (a device scalar; see the package
    docstring for what their leaves read)."""

    def __init__(self, true: torch.Tensor, upper: torch.Tensor | None,
                 lower: torch.Tensor | None, index: dict[tuple, int],
                 proportions: torch.Tensor | None = None,
                 flat_bounds: torch.Tensor | None = None,
                 subset_weights: torch.Tensor | None = None,
                 empty_subsets: torch.Tensor | None = None) -> None:
        if (upper is None or lower is None) and flat_bounds is None:
            raise ValueError("give upper and lower, or flat_bounds")
        self.true = true
        self._upper, self._lower = upper, lower
        self.index = index
        self.proportions = proportions
        self.flat_bounds = flat_bounds
        self.subset_weights = subset_weights
        self.empty_subsets = empty_subsets

    @property
    def upper(self) -> torch.Tensor:
        if self._upper is None:
            assert self.flat_bounds is not None
            self._upper = self.flat_bounds[: self.true.shape[0]]
        return self._upper

    @property
    def lower(self) -> torch.Tensor:
        if self._lower is None:
            assert self.flat_bounds is not None
            self._lower = self.flat_bounds[self.true.shape[0]:]
        return self._lower

    def __repr__(self) -> str:
        return (f"LeafValues(true={self.true!r}, upper={self.upper!r}, lower={self.lower!r}, "
                f"proportions={self.proportions!r})")

    def position(self, leaf: Leaf) -> int:
        try:
            return self.index[leaf.key]
        except KeyError:
            raise KeyError(f"leaf {leaf} was not registered with this evaluator") from None

    def true_value(self, leaf: Leaf) -> torch.Tensor:
        return self.true[self.position(leaf)]

    def bounds(self, leaf: Leaf) -> tuple[torch.Tensor, torch.Tensor]:
        i = self.position(leaf)
        return self.lower[i], self.upper[i]
