"""The fused training pass: scores ``[B]`` on hard factors, no group loss, as ONE autograd
node (:class:`_FusedPass`: the leaves' values; :class:`_FusedBound`: the sign-correct
combination of the bounds at costs read off the true rates, paper 000 eq. (4)); see the
package docstring. :class:`FusedRunner` is its forward outside autograd."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..batch import Batch
from ..errors import RatesError
from ..events import Indicator
from ..surrogates import Surrogate, sign_split
from .estimates import RunningEstimates
from .layout import Constants, Layouts, _Layout
from .plan import _Plan

Reduce = Callable[[torch.Tensor], torch.Tensor]
"""``reduce=`` of a training pass: maps this process's flat per-cell sums to the sums over
every process of a data-parallel game (one collective; :mod:`fairgames.game.distributed`)."""


def _takes_fused_pass(plan: _Plan, batch: Batch) -> bool:
    """Whether a training pass on ``batch`` runs as one fused autograd node: hard factors and
    no group loss (``plan.fused``), scores (not probabilities) of one model, and weights that
    need no gradient. Otherwise the general, op-by-op pass runs."""
    return (plan.fused is not None and batch.scores is not None
            and batch.mixture_weights is None
            and (batch.weights is None or not batch.weights.requires_grad))


class FusedRunner:
    """What the fused pass reads besides the batch: the evaluator's ``indicators`` and
    ``surrogate``, its buffer dict (``_score_total``), its :class:`Layouts`, running
    estimates and constants."""

    def __init__(self, indicators: Sequence[Indicator], surrogate: Surrogate,
                 buffers: dict[str, torch.Tensor | None], layouts: Layouts,
                 running: RunningEstimates, constants: Constants) -> None:
        self.indicators, self.surrogate, self.buffers = indicators, surrogate, buffers
        self.layouts, self.running, self.constants = layouts, running, constants

    def values(self, layout: _Layout, s: torch.Tensor, update: bool,
               reduce: Reduce | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fused pass's forward, outside autograd: ``values`` ``[3, K]`` (true, upper, lower),
        each leaf's denominator ``[K]`` and the surrogate's slopes ``[2J, B]`` (see
        :class:`_FusedPass`). ``reduce`` makes the cell sums the global batch's (the backward
        then maps the global denominators onto this shard's examples)."""
        plan = layout.plan
        fused = plan.fused
        assert fused is not None
        self.buffers["_score_total"].add_(s.sum())  # type: ignore[union-attr]
        # [C, B]; row 0 holds ones
        cols, cols_t, rows = self.layouts.column_views(plan.columns, s)
        slopes = []
        for ind, (hit, bounds, lower) in zip(self.indicators, rows, strict=True):
            margin = s - ind.threshold if ind.threshold else s
            torch.heaviside(margin, self.constants(0.0 if ind.strict else 1.0, s), out=hit)
            slopes.append(self.surrogate.fill_bounds(margin, bounds, lower))
        if layout.onehot is not None:
            sums = torch.mm(layout.onehot, cols_t)           # [cells, C]
        else:
            # Summed along dim 1 of a [C, cells] buffer from the contiguous [C, B] columns: on
            # CPU, index_add along dim 0 from the [B, C] view is 10-20x slower when few cells
            # take many rows each (2.4 ms against 0.2 ms at 20 cells, B = 65 536).
            src = cols if layout.weights is None else cols * layout.weights
            sums = torch.zeros(plan.columns, plan.hard_cells, device=s.device)
            sums.index_add_(1, layout.code, src)
            sums = sums.t()
        flat = sums.reshape(-1)
        if reduce is not None:
            flat = reduce(flat)
        if layout.dens is None or reduce is not None:
            # (reduced: the global subset weights change with the other ranks' shards even while
            # this rank's layout is cached)
            # The subsets' weights read only the ones column, but one product over all sums:
            # a NaN/inf score would make them NaN (0·NaN), and the layout is cached for the
            # next batch with the same label/group tensors (a skipped non-finite step).
            self.running.layout_denominators(layout, fused.den(torch.nan_to_num(flat)))
        den = self.running.fused_denominators(layout, update)
        # An empty subset's leaves read their running estimates; θ's gradient through them is
        # already 0 (their cells hold no row of positive weight, and den is 1 there).
        values = self.running.fill_empty(
            fused.leaf(flat).view(3, plan.n_leaves) / den, layout.empty,  # type: ignore[arg-type]
            plan.fallback_rates(flat), update, layout.unseen)
        slope = slopes[0] if len(slopes) == 1 else torch.cat(slopes, dim=0)
        return values, den, slope


