"""The problem's statements against the training split, and the subsets on which they are
undefined.

A rate is undefined on a split where its subset (a group, a group's positives, ...) has no row;
:func:`require_training_subsets` refuses such a problem before the first step, naming the
empty subsets (:func:`empty_subsets`) of the statements a spec compiles to on the training
groups (:func:`statements`).

Example:
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.problems import load_problem
    >>> train = make_synthetic(n=300, seed=0).train
    >>> require_training_subsets(load_problem("equal_opportunity"), train, "group")  # all there
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.data.crossed import constrained_counts, constrained_values
from fairgames.game import Problem
from fairgames.problems import ProblemSpec
from fairgames.problems.spec import UNCONSTRAINED_PREFIX
from fairgames.rates import Constraint, EmptySubsetError, ExactEvaluator, Expression, leaves_of

from .data import chunks, make_batch


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


def data_sources(ds: TabularDataset) -> dict[str, Any]:
    """What a problem's ``source=`` is checked against (paper 001): the split's source names
    (``[]`` for one data set, so that ``source=`` is refused there) and its unlabeled ones.

    Example:
        >>> from fairgames.data import combine_sources, make_synthetic
        >>> data_sources(make_synthetic(n=50).train)
        {'sources': [], 'unlabeled': ()}
        >>> data_sources(combine_sources({"d1": make_synthetic(n=50).train,
        ...                               "d3": make_synthetic(n=50).train}, unlabeled=["d3"]))
        {'sources': ['d1', 'd3'], 'unlabeled': ('d3',)}
    """
    return {"sources": list(ds.source_names or []), "unlabeled": tuple(ds.unlabeled)}


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
        stand_ins.update(dict.fromkeys(problem.baseline_metrics(train.source_names), 0.0))
        built = problem.build(protected, constrained_values(train.group_names), stand_ins,
                              constrained_counts(train, protected), label_kind=train.label_kind,
                              **data_sources(train))
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
        # several data sets (paper 001): a source with no training row is named by its count
        sources = (f" Its sources' row counts: {train.source_counts()} (a source with 0 rows "
                   "has none in this split: give it training rows in the data config, or drop "
                   "its statements)." if train.sources is not None else "")
        raise EmptySubsetError(
            f"the training split ({len(train)} rows) has no row in a subset the problem "
            f"reads, so its rate is undefined there — {listed}. The split's {protected!r} "
            f"counts: {train.group_counts(protected)}.{sources} Use another data.protected, "
            "problem or data split.")
