"""Exact evaluation for reports: named metrics over a whole split, in float64.

:class:`ExactEvaluator` is the one place where reports (the engine's ``results.json`` and
``report.md``, the baselines' tables, the benchmarks) compute metrics. It takes named
metrics of three kinds — an :class:`~fairgames.rates.Expression` (a rate, a ratio, a ψ metric
such as the F-measure, G-mean or KLD, a group loss), a
:class:`~fairgames.rates.Constraint` (its value ``g`` of ``g <= 0``) or a
:class:`~fairgames.rates.Subset` (its total weight: a row count) — and evaluates all of them
in one pass of :meth:`RateEvaluator.evaluate_split` (float64 cell counts, whole split, given
as one :class:`Batch` or as chunks).

Undefined values: a rate over a subset with no example, and a ratio whose denominator is 0
on the split — precision with no predicted positive, an F-measure with neither a positive
nor a predicted positive, a win/loss ratio with no loss — are *undefined*, not 0:
:meth:`ExactEvaluator.evaluate` returns NaN for them (a precision of 0 would claim that
every predicted positive was wrong, when there was none), :meth:`ExactEvaluator.undefined`
says why, :class:`GroupTable` holds ``None`` (``null`` in ``results.json``), and
``report.md`` prints "undefined". This is scikit-learn's ``zero_division=np.nan``, not its
default (0 with an ``UndefinedMetricWarning``).

A real-valued target (``label_kind="real"``, regression) has no confusion matrix; its metrics
are group losses: :func:`regression_metrics` (MSE, MAE) and the per-group table of
:class:`GroupTable` (mean target, mean prediction, MSE, MAE). The scores are the predictions.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, error_rate, fmeasure, group
    >>> batch = Batch(scores=torch.tensor([1.0, -1.0, 2.0, -3.0]),
    ...               labels=torch.tensor([1.0, 1.0, 0.0, 0.0]),
    ...               groups={"g": torch.tensor([0, 0, 1, 1])}, group_values={"g": ["a", "b"]})
    >>> ev = ExactEvaluator({"error": error_rate(), "f1": fmeasure(), "rows_b": group("g", "b")})
    >>> ev.evaluate(batch)
    {'error': 0.5, 'f1': 0.5, 'rows_b': 2.0}
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence

import torch

from .batch import Batch, split_batches
from .errors import RatesError
from .evaluator import LeafValues, RateEvaluator, empty_subset_error
from .events import ONE
from .exact_read import VectorRead, vectorizable
from .expressions import Constraint, Expression, Leaf, PsiNode, RatioNode, _value, leaves_of
from .losses import Loss
from .metrics import (
    error_rate,
    false_positive_rate,
    fmeasure,
    group_loss,
    kld,
    label_rate,
    positive_prediction_rate,
    precision,
    rate,
    true_positive_rate,
)
from .subsets import Subset, everything, group, source

Metric = Expression | Constraint | Subset

# Per-example "losses" whose group means are a real target's mean and the mean prediction.
TARGET = Loss("target", lambda s, y: y)
PREDICTION = Loss("prediction", lambda s, y: s)


def classification_metrics(where: Subset | None = None, reference: Subset | None = None
                           ) -> dict[str, Expression]:
    """A binary target's report columns on ``where``: base rate, positive prediction rate,
    TPR, FPR, error, precision, F-measure, and KLD between the base rate on ``reference``
    (default: every example) and the positive prediction rate on ``where`` (paper 000's
    Table 3 fairness metric).

    Example:
        >>> sorted(classification_metrics())[:3]
        ['base_rate', 'error', 'fmeasure']
    """
    return {"base_rate": label_rate(where), "positive_rate": positive_prediction_rate(where),
            "tpr": true_positive_rate(where), "fpr": false_positive_rate(where),
            "error": error_rate(where), "precision": precision(where),
            "fmeasure": fmeasure(where), "kld": kld(where, reference)}


def regression_metrics(where: Subset | None = None, *, means: bool = False
                       ) -> dict[str, Expression]:
    """A real target's losses on ``where``: ``mse`` = E[(y − s)²] and ``mae`` = E[|y − s|]
    (with ``means``, first ``mean_label`` = E[y] and ``mean_prediction`` = E[s]).

    Example:
        >>> print(regression_metrics()["mse"])
        +2·E[loss:squared | all]
    """
    out: dict[str, Expression] = {}
    if means:
        out = {"mean_label": group_loss(TARGET, where),
               "mean_prediction": group_loss(PREDICTION, where)}
    # the built-in "squared" loss is ½(y − s)², so MSE is twice its mean (an exact scaling)
    out["mse"] = 2.0 * group_loss("squared", where)
    out["mae"] = group_loss("absolute", where)
    return out


def labeled_rows(unlabeled: Sequence[str] = ()) -> Subset:
    """The rows whose labels a metric may read: every row, or those outside the unlabeled
    sources (paper 001's unlabeled data sets hold placeholder labels).

    Example:
        >>> str(labeled_rows(["d3"]))
        "~source('d3')"
    """
    where = everything()
    for name in unlabeled:
        where = where & ~source(name)
    return where


def summary_metrics(label_kind: str, unlabeled: Sequence[str] = ()) -> dict[str, Expression]:
    """A split's headline metrics: ``error`` for a binary target, ``mse`` and ``mae`` for a
    real one — over the labeled rows (outside the ``unlabeled`` sources).

    Example:
        >>> sorted(summary_metrics("real"))
        ['mae', 'mse']
    """
    where = labeled_rows(unlabeled)
    if label_kind == "binary":
        return {"error": error_rate(where)}
    if label_kind == "real":
        return regression_metrics(where)
    raise RatesError(f"label_kind must be 'binary' or 'real', got {label_kind!r}")


class ExactEvaluator:
    """Exact float64 values of named metrics over a whole split.

    Args:
        metrics: name (any hashable) → an expression, a constraint (its value ``g``) or a
            subset (its total weight).
        optional: names of metrics that may be undefined on a split: where one of their
            subsets has no example they are NaN. Any other metric on an empty subset raises
            :class:`~fairgames.rates.EmptySubsetError` naming the subset.

    Example:
        >>> import torch
        >>> from fairgames.rates import Batch, true_positive_rate, group
        >>> tpr_b = true_positive_rate(group("g", "b"))
        >>> ev = ExactEvaluator({"tpr_b": tpr_b}, optional=["tpr_b"])
        >>> batch = Batch(scores=torch.tensor([1.0, 2.0]), labels=torch.tensor([1.0, 0.0]),
        ...               groups={"g": torch.tensor([0, 1])}, group_values={"g": ["a", "b"]})
        >>> ev.evaluate(batch)          # no positive in group b: undefined, not an error
        {'tpr_b': nan}
    """

    def __init__(self, metrics: Mapping[Hashable, Metric], optional: Iterable[Hashable] = ()
                 ) -> None:
        self.metrics = dict(metrics)
        if not self.metrics:
            raise RatesError("ExactEvaluator needs at least one metric")
        lenient = set(optional)
        unknown = lenient - set(self.metrics)
        if unknown:
            raise RatesError(f"optional names {sorted(map(str, unknown))} are not metrics")
        self._leafy = {name: _as_leafy(m) for name, m in self.metrics.items()}
        self.rates = RateEvaluator(list(self._leafy.values())).eval()
        self._required = leaves_of([e for n, e in self._leafy.items() if n not in lenient])
        self._plans: dict[tuple[Hashable, ...], tuple] = {}

    def leaf_values(self, split: Batch | Iterable[Batch]) -> LeafValues:
        """Every leaf's exact value on ``split`` (one batch, or its chunks); the surrogate
        bounds are not computed (left at zero)."""
        first, batches = split_batches(split, "ExactEvaluator")
        self.rates.to(first.device)
        values = self.rates.evaluate_split(batches, empty="nan", bounds=False)
        self._check_required(values)
        return values

    def evaluate(self, split: Batch | Iterable[Batch], names: Iterable[Hashable] | None = None
                 ) -> dict[Hashable, float]:
        """Each metric's value on ``split`` (with ``names``, those metrics' only): NaN where
        undefined (an empty subset of an optional metric, a ratio with a zero denominator;
        see the module docstring and :meth:`undefined`)."""
        return self.read(self.leaf_values(split), names)

    def read(self, values: LeafValues, names: Iterable[Hashable] | None = None
             ) -> dict[Hashable, float]:
        """Each metric's value from :meth:`leaf_values` (one host sync); with ``names``,
        only those metrics' (the same values: each metric reads the leaves on its own)."""
        chosen = tuple(self.metrics) if names is None else tuple(names)
        if not chosen:
            return {}
        if values.true.dtype != torch.float64:
            return dict(zip(chosen, self._read_each(values, chosen).tolist(), strict=True))
        plan = self._plans.get(chosen)
        if plan is None or plan[0] is not values.index:
            plan = self._plans[chosen] = (values.index, *self._plan(chosen, values))
        _, vector, vector_at, each, subsets, subset_at = plan
        out = torch.empty(len(chosen), dtype=torch.float64, device=values.true.device)
        if vector is not None:
            out[vector_at.to(out.device)] = vector(values)
        if each:
            out[torch.tensor([i for i, _ in each], device=out.device)] = self._read_each(
                values, [n for _, n in each])
        if subsets is not None:
            assert values.subset_weights is not None
            out[subset_at.to(out.device)] = values.subset_weights[subsets.to(out.device)].to(
                torch.float64)
        return dict(zip(chosen, out.tolist(), strict=True))

    def _plan(self, chosen: tuple[Hashable, ...], values: LeafValues) -> tuple:
        """How :meth:`read` reads ``chosen``: subset weights gathered, affine forms and
        ratios read together (:class:`VectorRead`: the same values, bit for bit), the rest
        (ψ metrics, constants) one at a time."""
        subsets, vectors, each = [], [], []
        for i, name in enumerate(chosen):
            m = self.metrics[name]
            if isinstance(m, Subset):
                subsets.append((i, values.position(_count_leaf(m))))
            elif vectorizable(self._leafy[name]):
                vectors.append((i, self._leafy[name]))
            else:
                each.append((i, name))
        vector = VectorRead([e for _, e in vectors], values.index) if vectors else None
        return (vector, torch.tensor([i for i, _ in vectors]), each,
                torch.tensor([p for _, p in subsets]) if subsets else None,
                torch.tensor([i for i, _ in subsets]))

    def _read_each(self, values: LeafValues, names: Sequence[Hashable]) -> torch.Tensor:
        """The values of ``names`` read one metric at a time (float64)."""
        out = []
        for name in names:
            m = self.metrics[name]
            if isinstance(m, Subset):
                assert values.subset_weights is not None
                v = values.subset_weights[values.position(_count_leaf(m))]
            else:
                v = self._leafy[name].evaluate(values)
            out.append(torch.as_tensor(v, dtype=torch.float64, device=values.true.device))
        return torch.stack(out)

    def undefined(self, values: LeafValues) -> dict[Hashable, str]:
        """Why each metric that is undefined on a split (not finite in :meth:`read`) is,
        from :meth:`leaf_values` (syncs).

        Example:
            >>> import torch
            >>> from fairgames.rates import Batch, precision
            >>> ev = ExactEvaluator({"precision": precision()})
            >>> values = ev.leaf_values(Batch(scores=torch.tensor([-1.0, -2.0]),
            ...                               labels=torch.tensor([1.0, 0.0])))
            >>> ev.read(values)
            {'precision': nan}
            >>> print(ev.undefined(values)["precision"])
            the denominator of [+1·E[true_positive | all]] / [+1·E[true_positive | all]
                +1·E[false_positive | all]] is 0 on this split
        """
        assert values.subset_weights is not None
        out: dict[Hashable, str] = {}
        for name, v in self.read(values).items():
            if math.isfinite(v):
                continue
            expr = self._leafy[name]
            empty = [lf.where for lf in expr.leaves()
                     if float(values.subset_weights[values.position(lf)]) <= 0]
            if empty:
                out[name] = "no example (with positive weight) in subset(s): " + ", ".join(
                    dict.fromkeys(str(w) for w in empty))
                continue
            zero = [node for node in _ratios(expr)
                    if float(_value(Expression(node.denominator), values.true_value)) == 0]
            out[name] = (f"the denominator of {zero[0]} is 0 on this split" if zero
                         else f"its value is {v} on this split")
        return out

    def _check_required(self, values: LeafValues) -> None:
        assert values.subset_weights is not None
        if not self._required:
            return
        pos = [values.position(lf) for lf in self._required]
        empty = (values.subset_weights[pos] <= 0).nonzero().flatten().tolist()
        if empty:
            subsets = {self._required[i].where.key(): self._required[i].where for i in empty}
            raise empty_subset_error(list(subsets.values()))