def _bounds_to_scores(layout: _Layout, g_bounds: torch.Tensor, den: torch.Tensor,
                      slope: torch.Tensor) -> torch.Tensor:
    """``d⟨g, [upper, lower]⟩ / d scores`` ``[B]`` for a gradient ``g_bounds`` ``[2K]`` of the
    bounds: divided by the denominators, through the transposed bound rows onto each cell's
    upper / lower columns, gathered per example (with its weight), times the slopes."""
    plan = layout.plan
    assert plan.fused is not None
    if g_bounds.dim() != 2:
        g_bounds = g_bounds.reshape(2, plan.n_leaves)
    if g_bounds.dtype != torch.float32:
        g_bounds = g_bounds.to(torch.float32)
    g = (g_bounds / den).view(-1)
    per_cell = plan.fused.back(g).view(-1, plan.hard_cells)     # [2J, cells]
    if layout.onehot is not None:
        per = torch.mm(per_cell, layout.onehot)                # [2J, B], weighted
    else:
        per = per_cell.index_select(1, layout.code)
        if layout.weights is not None:
            per = per * layout.weights
    return per.mul_(slope).sum(0)        # per is this call's own product: in place


class _FusedPass(torch.autograd.Function):
    """The training pass as one autograd node (see the package docstring).

    Forward, outside autograd: the columns ``[1, 1[s > z], upper, lower]`` per indicator as
    rows of a ``[C, B]`` buffer, their weighted sums per cell (one one-hot product or one
    ``index_add``), the leaf rows of the matrix, and the denominators (the subsets' weights
    come from the cached layout). Outputs ``true`` [K] (no gradient) and
    ``bounds = [upper, lower]`` [2K]. Backward: the bounds' gradient divided by the
    denominators, through the transposed bound rows onto each cell's upper / lower columns,
    gathered per example (with its weight) and multiplied by the saved slopes.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, runner: FusedRunner,  # type: ignore[override]
                layout: _Layout, update: bool, reduce: Reduce | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        s = scores if scores.dtype == torch.float32 else scores.to(torch.float32)
        values, den, slope = runner.values(layout, s, update, reduce)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(den, slope)
            ctx.layout, ctx.score_dtype = layout, scores.dtype
        true, bounds = values.view(-1).split([layout.plan.n_leaves, 2 * layout.plan.n_leaves])
        ctx.mark_non_differentiable(true)
        return true, bounds

    @staticmethod
    def backward(ctx, _g_true: torch.Tensor | None,  # type: ignore[override]
                 g_bounds: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        if g_bounds is None or not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        _first_order_only()
        den, slope = ctx.saved_tensors
        grad = _bounds_to_scores(ctx.layout, g_bounds, den, slope)
        return grad.to(ctx.score_dtype), None, None, None, None


class _FusedBound(torch.autograd.Function):
    """``Σ c⁺·upper + c⁻·lower`` at costs ``c = costs(true)`` as one autograd node whose
    forward also forms the per-example gradient (so its backward is one multiply).

    The costs may depend on the batch's true rates (linearised ratios, ratio slacks), which
    is why they are a callback run inside the pass. Outputs the scalar, ``true`` [K] and
    ``bounds`` [2K] (the latter two without gradient). First-order only.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, runner: FusedRunner,  # type: ignore[override]
                layout: _Layout, update: bool,
                costs: Callable[[torch.Tensor], torch.Tensor], reduce: Reduce | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # true and bounds take no gradient: no zeros made for them in the backward
        ctx.set_materialize_grads(False)
        s = scores if scores.dtype == torch.float32 else scores.to(torch.float32)
        values, den, slope = runner.values(layout, s, update, reduce)
        k = layout.plan.n_leaves
        true, bounds = values.view(-1).split([k, 2 * k])
        c = costs(true)
        split = sign_split(c)                           # [2, K]
        value = torch.dot(split.view(-1), bounds)       # paper 000 eq. (4): c⁺ᵀ·up + c⁻ᵀ·lo
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(_bounds_to_scores(layout, split, den, slope))
            ctx.score_dtype = scores.dtype
        ctx.mark_non_differentiable(true, bounds)
        return value, true, bounds

    @staticmethod
    def backward(ctx, g_value: torch.Tensor, _g_true: torch.Tensor | None,  # type: ignore[override]
                 _g_bounds: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        if g_value is None or not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        _first_order_only()
        (grad,) = ctx.saved_tensors
        return (grad * g_value).to(ctx.score_dtype), None, None, None, None, None


def _first_order_only() -> None:
    """The fused nodes' backward is built from constants of the forward (the slopes, the
    per-example gradient): a graph of it (``create_graph=True``: a gradient penalty, a
    Hessian-vector product) would give a second derivative without the surrogate's
    curvature, silently wrong. Grad mode is on in a backward only under ``create_graph``."""
    if torch.is_grad_enabled():
        raise RatesError("the fused rate pass is first-order: differentiating its gradient "
                         "(backward/grad with create_graph=True, e.g. a gradient penalty) is "
                         "not supported")
