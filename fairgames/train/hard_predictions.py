"""The exact values of 0/1 predictions, read without the scores' pass.

Where every metric reads the scores through ``1[s > 0]`` alone, a row's expected prediction
``P(ŷ = 1)`` is all its exact values need (:func:`expected_prediction`); where moreover the
groups are hard, the rows unweighted and the events' coefficients integers, ``R`` models'
values are ratios of integer cell counts, counted in one pass (:class:`CellCounts`) and read
again in microseconds. :class:`fairgames.train.evaluation.SolutionEvaluator` takes these
shortcuts; both give the exact evaluator's own values, bit for bit.

Example:
    >>> import torch
    >>> expected_prediction(torch.tensor([0.5, -0.5])).tolist()
    [1.0, 0.0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from fairgames.data import TabularDataset
from fairgames.rates import Batch, ExactEvaluator
from fairgames.rates.evaluator import LeafValues
from fairgames.rates.events import DEFAULT_INDICATOR


def _reads_sign_only(evaluator: ExactEvaluator) -> bool:
    """Whether every metric of ``evaluator`` reads the scores through ``1[s > 0]`` alone (no
    threshold other than 0, no group loss): then a row's expected prediction is all its
    exact values need."""
    rates = evaluator.rates
    return not rates.losses and all(i == DEFAULT_INDICATOR for i in rates.indicators)


def _counts_suffice(evaluator: ExactEvaluator, ds: TabularDataset) -> bool:
    """Whether ``ds``'s exact values under 0/1 predictions are ratios of integer counts: the
    metrics read ``1[s > 0]`` alone, the groups are hard, and every event's coefficients
    are integers (then any order of summing them gives the same float64 values)."""
    events = [lf.event for lf in evaluator.rates.leaves if lf.event is not None]
    return (_reads_sign_only(evaluator) and len(ds) > 0
            and not any(g.is_floating_point() for g in ds.groups.values())
            and all(float(v).is_integer() for e in events for table in (e.a, e.b)
                    for row in table for v in row))


@dataclasses.dataclass(frozen=True)
class CellCounts:
    """The cell counts of ``R`` models with 0/1 predictions on ``split``
    (:meth:`SolutionEvaluator.counts_each`): ``sums`` ``[R, cells·columns]`` (float64
    integers) in the evaluator's plan laid out as the batch ``layout``."""

    split: TabularDataset
    layout: Batch
    sums: torch.Tensor


def _cell_sums_each(evaluator: ExactEvaluator, parts: Iterable[tuple[Batch, torch.Tensor]]
                    ) -> tuple[Batch, torch.Tensor]:
    """The per-cell counts of ``R`` models with 0/1 predictions on a split, from ``parts``:
    each chunk's batch (any one model's) and the models' predictions on it ``[R, B]``
    (float64); returns the layout batch and the sums ``[R, cells·columns]``. Being integers,
    any order of adding them gives the same float64 values. Each chunk is checked as
    :meth:`~fairgames.rates.ExactEvaluator.leaf_values` checks it (labels, codes)."""
    rates, layout, sums = evaluator.rates, None, None
    for batch, predictions in parts:
        rates.to(batch.device)
        batch.check_values()
        weights, code = rates.example_columns(batch, torch.float64, bounds=False)
        cells = rates.hard_cells(batch)
        if sums is None:
            layout = batch
            # the plan's cell-sum layout [cells, columns]: the rows' weight (1 each:
            # make_batch gives no weights), then each indicator's true / upper / lower
            # columns (the bounds stay zero: only true values are read)
            sums = torch.zeros(len(predictions), cells, weights.shape[1],
                               dtype=torch.float64, device=code.device)
        sums[:, :, 0] += torch.bincount(code, minlength=cells).to(torch.float64)
        hits = torch.zeros(len(predictions), cells, dtype=torch.float64, device=code.device)
        hits.index_add_(1, code, predictions)
        for j in range(len(rates.indicators)):
            sums[:, :, 1 + 3 * j] += hits
    assert layout is not None and sums is not None
    return layout, sums.reshape(len(sums), -1)


def _leaf_values_of_sums(evaluator: ExactEvaluator, layout: Batch, sums: torch.Tensor
                         ) -> list[LeafValues]:
    """Every leaf's exact value for each row of cell sums ``[R, cells·columns]``
    (:func:`_cell_sums_each`), mapped by the evaluator's own plan
    (:meth:`~fairgames.rates.RateEvaluator.leaf_values_of_sums`): for integer counts the
    values of :meth:`~fairgames.rates.ExactEvaluator.leaf_values` on each model, bit for
    bit."""
    rates = evaluator.rates
    true, subset = rates.leaf_values_of_sums(layout, sums)
    nan = torch.full_like(true[:, 0], float("nan"))
    return [LeafValues(true[:, r], nan, nan, rates.index, subset_weights=subset[:, r])
            for r in range(len(sums))]


def expected_prediction(scores: torch.Tensor, mixture_weights: torch.Tensor | None = None
                        ) -> torch.Tensor | None:
    """``P(ŷ = 1)`` per row, float64: ``1[s > 0]`` of scores ``[N]``, or ``Σ_r q_r 1[s_r > 0]``
    of a mixture's ``[R, N]`` with weights ``q`` ``[R]``; ``None`` where a score is not finite
    or float32 weights summing above 1 put a row above 1 (evaluate the scores then: they raise
    the named error, or carry the mixture as it is).

    The values are the exact evaluator's own true columns for these scores, bit for bit
    (:meth:`~fairgames.rates.RateEvaluator.example_columns`: the same comparison and the
    same float64 products and sum), without the surrogate bounds it computes beside them.

    Example:
        >>> expected_prediction(torch.tensor([[1.0, -1.0], [2.0, 3.0]]),
        ...                     torch.tensor([0.25, 0.75])).tolist()
        [1.0, 0.75]
        >>> expected_prediction(torch.tensor([1.0, float("nan")])) is None
        True
    """
    hit = scores > 0
    if mixture_weights is None:
        p = hit.to(torch.float64)
    else:
        p = (mixture_weights.to(torch.float64)[:, None] * hit).sum(0)
    ok = torch.isfinite(scores).all() & (p >= 0).all() & (p <= 1).all()
    return p if bool(ok) else None