def _ratios(expr: Expression) -> list[RatioNode]:
    """The ratio nodes of ``expr``, those inside ψ arguments included."""
    out: list[RatioNode] = []
    for _, node in expr.nodes:
        if isinstance(node, RatioNode):
            out.append(node)
        elif isinstance(node, PsiNode):
            out += [r for arg in node.args for r in _ratios(arg)]
    return out


def _count_leaf(where: Subset) -> Leaf:
    """A leaf on ``where`` that needs neither labels nor scores (its subset weight counts)."""
    (leaf,) = leaves_of([rate(ONE, where)])
    return leaf


def _as_leafy(m: Metric) -> Expression:
    if isinstance(m, Constraint):
        return m.expression
    if isinstance(m, Expression):
        return m
    if isinstance(m, Subset):
        return rate(ONE, m)
    raise RatesError(f"a metric must be an Expression, a Constraint or a Subset, got "
                     f"{type(m).__name__}")


class GroupTable:
    """A per-group table: ``count``, ``share`` and the label kind's metrics for
    ``"overall"`` and each ``"<attribute>=<value>"``; an undefined entry (an empty
    denominator, an infinite KLD) is ``None``.

    Columns: :func:`classification_metrics` for a binary target; ``mean_label``,
    ``mean_prediction``, ``mse`` and ``mae`` (:func:`regression_metrics`) for a real one.

    Example:
        >>> import torch
        >>> table = GroupTable("g", ["a", "b"], "binary")
        >>> batch = Batch(probabilities=torch.tensor([1., 1., 0., 1.]), scores=None,
        ...               labels=torch.tensor([1., 0., 1., 1.]),
        ...               groups={"g": torch.tensor([0, 0, 1, 1])}, group_values={"g": ["a", "b"]})
        >>> t = table.evaluate(batch)
        >>> t["g=a"]["precision"], t["g=b"]["tpr"], t["overall"]["error"], t["g=b"]["fpr"]
        (0.5, 0.5, 0.5, None)
    """

    def __init__(self, attribute: str, names: Sequence[str], label_kind: str,
                 unlabeled: Sequence[str] = ()) -> None:
        if label_kind not in ("binary", "real"):
            raise RatesError(f"label_kind must be 'binary' or 'real', got {label_kind!r}")
        self.attribute, self.names, self.label_kind = attribute, list(names), label_kind
        self.unlabeled = tuple(unlabeled)
        # with unlabeled sources the table describes the labeled rows (its rates read labels)
        base = labeled_rows(unlabeled)
        self.rows = [("overall", base)] + [
            (f"{attribute}={v}", base & group(attribute, v)) for v in self.names]
        self.metrics: dict[Hashable, Metric] = {}
        self._columns: list[str] = []
        for key, where in self.rows:
            self.metrics[(key, "count")] = where
            columns = (classification_metrics(where, base) if label_kind == "binary"
                       else regression_metrics(where, means=True))
            self.metrics.update({(key, c): e for c, e in columns.items()})
            self._columns = list(columns)

    def table(self, values: Mapping[Hashable, float]) -> dict[str, dict[str, float | None]]:
        """The table from the values of :attr:`metrics` (an :class:`ExactEvaluator`'s)."""
        total = values[("overall", "count")]
        out: dict[str, dict[str, float | None]] = {}
        # every row has the same columns: one lookup per cell, linear in the groups
        for key, _ in self.rows:
            count = values[(key, "count")]
            row: dict[str, float | None] = {"count": count, "share": count / total}
            for column in self._columns:
                v = values[(key, column)]
                row[column] = v if math.isfinite(v) else None
            out[key] = row
        return out

    def evaluate(self, split: Batch | Iterable[Batch]) -> dict[str, dict[str, float | None]]:
        """The table on ``split`` (one batch or its chunks)."""
        return self.table(_evaluator(self.attribute, tuple(self.names), self.label_kind,
                                     tuple(self.unlabeled)).evaluate(split))


@functools.lru_cache(maxsize=64)
def cached_group_table(attribute: str, names: tuple[str, ...], label_kind: str,
                       unlabeled: tuple[str, ...] = ()) -> GroupTable:
    """The :class:`GroupTable` of this layout, built once (ten expressions a group: with
    ~1 000 groups, building one takes about a second, and a run logs its table often).

    Example:
        >>> t = cached_group_table("g", ("a", "b"), "binary")
        >>> t is cached_group_table("g", ("a", "b"), "binary")
        True
    """
    return GroupTable(attribute, names, label_kind, unlabeled)


@functools.lru_cache(maxsize=64)
def _evaluator(attribute: str, names: tuple[str, ...], label_kind: str,
               unlabeled: tuple[str, ...] = ()) -> ExactEvaluator:
    """One evaluator per table layout: its compiled plans are reused by later calls."""
    table = cached_group_table(attribute, names, label_kind, unlabeled)
    return ExactEvaluator(table.metrics, optional=table.metrics)
