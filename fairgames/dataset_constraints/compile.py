"""Rate expressions (``fairgames.rates``) compiled into majorization–minimization's rows.

A leaf of an affine expression is E_w[a(y, ŷ₀) + b(y, ŷ₀)·ŷ | S]: with the ramp's ŷ = σ(z) it is
Σ_{i∈S} (w_i / W_S)(a_i + b_i σ(z_i)). Summing an expression's terms gives each example a
coefficient p_i on σ(z_i) and a constant; a negative p_i is rewritten through σ = 1 − σ(−z)
(p σ(z) = p + |p| σ(−z)), so every row is the positive combination Problem 1 needs
(:class:`~.mm.RateRow`). What MM cannot play is refused, naming why: ratios of rates
(problem P3 of paper 000: not a combination of rates), ψ nodes (non-linear), group losses
(not rates of a classifier), equality constraints and indicators at a threshold other than 0.

Example:
    >>> import numpy as np
    >>> from fairgames.rates import group, positive_prediction_rate as ppr
    >>> data = RowData(labels=np.array([1, 0, 1, 0]),
    ...                groups={"g": np.array([0, 0, 1, 1])}, group_names={"g": ["a", "b"]})
    >>> row = constraint_row(ppr(group("g", "a")) >= 0.8 * ppr(group("g", "b")), data)
    >>> row.pos.tolist(), row.neg.tolist(), row.bound
    ([0.0, 0.0, 0.4, 0.4], [0.5, 0.5, 0.0, 0.0], 1.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fairgames.rates.expressions import Constraint, Expression
from fairgames.rates.subsets import (
    And,
    BaselineIs,
    Everything,
    GroupIs,
    LabelIs,
    Not,
    Or,
    SourceIs,
    Subset,
)

from .mm import MMResult, RampProblem, RateRow, minimize

__all__ = ["NotPlayableError", "RowData", "constraint_row", "minimize_rates", "objective_row"]


class NotPlayableError(ValueError):
    """A rate expression majorization–minimization cannot play (it is not a combination of
    rates of the linear classifier's predictions)."""


@dataclass
class RowData:
    """The per-example factors a subset or an event reads: labels (0/1), group codes per
    attribute (with their names), source ids (with their names), the baseline's predictions
    and the example weights (default 1)."""

    labels: np.ndarray
    groups: Mapping[str, np.ndarray] = field(default_factory=dict)
    group_names: Mapping[str, Sequence[str]] = field(default_factory=dict)
    sources: np.ndarray | None = None
    source_names: Sequence[str] = ()
    baseline: np.ndarray | None = None
    weights: np.ndarray | None = None

    def mask(self, s: Subset) -> np.ndarray:
        """The rows of subset ``s``."""
        if isinstance(s, Everything):
            return np.ones(len(self.labels), bool)
        if isinstance(s, And | Or):
            left, right = self.mask(s.left), self.mask(s.right)
            return left & right if isinstance(s, And) else left | right
        if isinstance(s, Not):
            return ~self.mask(s.inner)
        if isinstance(s, LabelIs):
            return np.asarray(self.labels) == int(s.value)
        if isinstance(s, GroupIs):
            names = self.group_names.get(s.attribute, ())
            return np.asarray(self.groups[s.attribute]) == _code(s.value, names)
        if isinstance(s, SourceIs) and self.sources is not None:
            return np.asarray(self.sources) == _code(s.value, self.source_names)
        if isinstance(s, BaselineIs) and self.baseline is not None:
            return np.asarray(self.baseline) == int(s.value)
        raise NotPlayableError(f"subset {s} reads a factor the data does not hold (a "
                               "baseline's predictions or source ids): give them in RowData")


def _code(value: str | int, names: Sequence[str]) -> int:
    return names.index(value) if isinstance(value, str) else int(value)


def _coefficients(expr: Expression, data: RowData, what: str) -> tuple[np.ndarray, float]:
    """p (on σ(z_i)) and the constant of an affine expression; refuses the rest."""
    if expr.nodes:
        kind = type(expr.nodes[0][1]).__name__
        raise NotPlayableError(
            f"{what} holds a {kind} (a ratio of rates or a ψ of rates): MM plays combinations "
            "of rates only — write a ratio constraint as a linear one (ppr(A) >= 0.8 * ppr(B)),"
            " or train with the default game (algorithm=proxy_lagrangian)")
    n = len(data.labels)
    weights = np.ones(n) if data.weights is None else np.asarray(data.weights, float)
    y = np.asarray(data.labels).astype(int)
    b0 = np.zeros(n, int) if data.baseline is None else np.asarray(data.baseline).astype(int)
    p, constant = np.zeros(n), float(expr.affine.constant)
    for leaf, c in expr.affine.terms:
        if leaf.event is None:
            raise NotPlayableError(f"{what} holds a group loss: MM plays rates of a classifier "
                                   "only — train it with the default game")
        ind = leaf.event.indicator
        if leaf.event.depends_on_model and (ind.threshold != 0.0 or not ind.strict):
            raise NotPlayableError(f"{what} reads predictions at {ind}: the ramp predicts "
                                   "through s > 0 only")
        inside = data.mask(leaf.where)
        if not inside.any():
            raise NotPlayableError(f"{what}: the subset {leaf.where} holds no row")
        share = c * weights * inside / weights[inside].sum()
        a, b = np.array(leaf.event.a), np.array(leaf.event.b)
        constant += float(share @ a[y, b0])
        p += share * b[y, b0]
    return p, constant


def _row(p: np.ndarray, constant: float, bound: float, name: str) -> RateRow:
    # p σ(z) = p + |p| σ(−z) where p < 0: every weight ≥ 0 (paper 001, under Problem 1)
    neg = np.maximum(-p, 0.0)
    return RateRow(np.maximum(p, 0.0), neg, bound - constant - float(np.minimum(p, 0.0).sum()),
                   name=name)


def objective_row(expr: Expression, data: RowData) -> tuple[RateRow, float]:
    """The objective as a row and the constant to add back to its value.

    Example:
        >>> from fairgames.rates import error_rate
        >>> row, c = objective_row(error_rate(), RowData(labels=np.array([1, 0])))
        >>> row.pos.tolist(), row.neg.tolist(), c
        ([0.0, 0.5], [0.5, 0.0], 0.0)
    """
    p, constant = _coefficients(expr, data, "the objective")
    row = _row(p, constant, 0.0, "objective")
    return row, 0.0 - row.bound      # 0.0 − : no "-0.0"


def constraint_row(constraint: Constraint, data: RowData) -> RateRow:
    """``expression <= 0`` as a row R(w) ≤ γ; an equality is refused (MM's bounds are
    upper bounds: split it into two inequalities with a tolerance)."""
    name = constraint.name or constraint.description or str(constraint.expression)
    if constraint.sense != "<=":
        raise NotPlayableError(f"constraint {name} is an equality: MM bounds rates from above "
                               "only — write it as two inequalities with a tolerance")
    p, constant = _coefficients(constraint.expression, data, f"constraint {name}")
    return _row(p, constant, 0.0, name)


def minimize_rates(objective: Expression, constraints: Sequence[Constraint],
                   features: np.ndarray, data: RowData, lam: float, **options: object) -> MMResult:
    """Algorithm 1 (:func:`.mm.minimize`) on a problem written with ``fairgames.rates``: the
    objective and constraints compiled into rows; ``options`` go to :func:`.mm.minimize`
    (``max_rounds``, ``tol``, ``gap``, ``start``). The rounds' objectives are the
    expression's values (its constant added back) plus (λ/2)‖w‖².

    Example:
        >>> from fairgames.rates import error_rate, group, positive_prediction_rate as ppr
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(60, 2)); g = (x[:, 1] > 0).astype(int)
        >>> data = RowData((x[:, 0] > 0).astype(int), {"g": g})
        >>> fair = ppr(group("g", 0)) >= 0.8 * ppr(group("g", 1))
        >>> result = minimize_rates(error_rate(), [fair], x, data, lam=0.05)
        >>> result.start, all(max(r.constraints) <= 1e-9 for r in result.rounds)
        ('zero', True)
    """
    row, constant = objective_row(objective, data)
    rows = tuple(constraint_row(c, data) for c in constraints)
    result = minimize(RampProblem(np.asarray(features, float), row, rows, lam),
                      **options)  # type: ignore[arg-type]
    result.rounds = [dataclasses.replace(r, objective=r.objective + constant)
                     for r in result.rounds]
    return result
