"""Whole-split evaluation of a deterministic model or a stochastic mixture of models.

A solution is evaluated with TRUE rates over a whole split by the one exact evaluator
(:class:`fairgames.rates.ExactEvaluator`: float64 counts, one pass): the problem's objective,
every constraint's value ``g`` (of ``g <= 0``; positive is a violation) and violation, the
label kind's headline metrics (``error`` for a binary target; ``mse`` and ``mae`` for a real
one) and a per-group table (:class:`fairgames.rates.GroupTable`). For a stochastic model
(weights ``q`` over ``R`` members) every rate is the exact mixture expectation
``Σ_r q_r R(θ_r)`` and a metric is evaluated at those rates, as paper 000 defines a
stochastic model's metric.

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

import dataclasses
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.data.crossed import constrained_counts, constrained_values
from fairgames.game import Problem
from fairgames.problems import ProblemSpec
from fairgames.problems.spec import UNCONSTRAINED_PREFIX
from fairgames.rates import (
    Batch,
    Constraint,
    EmptySubsetError,
    ExactEvaluator,
    Expression,
    GroupTable,
    ks_disparity,
    leaves_of,
    summary_metrics,
    threshold_rates,
)
from fairgames.rates.evaluator import LeafValues
from fairgames.rates.events import DEFAULT_INDICATOR
from fairgames.rates.exact import cached_group_table

from .data import chunks, make_batch

# A mixture's chunk holds [R, rows] scores and the evaluator's float64 temporaries of that
# size: rows per chunk are cut to keep each at most this many entries (16 MB), whatever R.
MIXTURE_ENTRIES = 2 ** 21

GROUP_RATES = ("count", "share", "base_rate", "positive_rate", "tpr", "fpr", "error",
               "precision", "fmeasure", "kld")
GROUP_LOSSES = ("count", "share", "mean_label", "mean_prediction", "mse", "mae")


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
                 decision: float = 0.0) -> None:
        self.objective = objective
        self.constraints = list(constraints)
        self.protected = protected
        self.chunk = int(chunk)
        self.grid = grid
        self.decision = float(decision)
        self._views: dict[tuple, tuple[ExactEvaluator, GroupTable, list[str]]] = {}

    def _view(self, ds: TabularDataset) -> tuple[ExactEvaluator, GroupTable, list[str]]:
        """The evaluator of one label kind and group layout (built once, plans cached)."""
        names = list(ds.group_names[self.protected])
        key = (ds.label_kind, tuple(names))
        if key not in self._views:
            table = cached_group_table(self.protected, tuple(names), ds.label_kind)
            summary = summary_metrics(ds.label_kind)
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
        if not (_counts_suffice(evaluator, ds) and bool(torch.isfinite(scores).all())):
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
        for idx in self._chunk_rows(ds, members):
            s = scores if idx is None else scores[..., idx]
            p = expected_prediction(s, mixture_weights) if sign_only else None
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


def empty_subsets(metrics: Mapping[str, Expression | Constraint], ds: TabularDataset,
                  chunk: int = 65536) -> dict[str, list[str]]:
    """Name → the subsets of that metric (a rate's denominator, e.g. a group's positives)
    with no row, or no weight, on the whole split ``ds``; only metrics with one are listed.

    The subsets depend on labels and groups only: the scores are zeros, and a churn
    baseline's too.

    Example:
        >>> from fairgames.rates import group, true_positive_rate
        >>> from fairgames.data import make_synthetic
        >>> ds = make_synthetic(n=200, seed=0).test
        >>> ds = ds.subset(torch.nonzero(ds.groups["group"] == 0).flatten())   # no group 1
        >>> empty_subsets({"tpr1": true_positive_rate(group("group", "1")),
        ...                "tpr0": true_positive_rate(group("group", "0"))}, ds)
        {'tpr1': ["(group('group', '1') & label(1))"]}
    """
    if len(ds) == 0:
        return {name: ["all"] for name in metrics}
    evaluator = ExactEvaluator(dict(metrics), optional=list(metrics))
    zeros = torch.zeros(len(ds), device=ds.device)
    values = evaluator.leaf_values(
        make_batch(ds, zeros[idx], idx, baseline_scores=zeros)
        for idx in chunks(len(ds), chunk, ds.device))
    assert values.subset_weights is not None
    weights = values.subset_weights.tolist()                    # one host sync
    out: dict[str, list[str]] = {}
    for name, m in metrics.items():
        expression = m.expression if isinstance(m, Constraint) else m
        empty = {str(lf.where): None for lf in leaves_of([expression])
                 if weights[values.position(lf)] <= 0}
        if empty:
            out[name] = list(empty)
    return out


def statements(problem: ProblemSpec | Problem, train: TabularDataset, protected: str
               ) -> tuple[Expression | None, list[Constraint]]:
    """The objective and constraints of a problem, a spec compiled against the training
    groups with zeros for the values a run computes first (``unconstrained_<metric>``: they
    change neither the subsets nor the statements' form).

    Example:
        >>> from fairgames.data import make_synthetic
        >>> from fairgames.problems import load_problem
        >>> train = make_synthetic(n=300, seed=0).train
        >>> objective, constraints = statements(load_problem("kld_error"), train, "group")
        >>> [c.name for c in constraints]
        ['error_bound']
    """
    if isinstance(problem, ProblemSpec):
        stand_ins = {UNCONSTRAINED_PREFIX + m: 0.0 for m in problem.unconstrained_metrics()}
        built = problem.build(protected, constrained_values(train.group_names), stand_ins,
                              constrained_counts(train, protected), label_kind=train.label_kind)
        return built.objective, list(built.constraints)
    return problem.objective, list(problem.constraints.values())


def require_training_subsets(problem: ProblemSpec | Problem, train: TabularDataset,
                             protected: str, chunk: int = 65536) -> None:
    """Refuse, before any training, an objective or constraint with a subset (a group, a
    group's positives, ...) that has no row in the training split: its rate is undefined
    there, so the game would play it on nothing.

    A spec is compiled against the training groups; the values a run computes first
    (``unconstrained_<metric>``) do not change the subsets, so zeros stand in for them.

    Raises:
        EmptySubsetError: naming the split, each such constraint and its empty subsets, and
            the split's group counts.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> from fairgames.problems import load_problem
        >>> train = make_synthetic(n=300, seed=0).train
        >>> train = train.subset(torch.nonzero(train.groups["group"] == 0).flatten())
        >>> require_training_subsets(load_problem("equal_opportunity"), train, "group")
        Traceback (most recent call last):
        ...
        fairgames.rates.errors.EmptySubsetError: the training split (...) has no row in ...
    """
    objective, constraints = statements(problem, train, protected)
    metrics: dict[str, Expression | Constraint] = {f"constraint {c.name!r}": c
                                                   for c in constraints}
    if objective is not None:
        metrics["the objective"] = objective
    empty = empty_subsets(metrics, train, chunk)
    if empty:
        listed = "; ".join(f"{name}: {', '.join(subsets)}" for name, subsets in empty.items())
        raise EmptySubsetError(
            f"the training split ({len(train)} rows) has no row in a subset the problem "
            f"reads, so its rate is undefined there — {listed}. The split's {protected!r} "
            f"counts: {train.group_counts(protected)}. Use another data.protected, problem "
            "or data split.")


def group_table(ds: TabularDataset, positive: torch.Tensor, attribute: str
                ) -> dict[str, dict[str, float | None]]:
    """Per-group rates of predictions ``positive`` (``P(ŷ = 1)`` per row, in [0, 1]) on
    ``ds``, a split with a binary target.

    Keys are ``"overall"`` and ``"<attribute>=<value>"``; see :func:`group_rates`.
    """
    return group_rates(ds.labels, ds.groups[attribute], ds.group_names[attribute], attribute,
                       positive)


def group_rates(labels: torch.Tensor, codes: torch.Tensor, names: Sequence[str], attribute: str,
                positive: torch.Tensor) -> dict[str, dict[str, float | None]]:
    """Per-group rates of predictions ``positive`` (``P(ŷ = 1)`` per row) against 0/1
    ``labels``: ``count``, ``share``, ``base_rate``, ``positive_rate``, ``tpr``, ``fpr``,
    ``error``, ``precision``, ``fmeasure`` and ``kld`` (KLD between the overall base rate and
    the group's positive rate), for ``"overall"`` and each ``"<attribute>=<value>"``. A rate
    with an empty denominator is ``None``. Exact (:class:`fairgames.rates.GroupTable`).

    Example:
        >>> import torch
        >>> t = group_rates(torch.tensor([1., 0., 1., 1.]), torch.tensor([0, 0, 1, 1]),
        ...                 ["a", "b"], "g", torch.tensor([1., 1., 0., 1.]))
        >>> t["g=a"]["precision"], t["g=b"]["tpr"], t["overall"]["error"]
        (0.5, 0.5, 0.5)
    """
    p = positive if positive.is_floating_point() else positive.double()
    batch = Batch(scores=None, probabilities=p, labels=labels, groups={attribute: codes},
                  group_values={attribute: list(names)})
    return cached_group_table(attribute, tuple(names), "binary").evaluate(batch)


def batch_group_table(batch: Batch, attribute: str, decision: float = 0.0
                      ) -> dict[str, dict[str, float | None]]:
    """The per-group table of ``batch`` by its label kind (:class:`~fairgames.rates.GroupTable`):
    classification rates for a binary target (predicted positive: score > ``decision``),
    losses for a real one.

    Example:
        >>> import torch
        >>> b = Batch(scores=torch.tensor([0.2, 0.9]), labels=torch.tensor([0.0, 1.0]),
        ...           label_kind="real", groups={"g": torch.tensor([0, 1])},
        ...           group_values={"g": ["a", "b"]})
        >>> round(batch_group_table(b, "g")["overall"]["mse"], 4)
        0.025
    """
    if decision and batch.label_kind == "binary":
        batch = dataclasses.replace(batch, scores=batch.scores - decision)
    if batch.label_kind == "binary" and batch.scores is not None:
        # the table reads 1[s > 0] alone: the expected prediction gives its values, bit for
        # bit, without the surrogate bounds of the scores' pass
        p = expected_prediction(batch.scores, batch.mixture_weights)
        if p is not None:
            batch = dataclasses.replace(batch, scores=None, mixture_weights=None,
                                        probabilities=p)
    return cached_group_table(attribute, tuple(batch.group_values[attribute]),
                              batch.label_kind).evaluate(batch)


def parity_gaps(scores: torch.Tensor, codes: torch.Tensor, names: Sequence[str],
                thresholds: Sequence[float]) -> dict[str, float]:
    """The compact statistical-parity scalars TensorBoard shows beside λ (paper 003): the
    worst ``|γ̂_{a,z}| = |P[f ≥ z | A=a] − P[f ≥ z]|`` over the thresholds (``worst_gap``) and
    each group's own worst (``<value>/max_gap``), exact on these scores; soft groups (a
    membership matrix) have none.

    Example:
        >>> parity_gaps(torch.tensor([0.1, 0.9, 0.9, 0.9]), torch.tensor([0, 0, 1, 1]),
        ...             ["a", "b"], [0.5])
        {'worst_gap': 0.25, 'a/max_gap': 0.25, 'b/max_gap': 0.25}
    """
    if codes.is_floating_point():
        return {}
    t = threshold_rates(scores, codes, len(names), torch.tensor(list(thresholds)))
    per_group = t.gaps.abs().amax(1).tolist()
    out = {"worst_gap": t.disparity()}
    out.update({f"{v}/max_gap": g for v, g in zip(names, per_group, strict=True)
                if g == g})                                    # NaN: a group absent here
    return out
