"""Whole-split evaluation of a deterministic model or a stochastic mixture of models.

A solution is evaluated with TRUE rates over a whole split by the one exact evaluator
(:class:`fairgames.rates.ExactEvaluator`: float64 counts, one pass): the problem's objective,
every constraint's value ``g`` (of ``g <= 0``; positive is a violation) and violation, the
label kind's headline metrics (``error`` for a binary target; ``mse`` and ``mae`` for a real
one) and a per-group table (:class:`fairgames.rates.GroupTable`). For a stochastic model
(weights ``q`` over ``R`` members) every rate is the exact mixture expectation
``Σ_r q_r R(θ_r)`` and a metric is evaluated at those rates, as paper 000 defines a
stochastic model's metric.

Beside it: the shortcuts of 0/1 predictions (the expected prediction, integer cell counts) in
:mod:`fairgames.train.hard_predictions`, the training split's empty-subset check in
:mod:`fairgames.train.subsets` and the log's per-group tables in
:mod:`fairgames.train.group_tables`; their names are re-exported here.

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, positive_prediction_rate, group
    >>> from fairgames.data import make_synthetic
    >>> ds = make_synthetic(n=200, seed=0).test
    >>> view = SolutionEvaluator(error_rate(), [(positive_prediction_rate(group("group", "1"))
    ...                                           >= 0.3).named("ppr1")], "group")
    >>> out = view.evaluate(ds, torch.ones(len(ds)))   # predicts everyone positive
    >>> out["constraints"]["ppr1"], round(out["error"], 4) == round(1 - float(ds.labels.mean()), 4)
    ({'value': -0.7, 'violation': 0.0}, True)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.rates import (
    Batch,
    Constraint,
    ExactEvaluator,
    Expression,
    GroupTable,
    ks_disparity,
    summary_metrics,
    threshold_rates,
)
from fairgames.rates.exact import cached_group_table

from .data import chunks, make_batch
from .group_tables import (
    GROUP_LOSSES,
    GROUP_RATES,
    batch_group_table,
    group_rates,
    group_table,
    parity_gaps,
)
from .hard_predictions import (
    CellCounts,
    _cell_sums_each,
    _counts_suffice,
    _leaf_values_of_sums,
    _reads_sign_only,
    expected_prediction,
)
from .subsets import empty_subsets, require_training_subsets, statements

# the names the evaluation's users import from here (the moved helpers re-exported)
__all__ = ["GROUP_LOSSES", "GROUP_RATES", "MIXTURE_ENTRIES", "CellCounts", "SolutionEvaluator",
           "batch_group_table", "empty_subsets", "expected_prediction", "group_rates",
           "group_table", "parity_gaps", "require_training_subsets", "statements"]

# A mixture's chunk holds [R, rows] scores and the evaluator's float64 temporaries of that
# size: rows per chunk are cut to keep each at most this many entries (16 MB), whatever R.
MIXTURE_ENTRIES = 2 ** 21


class SolutionEvaluator:
    """Evaluates the objective, constraints, headline metrics and per-group table of a
    solution (every split's label kind: binary or real).

    Args:
        objective: the problem's objective expression.
        constraints: the problem's named constraints.
        protected: the attribute whose groups the table lists.
        chunk: rows per evaluation chunk.
        grid: thresholds ``[N]`` of a problem on predictions in [0, 1] (paper 003): each
            evaluation then also reports the exact KS disparity ``ks_disparity`` and the
            grid's worst ``|γ̂_{a,z}|`` ``grid_disparity``
            (:mod:`fairgames.rates.thresholds`; a mixture's member-weighted expectation).
        decision: the score a binary prediction exceeds in the headline error and the
            per-group rates (0.5 for a sigmoid head: :func:`fairgames.models.decision_threshold`);
            the problem's own statements read the scores as they are.
    """

    def __init__(self, objective: Expression, constraints: Sequence[Constraint],
                 protected: str, chunk: int = 65536, grid: torch.Tensor | None = None,
                 decision: float = 0.0, probabilities: bool = False) -> None:
        self.objective = objective
        self.probabilities = bool(probabilities)
        self.constraints = list(constraints)
        self.protected = protected
        self.chunk = int(chunk)
        self.grid = grid
        self.decision = float(decision)
        self._views: dict[tuple, tuple[ExactEvaluator, GroupTable, list[str]]] = {}

    def _view(self, ds: TabularDataset) -> tuple[ExactEvaluator, GroupTable, list[str]]:
        """The evaluator of one label kind and group layout (built once, plans cached)."""
        names = list(ds.group_names[self.protected])
        key = (ds.label_kind, tuple(names), ds.unlabeled)
        if key not in self._views:
            # the headline metrics and the table read labels: over the labeled rows alone
            table = cached_group_table(self.protected, tuple(names), ds.label_kind,
                                       ds.unlabeled)
            summary = summary_metrics(ds.label_kind, ds.unlabeled)
            metrics: dict[Hashable, Any] = {("objective",): self.objective}
            metrics.update({("constraint", c.name): c for c in self.constraints})
            metrics.update({("summary", k): e for k, e in summary.items()})
            metrics.update(table.metrics)
            # The objective and a constraint may be undefined on a validation or test split
            # (a group with no row there): NaN, reported as undefined. A run refuses one
            # undefined on the training split before its first step (empty_subsets).
            optional = [("objective",), *(("constraint", c.name) for c in self.constraints),
                        *table.metrics]
            self._views[key] = (ExactEvaluator(metrics, optional=optional), table,
                                list(summary))
        return self._views[key]

    def evaluate(self, ds: TabularDataset, scores: torch.Tensor,
                 mixture_weights: torch.Tensor | None = None,
                 baseline_scores: torch.Tensor | None = None) -> dict[str, Any]:
        """Metrics of scores ``[N]`` (a deterministic model) or ``[R, N]`` with
        ``mixture_weights [R]`` (a stochastic model) on the split ``ds``: ``label_kind``,
        ``objective``, ``error`` (binary) or ``mse`` and ``mae`` (real), ``constraints``
        and ``groups``. The objective or a constraint with an empty subset on ``ds`` is NaN
        (``None`` in ``results.json``)."""
        evaluator, table, summary = self._view(ds)

        def parts(s: torch.Tensor) -> Iterator[Batch]:
            return self._parts(ds, s, mixture_weights, baseline_scores,
                               _reads_sign_only(evaluator))
        values = evaluator.evaluate(parts(scores))
        # a binary target's rates at the model's decision (a second pass, shifted scores)
        shifted = (evaluator.evaluate(parts(scores - self.decision))
                   if self.decision and ds.label_kind == "binary" else values)
        out: dict[str, Any] = {"label_kind": ds.label_kind,
                               "objective": values[("objective",)]}
        out.update({k: shifted[("summary", k)] for k in summary})
        if self.grid is not None:
            out.update(self.disparities(ds, scores, mixture_weights))
        out["constraints"] = self._constraints(values)
        out["groups"] = table.table(shifted)
        return out

    def statements(self, ds: TabularDataset, scores: torch.Tensor,
                   mixture_weights: torch.Tensor | None = None,
                   baseline_scores: torch.Tensor | None = None) -> dict[str, Any]:
        """:meth:`evaluate`'s ``objective`` and ``constraints`` alone, the same values
        (the same pass; the headline metrics and the per-group table are not read: the
        candidates' comparison needs neither, and with many groups the table is most of
        the cost)."""
        evaluator, _, _ = self._view(ds)
        names = [("objective",), *(("constraint", c.name) for c in self.constraints)]
        values = evaluator.evaluate(
            self._parts(ds, scores, mixture_weights, baseline_scores,
                        _reads_sign_only(evaluator)), names)
        return {"objective": values[("objective",)], "constraints": self._constraints(values)}

    def statements_each(self, ds: TabularDataset, scores: torch.Tensor,
                        baseline_scores: torch.Tensor | None = None) -> list[dict[str, Any]]:
        """:meth:`statements` of each row of ``scores`` ``[R, N]`` (``R`` deterministic
        models: a run's candidates), the same values bit for bit. Where every metric reads
        the scores through ``1[s > 0]`` alone and the counts are integers (hard groups,
        unweighted rows, events with integer coefficients), all ``R`` models are counted in
        one pass (:meth:`counts_each`); otherwise one :meth:`statements` per row.

        Example:
            >>> from fairgames.data import make_synthetic
            >>> from fairgames.rates import error_rate, fmeasure
            >>> ds = make_synthetic(n=200, seed=0).test
            >>> view = SolutionEvaluator(fmeasure(), [(error_rate() <= 0.3).named("e")], "group")
            >>> s = torch.randn(3, len(ds), generator=torch.Generator().manual_seed(0))
            >>> view.statements_each(ds, s) == [view.statements(ds, row) for row in s]
            True
        """
        evaluator, _, _ = self._view(ds)
        counts = self.counts_each(ds, scores, baseline_scores)
        if counts is None:
            return [self.statements(ds, row, baseline_scores=baseline_scores)
                    for row in scores]
        return self.statements_of_counts(counts)

    def counts_exact(self, ds: TabularDataset) -> bool:
        """Whether :meth:`counts_each` gives ``ds``'s exact values (for finite scores).

        Example:
            >>> from fairgames.data import make_synthetic
            >>> from fairgames.rates import error_rate
            >>> SolutionEvaluator(error_rate(), [], "group").counts_exact(
            ...     make_synthetic(n=50, seed=0).train)
            True
        """
        return _counts_suffice(self._view(ds)[0], ds)

    def counts_each(self, ds: TabularDataset, scores: torch.Tensor,
                    baseline_scores: torch.Tensor | None = None) -> CellCounts | None:
        """The integer cell counts of each row of ``scores`` ``[R, N]`` on ``ds`` (one
        pass), from which :meth:`statements_of_counts` gives :meth:`statements` of each row
        or of any mixture of them; ``None`` where counts do not give the exact values (a
        metric reading more than ``1[s > 0]``, soft groups, weighted rows, non-finite
        scores). Counted once, a model's values are read again in microseconds: the early
        stop's check (:mod:`fairgames.train.results.early_stop`) keeps each snapshot's counts.

        Example:
            >>> from fairgames.data import make_synthetic
            >>> from fairgames.rates import error_rate
            >>> ds = make_synthetic(n=200, seed=0).test
            >>> view = SolutionEvaluator(error_rate(), [(error_rate() <= 0.3).named("e")], "group")
            >>> s = torch.randn(2, len(ds), generator=torch.Generator().manual_seed(0))
            >>> c = view.counts_each(ds, s)
            >>> view.statements_of_counts(c) == [view.statements(ds, row) for row in s]
            True
        """
        evaluator, _, _ = self._view(ds)
        if self.probabilities or not (_counts_suffice(evaluator, ds)
                                      and bool(torch.isfinite(scores).all())):
            return None

        def parts() -> Iterator[tuple[Batch, torch.Tensor]]:
            for idx in self._chunk_rows(ds, scores.shape[0]):
                # each row's expected_prediction, bit for bit
                p = (scores if idx is None else scores[:, idx]) > 0
                yield (make_batch(ds, None, idx, baseline_scores=baseline_scores,
                                  probabilities=p[0].to(torch.float64)),
                       p.to(torch.float64))
        layout, sums = _cell_sums_each(evaluator, parts())
        return CellCounts(ds, layout, sums)

    def statements_of_counts(self, counts: CellCounts,
                             mixture_weights: torch.Tensor | None = None
                             ) -> list[dict[str, Any]]:
        """:meth:`statements` of each model counted in ``counts`` (:meth:`counts_each`), bit
        for bit; with ``mixture_weights`` ``[R]``, of their mixture alone (a list of one:
        the rates of the weighted sum of counts, paper 000's stochastic model — the values
        of :meth:`statements` with those weights up to float64 rounding)."""
        evaluator, _, _ = self._view(counts.split)
        sums = counts.sums
        if mixture_weights is not None:
            q = mixture_weights.to(sums.device, torch.float64)
            sums = (q[:, None] * sums).sum(0, keepdim=True)
        names = [("objective",), *(("constraint", c.name) for c in self.constraints)]
        out = []
        for leaves in _leaf_values_of_sums(evaluator, counts.layout, sums):
            values = evaluator.read(leaves, names)
            out.append({"objective": values[("objective",)],
                        "constraints": self._constraints(values)})
        return out

    def _parts(self, ds: TabularDataset, scores: torch.Tensor,
               mixture_weights: torch.Tensor | None, baseline_scores: torch.Tensor | None,
               sign_only: bool = False) -> Iterator[Batch]:
        """The split's chunks with their scores (a split of one chunk: its own tensors, not
        copies); with ``sign_only`` (the metrics read only ``1[s > 0]``), each chunk's
        expected prediction instead where it is a probability."""
        members = scores.shape[0] if scores.dim() == 2 else 1
        if self.probabilities and not sign_only:
            raise ValueError("the model's outputs are P(ŷ = 1) of a randomised prediction, "
                             "but a metric of this problem reads more than the predictions "
                             "(a score's value): evaluate such a problem on a score model")
        for idx in self._chunk_rows(ds, members):
            s = scores if idx is None else scores[..., idx]
            p = (_mean_probability(s, mixture_weights) if self.probabilities else
                 expected_prediction(s, mixture_weights) if sign_only else None)
            yield (make_batch(ds, None, idx, baseline_scores=baseline_scores, probabilities=p)
                   if p is not None else
                   make_batch(ds, s, idx, baseline_scores=baseline_scores,
                              mixture_weights=mixture_weights))

    def _chunk_rows(self, ds: TabularDataset, members: int = 1
                    ) -> Iterator[torch.Tensor | None]:
        """The row indices of each chunk of ``ds``; ``None`` (all rows, no copy) for a
        split of one chunk. A mixture of ``members`` > 1 gets at most
        :data:`MIXTURE_ENTRIES` ``/ members`` rows a chunk (a capped reduction's Q̂ has
        thousands of members)."""
        rows = self.chunk if members <= 1 else max(1, min(self.chunk,
                                                          MIXTURE_ENTRIES // members))
        if 0 < len(ds) <= rows:
            return iter([None])
        return chunks(len(ds), rows, ds.device)

    def _constraints(self, values: Mapping[Hashable, float]) -> dict[str, dict[str, float]]:
        out = {}
        for c in self.constraints:
            g = values[("constraint", c.name)]
            out[c.name] = {"value": g, "violation": max(g, 0.0) if c.sense == "<=" else abs(g)}
        return out


    def disparities(self, ds: TabularDataset, scores: torch.Tensor,
                    mixture_weights: torch.Tensor | None = None) -> dict[str, float]:
        """``ks_disparity`` and ``grid_disparity`` of scores ``[N]`` or a mixture's ``[R, N]``
        on ``ds`` (groups of the protected attribute with no row are left out)."""
        assert self.grid is not None
        codes, k = ds.groups[self.protected], len(ds.group_names[self.protected])
        q = mixture_weights
        return {"ks_disparity": ks_disparity(scores, codes, k, member_weights=q),
                "grid_disparity": threshold_rates(scores, codes, k, self.grid,
                                                  member_weights=q).disparity()}


def outputs_probabilities(model: torch.nn.Module) -> bool:
    """Whether ``model`` declares (attribute ``outputs_probabilities``) that its outputs are
    P(ŷ = 1) of a randomised prediction, to be evaluated in expectation rather than
    thresholded.

    Example:
        >>> outputs_probabilities(torch.nn.Identity())
        False
    """
    return bool(getattr(model, "outputs_probabilities", False))


def _mean_probability(p: torch.Tensor, mixture_weights: torch.Tensor | None) -> torch.Tensor:
    """P(ŷ = 1) per row, float64, of outputs that are probabilities ``[N]`` (or a mixture's
    ``[R, N]`` with weights ``[R]``: Σ_r q_r p_r)."""
    p = p.to(torch.float64)
    if p.dim() == 2:
        q = (torch.ones(p.shape[0], dtype=torch.float64, device=p.device) / p.shape[0]
             if mixture_weights is None else mixture_weights.to(torch.float64))
        p = (q[:, None] * p).sum(0)
    return p.clamp(0.0, 1.0)
