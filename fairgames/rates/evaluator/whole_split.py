"""Exact evaluation of a whole split given in chunks: float64 cell sums added over the chunks,
mapped by the plan to every leaf's exact value (:func:`split_sums`, :func:`exact_values`), and
the true values of many reweightings of a split at once (:func:`values_of_sums`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from ..batch import Batch
from ..errors import EmptySubsetError, RatesError
from ..subsets import Subset
from .columns import Columns
from .leaf_values import LeafValues
from .plan import _Plan


def split_sums(batches: Iterable[Batch], plan_of: Callable[[Batch], _Plan], columns: Columns,
               bounds: bool) -> tuple[_Plan, torch.Tensor]:
    """The plan shared by every chunk of a split and the chunks' float64 cell sums added
    up, each chunk checked first (:meth:`Batch.check_values`)."""
    total: torch.Tensor | None = None
    plan: _Plan | None = None
    for batch in batches:
        batch.check_values()
        p = plan_of(batch)
        if plan is not None and p is not plan:
            raise RatesError("all chunks of a split must share one layout (groups, sources)")
        plan = p
        with torch.autocast(device_type=batch.device.type, enabled=False):
            s = columns.cell_sums(p, batch, torch.float64, bounds)
        total = s if total is None else total + s
    if plan is None or total is None:
        raise RatesError("evaluate_split got no batch")
    return plan, total


def exact_values(plan: _Plan, total: torch.Tensor, subsets: Sequence[Subset],
                 index: dict[tuple, int], empty: str) -> LeafValues:
    """Every leaf's exact value from a split's cell sums ``total``; a subset with no weight
    raises :class:`EmptySubsetError` (``empty="raise"``) or makes its leaves NaN."""
    out = plan.apply(total)
    k = plan.n_leaves
    nums, dens = out[: 3 * k], out[3 * k: 3 * k + plan.n_subsets]
    if empty == "raise":
        missing = (dens <= 0).nonzero().flatten().tolist()
        if missing:
            raise empty_subset_error([subsets[i] for i in missing])
    weights = dens[plan.leaf_subset]
    den = torch.where(weights > 0, weights, torch.full_like(weights, math.nan))
    n_all = total.reshape(-1, plan.columns)[:, 0].sum()
    return LeafValues(nums[:k] / den, nums[k:2 * k] / den, nums[2 * k:] / den, index,
                      weights / n_all, subset_weights=weights,
                      empty_subsets=(dens <= 0).sum(dtype=torch.float64))


def values_of_sums(plan: _Plan, sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each leaf's true value ``[K, n]`` (NaN where its subset has no weight) and its
    subset's weight ``[K, n]`` from ``n`` reweightings' cell sums ``[n, cells·columns]``."""
    out = plan.apply_many(sums)
    k = plan.n_leaves
    weights = out[3 * k: 3 * k + plan.n_subsets][plan.leaf_subset]
    den = torch.where(weights > 0, weights, torch.full_like(weights, math.nan))
    return out[:k] / den, weights


def empty_subset_error(subsets: Sequence[Subset]) -> EmptySubsetError:
    """The error of a whole-split evaluation whose ``subsets`` have no example."""
    names = ", ".join(str(x) for x in subsets)
    return EmptySubsetError(f"no example (with positive weight) in subset(s): {names}")
