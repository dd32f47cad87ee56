"""The fused evaluator: every leaf of a problem, true and surrogate, in one pass over a batch.

How the pass stays flat as the number of leaves K grows:

1. The model-independent *factors* that subsets and events read (label, baseline prediction,
   source, each hard group attribute) define a partition of the examples into cells; an example's
   cell is a mixed-radix code computed with a few integer ops. Soft attributes (memberships
   ``[B, G]``) spread each example over ``G + 1`` virtual cells (the last one is "no value").
2. Per example the pass forms a few columns: the weight ``w``, and ``w·ŷ_z`` for each distinct
   prediction indicator (true 0/1, surrogate upper, surrogate lower) and ``w·loss`` for each
   group loss. One ``index_add_`` sums them per cell: cost ``O(B · columns)``, not ``O(B · K)``.
3. Each event is affine in ``ŷ_z`` with coefficients fixed per cell (see ``events.py``), so each
   leaf's numerator is a fixed sparse combination of the cell sums, and each subset's
   denominator a sum of cells' weights: one sparse matrix product compiled once per batch
   layout (applied as a gather, a multiply and an ``index_add``, whose cost and overhead are
   O(non-zeros) forward and backward, unlike a sparse COO matmul). The surrogate rows take the
   upper bound for positive coefficients and the lower bound for negative ones, so
   ``upper ≥ true ≥ lower`` leaf by leaf for bound surrogates.

A training pass (scores ``[B]``, hard factors, no group loss) runs as ONE autograd node
(:class:`_FusedPass`): its forward forms the columns without recording a graph (the surrogate's
slopes come from :meth:`Surrogate.bounds_with_slopes`), and its backward maps the bounds'
gradients back to the scores with the transposed matrix, one gather by cell and the saved
slopes. Small plans apply the matrix as a dense mat-vec. The per-example cell codes are cached
while the batch reuses the same label / group tensors (a full-batch loop pays them once).
Mixtures, probabilities, soft groups, group losses and differentiable weights take the general
pass, whose graph autograd records op by op; both give the same values.

Empty subsets: a subset is empty in a batch exactly when its weight there is 0 (no row, or
only rows of weight 0); a tiny weight is not empty and gets its exact rate. An empty subset's
leaves read a running estimate of their *rate* — a bias-corrected exponential moving average
of the leaf's values over the batches where its subset was not empty — true, upper and lower
alike, so the multipliers see no made-up value and θ gets no gradient from them (the
surrogate leaf is that detached estimate). Before a leaf's first observation the estimate is
the batch's rate of the same event on the subset's label / baseline part: TPR of an empty
group reads the batch's TPR, its FP proportion the batch's FP proportion (0 when that part is
empty too), so a parity constraint on an absent group reads as no difference. No NaN appears
and no exception is raised mid-step; the count of empty subsets is ``LeafValues.empty_subsets``
(a device scalar). The running states are buffers (``state_dict``) updated only in training
mode. Whole splits are evaluated exactly in float64 by :meth:`RateEvaluator.evaluate_split`,
where a subset with no example is an :class:`EmptySubsetError` naming it.

The package, by job: :mod:`.compile` (which leaves are read; plans, with :mod:`.membership`
and :mod:`.plan`), :mod:`.columns` (columns and cell codes), :mod:`.estimates` (the running
estimates), :mod:`.layout` and :mod:`.fused` (the fused pass), :mod:`.whole_split` (exact
whole-split evaluation), :mod:`.leaf_values` (what a pass returns) and
:mod:`.rate_evaluator` (:class:`RateEvaluator`, the public module: a façade over them).

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, RateEvaluator, true_positive_rate, group
    >>> tpr = true_positive_rate(group("g", "b"))
    >>> ev = RateEvaluator([tpr])
    >>> batch = Batch(scores=torch.tensor([1.0, -1.0, 2.0]), labels=torch.tensor([1.0, 1.0, 1.0]),
    ...               groups={"g": torch.tensor([1, 1, 0])}, group_values={"g": ["a", "b"]})
    >>> float(tpr.evaluate(ev(batch)))
    0.5
"""

# The private names are kept at the module path they had before the split.
from .compile import MAX_CELLS, ONEHOT_CELLS
from .fused import (
    Reduce,
    _bounds_to_scores,
    _first_order_only,
    _FusedBound,
    _FusedPass,
    _takes_fused_pass,
)
from .layout import _Layout
from .leaf_values import LeafValues
from .membership import _Membership, _resolve
from .plan import DENSE_LIMIT, _Factor, _FusedPlan, _Plan, _Rows
from .rate_evaluator import RateEvaluator
from .whole_split import empty_subset_error

__all__ = ["DENSE_LIMIT", "MAX_CELLS", "ONEHOT_CELLS", "LeafValues", "RateEvaluator", "Reduce",
           "empty_subset_error"]
