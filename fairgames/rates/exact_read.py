"""Many metrics' values read from one split's leaf values at once, bit for bit as
:meth:`Expression.evaluate` reads each.

A report with ~1 000 groups reads ~10⁴ metrics (nine columns a group) from the same leaf
values; one at a time that is ~10⁵ scalar tensor ops. Here the metrics that are affine forms
and ratios of affine forms are read together, one vector op per *term position*: every
metric's value is still ``constant + c₁·v₁ + c₂·v₂ + … + Σ cₙ·(numeratorₙ / denominatorₙ)``
summed in its own order, with the same float64 operations, so each value is the one
:meth:`Expression.evaluate` gives (NaN and ±inf included). A ψ metric (KLD, …) and a constant
are read one at a time as before.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, RateEvaluator, error_rate, precision
    >>> exprs = [error_rate(), precision()]
    >>> ev = RateEvaluator(exprs)
    >>> values = ev.evaluate_split([Batch(scores=torch.tensor([1.0, -1.0, 2.0]),
    ...                                   labels=torch.tensor([1.0, 1.0, 0.0]))])
    >>> VectorRead(exprs, values.index)(values).tolist() == [e.evaluate(values).item()
    ...                                                      for e in exprs]
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .evaluator import LeafValues
from .expressions import AffineForm, Expression, RatioNode


class _Affine:
    """Affine forms ``[M]`` summed term position by term position: a form's ``j``-th term
    is added to its running total (its constant first) in step ``j``, as one vector op over
    the forms that have one."""

    def __init__(self, forms: Sequence[AffineForm], index: dict[tuple, int]) -> None:
        self.constant = torch.tensor([f.constant for f in forms], dtype=torch.float64)
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for j in range(max((len(f.terms) for f in forms), default=0)):
            rows = [i for i, f in enumerate(forms) if len(f.terms) > j]
            self.steps.append((torch.tensor(rows),
                               torch.tensor([index[forms[i].terms[j][0].key] for i in rows]),
                               torch.tensor([forms[i].terms[j][1] for i in rows],
                                            dtype=torch.float64)))

    def __call__(self, true: torch.Tensor) -> torch.Tensor:
        total = self.constant.to(true.device)
        for rows, pos, coef in self.steps:
            rows = rows.to(true.device)
            total = total.index_copy(0, rows, total[rows] + coef.to(true.device)
                                     * true[pos.to(true.device)])
        return total


def vectorizable(expr: Expression) -> bool:
    """An affine form or ratios of affine forms whose every division is of tensors (a ratio
    of two constants, or a constant expression, is a host float: read one at a time)."""
    if not expr.affine.terms and not expr.nodes:
        return False
    return all(isinstance(node, RatioNode) and (node.numerator.terms or node.denominator.terms)
               for _, node in expr.nodes)


class VectorRead:
    """The values ``[M]`` (float64) of :func:`vectorizable` expressions from leaf values
    whose leaves sit at ``index`` (the evaluator's ``LeafValues.index``)."""

    def __init__(self, exprs: Sequence[Expression], index: dict[tuple, int]) -> None:
        bad = [str(e) for e in exprs if not vectorizable(e)]
        if bad:
            raise ValueError(f"VectorRead reads affine forms and ratios only, not {bad[:3]}")
        self.affine = _Affine([e.affine for e in exprs], index)
        self.nodes: list[tuple[torch.Tensor, torch.Tensor, _Affine, _Affine]] = []
        for n in range(max((len(e.nodes) for e in exprs), default=0)):
            rows = [i for i, e in enumerate(exprs) if len(e.nodes) > n]
            ratios = [exprs[i].nodes[n] for i in rows]
            self.nodes.append((torch.tensor(rows),
                               torch.tensor([c for c, _ in ratios], dtype=torch.float64),
                               _Affine([r.numerator for _, r in ratios], index),
                               _Affine([r.denominator for _, r in ratios], index)))

    def __call__(self, values: LeafValues) -> torch.Tensor:
        true = values.true
        if true.dtype != torch.float64:
            raise ValueError(f"VectorRead reads float64 leaf values, got {true.dtype}")
        total = self.affine(true)
        for rows, coef, numerator, denominator in self.nodes:
            rows = rows.to(true.device)
            ratio = numerator(true) / denominator(true)
            total = total.index_copy(0, rows, total[rows] + coef.to(true.device) * ratio)
        return total
