"""The :class:`Problem`: an objective and named constraints over rates, checked and given
their defaults, with the Lagrangian terms the game plays compiled on demand
(:mod:`~fairgames.game.problem.compiler`) and the evaluators of its rates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import torch

from fairgames.rates import (
    Batch,
    Constraint,
    Expression,
    Leaf,
    RateEvaluator,
    Surrogate,
    as_expression,
    leaves_of,
)

from ..lagrangian import LagrangianTerms
from .compiler import RATIO_MODES, compile_terms
from .defaults import AUTO_SURROGATE, default_surrogate
from .objective import ObjectiveBound, objective_surrogate_for

LossFn = Callable[[torch.Tensor, Batch], torch.Tensor]


class Problem:
    """An objective and named constraints over rates, compiled for the game.

    Args:
        objective: an :class:`~fairgames.rates.Expression` to minimise, or ``None`` when
            ``loss`` alone is the objective.
        constraints: a list of :class:`~fairgames.rates.Constraint` (named ``c0, c1, ...``
            unless ``.named``), or a mapping name → constraint.
        loss: a differentiable per-batch loss ``loss(scores, batch) -> scalar`` added to the
            objective (e.g. binary cross-entropy); it is the θ-player's alone.
        surrogate: the θ-player's stand-in for the 0/1 indicator: a
            :class:`~fairgames.rates.Surrogate`, a kind (``"hinge"``, ``"logistic"``,
            ``"sigmoid"``, ``"ramp"``) or ``"auto"`` (default; :func:`default_surrogate`).
        objective_surrogate: ``None`` (default: the objective's rates take ``surrogate`` like
            every other rate) or a surrogate (kind) that θ sees for the objective alone,
            while the constraints keep ``surrogate`` — e.g. ``"logistic"`` on ``error_rate()``
            makes θ minimise the cross-entropy (in bits) while the multipliers, the reports
            and the solution selection keep the 0/1 error. The objective must be affine in
            the rates (no ratio, no ψ).
        ratio_floor: the smallest value assumed for a ratio's denominator when bounding its
            slack's box (paper 000's ``b̲``).
        evaluator_options: keyword arguments of :class:`~fairgames.rates.RateEvaluator`
            (``denominator``, ``decay``, ``floor``).
        group_values: attribute name → its value names in code order, declared once here so
            that batches need not repeat them (:meth:`ConstrainedOptimizer.batch
            <fairgames.game.ConstrainedOptimizer.batch>` and ``step_batch`` fill them in).

    Example:
        >>> from fairgames.rates import error_rate, positive_prediction_rate, group
        >>> p = Problem(error_rate(),
        ...             {"dp": positive_prediction_rate(group("g", "a"))
        ...                    == positive_prediction_rate(group("g", "b"))})
        >>> p.terms.row_names
        ['dp[<=]', 'dp[>=]']
    """

    def __init__(self, objective: Expression | float | None = None,
                 constraints: Sequence[Constraint] | Mapping[str, Constraint] = (), *,
                 loss: LossFn | None = None, surrogate: Surrogate | str = AUTO_SURROGATE,
                 objective_surrogate: Surrogate | str | None = None, ratio_floor: float = 0.01,
                 evaluator_options: Mapping[str, object] | None = None,
                 group_values: Mapping[str, Sequence[str]] | None = None) -> None:
        if objective is None and loss is None:
            raise ValueError("a problem needs an objective expression, a loss, or both")
        if loss is not None and not callable(loss):
            raise TypeError(f"loss must be callable (scores, batch) -> scalar, got "
                            f"{type(loss).__name__}")
        if isinstance(objective, Constraint):
            raise TypeError("the objective is a constraint (it was compared with <=, >= or ==);"
                            " pass constraints in the second argument")
        self.objective = as_expression(objective) if objective is not None else None
        if self.objective is not None and not self.objective.depends_on_model and loss is None:
            raise ValueError(f"the objective {self.objective} does not depend on the model and "
                             "there is no loss: nothing to minimise")
        self.loss = loss
        self.constraints = _named_constraints(constraints)
        if not (0.0 < ratio_floor < 1.0):
            raise ValueError(f"ratio_floor must lie in (0, 1), got {ratio_floor}")
        self.ratio_floor = float(ratio_floor)
        self.evaluator_options = dict(evaluator_options or {})
        self.group_values = _group_values(group_values)
        items: list[Expression | Constraint] = list(self.constraints.values())
        if self.objective is not None:
            items.insert(0, self.objective)
        if surrogate == AUTO_SURROGATE:
            surrogate = default_surrogate(self.objective, self.constraints.values())
        self.surrogate = surrogate if isinstance(surrogate, Surrogate) else Surrogate(surrogate)
        self.objective_surrogate = objective_surrogate_for(objective_surrogate, self.objective)
        self.leaves: list[Leaf] = leaves_of(items)
        if not self.leaves:
            raise ValueError("the problem has no rate: give a rate objective or a constraint "
                             "(for a loss alone, use a plain torch optimizer)")
        self._compiled: dict[str, LagrangianTerms] = {}
        self.terms = self.compile("linearize")

    # ------------------------------------------------------------------ public API
    @property
    def constraint_names(self) -> list[str]:
        return list(self.constraints)

    @property
    def num_multipliers(self) -> int:
        return self.terms.num_rows

    def make_evaluator(self) -> RateEvaluator:
        """A fresh :class:`RateEvaluator` over this problem's leaves (in ``self.leaves`` order)."""
        ev = RateEvaluator(self.leaves, self.surrogate, **self.evaluator_options)  # type: ignore[arg-type]
        assert [lf.key for lf in ev.leaves] == [lf.key for lf in self.leaves]
        return ev

    def make_objective_bound(self) -> ObjectiveBound | None:
        """θ's bound of the objective under :attr:`objective_surrogate` (``None`` when the
        objective takes the problem's surrogate with the constraints)."""
        if self.objective_surrogate is None:
            return None
        assert self.objective is not None
        return ObjectiveBound(self.objective, self.objective_surrogate, self.evaluator_options)

    def true_values(self, leaf_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(objective, constraints [C])`` at leaf values ``[K]`` (e.g. a whole split's
        ``evaluate_split(...).true``): the original, un-relaxed expressions; positive
        constraint values are violations (``g`` of ``g <= 0`` or ``g == 0``)."""
        return self.terms.truth(leaf_values)

    def report(self, leaf_values: torch.Tensor) -> dict[str, float]:
        """Objective and constraint values as a plain dict (syncs; for logging/reports)."""
        obj, cons = self.true_values(leaf_values)
        out = {"objective": float(obj)}
        for name, v in zip(self.constraint_names, cons.tolist(), strict=True):
            out[name] = v
        return out

    def __repr__(self) -> str:
        lines = [f"Problem(objective={self.objective}, loss={self.loss is not None})"]
        lines += [f"  {c}" for c in self.constraints.values()]
        return "\n".join(lines)

    # ------------------------------------------------------------------ compilation
    def compile(self, ratios: str = "linearize") -> LagrangianTerms:
        """The Lagrangian terms, with ratio terms ``"linearize"`` (no slack: the θ-player sees
        each ratio's gradient at the true rates and its row gains the true ratio),
        ``"num_den"`` (paper 000 Algorithm 3: numerator and denominator slacks ``a, b`` in
        their box, ``c·a/b`` in the row and two slack rows) or ``"gradient"`` (one ratio slack
        ``z`` and a bilinear row, Cotter et al. 2019). Cached."""
        if ratios not in RATIO_MODES:
            raise ValueError(f"ratios must be one of {RATIO_MODES}, got {ratios!r}")
        if ratios not in self._compiled:
            self._compiled[ratios] = compile_terms(
                self.objective, self.constraints, self.leaves, ratios=ratios,
                ratio_floor=self.ratio_floor,
                objective_in_costs=self.objective_surrogate is None)
        return self._compiled[ratios]


def _named_constraints(constraints: Sequence[Constraint] | Mapping[str, Constraint] | Iterable
                       ) -> dict[str, Constraint]:
    if isinstance(constraints, Constraint):
        constraints = [constraints]
    if isinstance(constraints, Mapping):
        items = list(constraints.items())
    else:
        items = []
        for i, c in enumerate(constraints):
            if not isinstance(c, Constraint):
                raise TypeError(
                    f"constraint {i} is a {type(c).__name__}, not a Constraint; build it with "
                    "<=, >= or == on rate expressions (e.g. error_rate() <= 0.2)")
            items.append((c.name if c.name else f"c{i}", c))
    out: dict[str, Constraint] = {}
    for name, c in items:
        if not isinstance(c, Constraint):
            raise TypeError(f"constraint {name!r} is a {type(c).__name__}, not a Constraint")
        if not isinstance(name, str) or not name:
            raise ValueError(f"constraint names must be non-empty strings, got {name!r}")
        if name in out:
            raise ValueError(f"two constraints are named {name!r}")
        out[name] = c if c.name == name else c.named(name)
    return out


def _group_values(values: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """``Problem(group_values=)`` checked: attribute → a non-empty list of value names."""
    out: dict[str, list[str]] = {}
    for name, names in dict(values or {}).items():
        if isinstance(names, str) or not isinstance(names, Sequence) or not names:
            raise ValueError(f"group_values[{name!r}] must be a non-empty list of the "
                             f"attribute's value names in code order, got {names!r}")
        out[str(name)] = [str(v) for v in names]
    return out
