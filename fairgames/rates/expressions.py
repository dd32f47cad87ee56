"""Lazy rate expressions: leaves, affine forms, ratio and ψ nodes, and constraints.

Every expression is kept in the explicit form the game compiles (paper 000, Section 2):

``expr = constant + Σ_k c_k · leaf_k  +  Σ_j d_j · node_j``

where the first part is an :class:`AffineForm` over de-duplicated leaves and each ``node_j`` is
a :class:`RatioNode` (``⟨α,R⟩ / ⟨β,R⟩``, problem P3) or a :class:`PsiNode` (a non-linear
``ψ(args)`` that states its curvature and monotonicity, problems P1–P2). F-measure-like
pseudo-convex metrics are ratios, never ψ.

Example:
    >>> from fairgames.rates import true_positive_rate, group
    >>> gap = true_positive_rate(group("sex", "Female")) - true_positive_rate(group("sex", "Male"))
    >>> c = (gap <= 0.05).named("tpr_gap")
    >>> c.sense, len(c.expression.leaves())
    ('<=', 2)
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Union

import torch

from .events import Event
from .losses import Loss
from .psi import Psi
from .subsets import LabelIs, Subset


@dataclass(frozen=True, eq=False)
class Leaf:
    """An expectation over a subset: ``E_w[event | where]`` or ``E_w[loss | where]``."""

    where: Subset
    event: Event | None = None
    loss: Loss | None = None

    def __post_init__(self) -> None:
        if (self.event is None) == (self.loss is None):
            raise ValueError("a leaf is either a rate (event) or a group loss (loss)")

    @functools.cached_property
    def key(self) -> tuple:
        # cached (the leaf is immutable): read for every lookup, K-fold with K constraints
        if self.event is not None:
            return ("rate", self.event.key(), self.where.key())
        assert self.loss is not None
        return ("loss", self.loss.name, self.where.key())

    @property
    def reads_labels(self) -> bool:
        """Whether the leaf reads the labels: an event on the label (``tpr``, ``error``), a
        label condition in its subset (``label=1``) or a group loss (a function of the label).

        Example:
            >>> from fairgames.rates import coverage, positive_label, true_positive_rate
            >>> [lf.reads_labels for e in (coverage(), true_positive_rate(),
            ...                            coverage(positive_label())) for lf in e.leaves()]
            [False, True, True]
        """
        return (self.loss is not None or bool(self.event and self.event.uses_label)
                or any(isinstance(x, LabelIs) for x in self.where.literals()))

    @property
    def depends_on_model(self) -> bool:
        """False for leaves such as ``p = E[y]`` that get no multiplier and no surrogate."""
        return self.loss is not None or bool(self.event and self.event.depends_on_model)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Leaf) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        what = self.event.name if self.event is not None else f"loss:{self.loss}"
        return f"E[{what} | {self.where}]"


@dataclass(frozen=True)
class AffineForm:
    """``constant + Σ coefficient · leaf`` (leaves keyed by structure, zero terms dropped)."""

    terms: tuple[tuple[Leaf, float], ...] = ()
    constant: float = 0.0

    @staticmethod
    def of(terms: Iterable[tuple[Leaf, float]], constant: float = 0.0) -> AffineForm:
        acc: dict[tuple, list] = {}
        for leaf, c in terms:
            if leaf.key in acc:
                acc[leaf.key][1] += c
            else:
                acc[leaf.key] = [leaf, float(c)]
        return AffineForm(tuple((lf, c) for lf, c in acc.values() if c != 0.0), float(constant))

    def __add__(self, other: AffineForm) -> AffineForm:
        return AffineForm.of(self.terms + other.terms, self.constant + other.constant)

    def scale(self, k: float) -> AffineForm:
        return AffineForm.of(((lf, c * k) for lf, c in self.terms), self.constant * k)

    @property
    def leaves(self) -> list[Leaf]:
        return [lf for lf, _ in self.terms]

    @property
    def depends_on_model(self) -> bool:
        return any(lf.depends_on_model for lf in self.leaves)

    def key(self) -> tuple:
        return (tuple(sorted(((lf.key, c) for lf, c in self.terms), key=repr)), self.constant)

    def __str__(self) -> str:
        parts = [f"{c:+g}·{lf}" for lf, c in self.terms]
        if self.constant or not parts:
            parts.append(f"{self.constant:+g}")
        return " ".join(parts)


class Node:
    """A non-linear term of an expression."""

    def key(self) -> tuple:
        raise NotImplementedError

    def leaves(self) -> list[Leaf]:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class RatioNode(Node):
    """``numerator / denominator`` of two affine forms (P3's ⟨α_m,R⟩ / ⟨β_m,R⟩)."""

    numerator: AffineForm
    denominator: AffineForm

    def key(self) -> tuple:
        return ("ratio", self.numerator.key(), self.denominator.key())

    @property
    def in_unit_interval(self) -> bool:
        """True when the ratio lies in [0, 1] by structure: the numerator and the denominator
        minus the numerator are non-negative combinations of rates (which lie in [0, 1]), as
        in precision TP / (TP + FP) and the F-measure 2TP / (2TP + FP + FN)."""
        def non_negative(form: AffineForm) -> bool:
            return form.constant >= 0 and all(lf.event is not None and c >= 0
                                              for lf, c in form.terms)
        return non_negative(self.numerator) and non_negative(
            self.denominator + self.numerator.scale(-1.0))

    def leaves(self) -> list[Leaf]:
        return self.numerator.leaves + self.denominator.leaves

    def __str__(self) -> str:
        return f"[{self.numerator}] / [{self.denominator}]"


@dataclass(frozen=True, eq=False)
class PsiNode(Node):
    """``ψ(args)`` for a :class:`~fairgames.rates.psi.Psi` with declared curvature/monotonicity."""

    psi: Psi
    args: tuple[Expression, ...]

    def __post_init__(self) -> None:
        if len(self.args) != self.psi.arity:
            raise ValueError(
                f"{self.psi.name} takes {self.psi.arity} arguments, got {len(self.args)}")

    def key(self) -> tuple:
        return ("psi", self.psi.name, tuple(a.key() for a in self.args))

    def leaves(self) -> list[Leaf]:
        return [lf for a in self.args for lf in a.leaves()]

    def __str__(self) -> str:
        return f"{self.psi.name}(" + ", ".join(str(a) for a in self.args) + ")"


Number = int | float
ExpressionLike = Union["Expression", Number]  # noqa: UP007 (forward reference)


class Expression:
    """``affine + Σ coefficient · node``. Arithmetic builds new expressions lazily.

    ``+``, ``-``, scalar ``*`` and ``/`` keep the explicit form; dividing two affine
    expressions makes a ratio node; ``<=``, ``>=`` and ``==`` make :class:`Constraint` objects.
    """

    __slots__ = ("affine", "nodes")

    def __init__(self, affine: AffineForm | None = None,
                 nodes: Iterable[tuple[float, Node]] = ()) -> None:
        self.affine = affine if affine is not None else AffineForm()
        merged: dict[tuple, list] = {}
        for c, n in nodes:
            if n.key() in merged:
                merged[n.key()][0] += c
            else:
                merged[n.key()] = [float(c), n]
        self.nodes: tuple[tuple[float, Node], ...] = tuple(
            (c, n) for c, n in merged.values() if c != 0.0)

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def leaf(leaf: Leaf) -> Expression:
        return Expression(AffineForm(((leaf, 1.0),)))

    @staticmethod
    def constant(value: float) -> Expression:
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"constants must be finite, got {value!r}")
        return Expression(AffineForm((), v))

    @staticmethod
    def node(node: Node, coefficient: float = 1.0) -> Expression:
        return Expression(None, ((coefficient, node),))

    @property
    def is_affine(self) -> bool:
        return not self.nodes

    @property
    def is_constant(self) -> bool:
        return self.is_affine and not self.affine.terms

    def leaves(self) -> list[Leaf]:
        """Distinct leaves in first-seen order."""
        seen: dict[tuple, Leaf] = {}
        for lf in self.affine.leaves + [lf for _, n in self.nodes for lf in n.leaves()]:
            seen.setdefault(lf.key, lf)
        return list(seen.values())

    @property
    def depends_on_model(self) -> bool:
        return any(lf.depends_on_model for lf in self.leaves())

    def key(self) -> tuple:
        return (self.affine.key(), tuple(sorted(((c, n.key()) for c, n in self.nodes), key=repr)))

    # -- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: ExpressionLike) -> Expression:
        o = as_expression(other)
        return Expression(self.affine + o.affine, self.nodes + o.nodes)

    __radd__ = __add__

    def __neg__(self) -> Expression:
        return self * -1.0

    def __sub__(self, other: ExpressionLike) -> Expression:
        return self + (-as_expression(other))

    def __rsub__(self, other: ExpressionLike) -> Expression:
        return as_expression(other) - self

    def __mul__(self, k: object) -> Expression:
        if isinstance(k, Expression):
            if k.is_constant:
                k = k.affine.constant
            elif self.is_constant:
                return k * self.affine.constant
            else:
                raise TypeError("the product of two model-dependent expressions is not a rate "
                                "expression; use a ψ node (fairgames.rates.psi) instead")
        if not isinstance(k, numbers.Real) or isinstance(k, bool):
            return NotImplemented
        kf = float(k)
        return Expression(self.affine.scale(kf), ((c * kf, n) for c, n in self.nodes))

    __rmul__ = __mul__

    def __truediv__(self, other: ExpressionLike) -> Expression:
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            if other == 0:
                raise ZeroDivisionError("division of an expression by zero")
            return self * (1.0 / float(other))
        o = as_expression(other)
        if o.is_constant:
            return self / o.affine.constant
        if not (self.is_affine and o.is_affine):
            raise TypeError("only affine expressions can be divided (a ratio of rates); got "
                            f"({self}) / ({o})")
        return Expression.node(RatioNode(self.affine, o.affine))

    def __rtruediv__(self, other: ExpressionLike) -> Expression:
        return as_expression(other) / self

    # -- constraints --------------------------------------------------------------------
    def __le__(self, other: ExpressionLike) -> Constraint:
        return Constraint(self - as_expression(other), "<=", f"{self} <= {other}")

    def __ge__(self, other: ExpressionLike) -> Constraint:
        return Constraint(as_expression(other) - self, "<=", f"{self} >= {other}")

    def __eq__(self, other: object) -> Constraint:  # type: ignore[override]
        return Constraint(self - as_expression(other), "==", f"{self} == {other}")  # type: ignore[arg-type]

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; evaluate it on a batch first")

    # -- evaluation ---------------------------------------------------------------------
    def evaluate(self, values: LeafLookup, which: str = "true") -> torch.Tensor:
        """Value given leaf values.

        ``which="true"`` plugs in the true rates. ``"upper"`` / ``"lower"`` propagate the leaves'
        surrogate bounds through the graph with interval arithmetic, so that the result bounds
        the true value; a ψ not monotone in a model-dependent argument has no such bound and
        raises (the reason SPADE-style plug-in fails on KLD, paper 000 Remark 3).
        """
        if which == "true":
            return _value(self, values.true_value)
        if which not in ("upper", "lower"):
            raise ValueError(f"which must be 'true', 'upper' or 'lower', got {which!r}")
        lo, hi = _interval(self, values)
        return hi if which == "upper" else lo

    def __str__(self) -> str:
        parts = [] if (not self.affine.terms and self.affine.constant == 0 and self.nodes) else [
            str(self.affine)]
        parts += [f"{c:+g}·{n}" for c, n in self.nodes]
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Expression({self})"


def as_expression(x: object) -> Expression:
    if isinstance(x, Expression):
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return Expression.constant(float(x))
    raise TypeError(f"expected an Expression or a number, got {type(x).__name__}")


class LeafLookup:
    """What :meth:`Expression.evaluate` needs: per-leaf true values and surrogate bounds."""

    def true_value(self, leaf: Leaf) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def bounds(self, leaf: Leaf) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        """``(lower, upper)`` surrogate bounds of the leaf."""
        raise NotImplementedError


def _affine_value(form: AffineForm, get: Callable[[Leaf], torch.Tensor]) -> torch.Tensor | float:
    total: torch.Tensor | float = form.constant
    for lf, c in form.terms:
        total = total + c * get(lf)
    return total


def _value(expr: Expression, get: Callable[[Leaf], torch.Tensor]) -> torch.Tensor:
    total = _affine_value(expr.affine, get)
    for c, node in expr.nodes:
        if isinstance(node, RatioNode):
            v = _affine_value(node.numerator, get) / _affine_value(node.denominator, get)
        else:
            assert isinstance(node, PsiNode)
            v = node.psi(*[_value(a, get) for a in node.args])
        total = total + c * v
    return torch.as_tensor(total) if not isinstance(total, torch.Tensor) else total


def _interval(expr: Expression, values: LeafLookup) -> tuple[torch.Tensor, torch.Tensor]:
    lo, hi = _affine_interval(expr.affine, values)
    for c, node in expr.nodes:
        nlo, nhi = _node_interval(node, values)
        lo, hi = (lo + c * nlo, hi + c * nhi) if c > 0 else (lo + c * nhi, hi + c * nlo)
    return torch.as_tensor(lo), torch.as_tensor(hi)


def _affine_interval(form: AffineForm, values: LeafLookup):
    lo: torch.Tensor | float = form.constant
    hi: torch.Tensor | float = form.constant
    for lf, c in form.terms:
        l, u = values.bounds(lf)
        lo, hi = (lo + c * l, hi + c * u) if c > 0 else (lo + c * u, hi + c * l)
    return lo, hi


# Denominator bounds are clamped here so that a ratio bound stays finite when a surrogate's
# lower bound of a denominator crosses zero.
_RATIO_DENOMINATOR_FLOOR = 1e-6


def _node_interval(node: Node, values: LeafLookup):
    if isinstance(node, RatioNode):
        a_lo, a_hi = _affine_interval(node.numerator, values)
        b_lo, b_hi = _affine_interval(node.denominator, values)
        b_lo = torch.clamp(torch.as_tensor(b_lo), min=_RATIO_DENOMINATOR_FLOOR)
        b_hi = torch.clamp(torch.as_tensor(b_hi), min=_RATIO_DENOMINATOR_FLOOR)
        a_lo, a_hi = torch.as_tensor(a_lo), torch.as_tensor(a_hi)
        hi = torch.where(a_hi >= 0, a_hi / b_lo, a_hi / b_hi)
        lo = torch.where(a_lo >= 0, a_lo / b_hi, a_lo / b_lo)
        if node.in_unit_interval:
            # The true ratio lies in [0, 1], so intersecting keeps a bound, and a surrogate
            # denominator near zero no longer gives a bound of order 1 / floor.
            lo, hi = lo.clamp(0.0, 1.0), hi.clamp(0.0, 1.0)
        return lo, hi
    assert isinstance(node, PsiNode)
    lows, highs = [], []
    for i, arg in enumerate(node.args):
        alo, ahi = _interval(arg, values)
        # The true argument lies in ψ's domain, so intersecting its surrogate interval with the
        # domain keeps it a bound; outside the domain ψ need not be monotone (a hinge lower
        # bound of a rate can be negative, and the geometric mean of two negative numbers is
        # positive), so without this the "bound" can cross the true value.
        d_lo, d_hi = node.psi.domain[i]
        alo, ahi = alo.clamp(d_lo, d_hi), ahi.clamp(d_lo, d_hi)
        m = node.psi.monotone[i]
        if m > 0:
            lows.append(alo)
            highs.append(ahi)
        elif m < 0:
            lows.append(ahi)
            highs.append(alo)
        elif not arg.depends_on_model:
            v = _value(arg, values.true_value)
            lows.append(v)
            highs.append(v)
        else:
            raise ValueError(
                f"{node.psi.name} is not monotone in its argument {i + 1} ({arg}), so surrogate "
                "bounds of the rates give no bound of ψ; use slack variables (the three-player "
                "game) and true rates for this term")
    return node.psi(*lows), node.psi(*highs)


@dataclass(eq=False)
class Constraint:
    """``expression <= 0`` or ``expression == 0``; made by ``<=``, ``>=`` and ``==``.

    Example:
        >>> from fairgames.rates import error_rate
        >>> c = (error_rate() <= 0.2).named("error_cap")
        >>> c.name, c.sense
        ('error_cap', '<=')
    """

    expression: Expression
    sense: str
    description: str = ""
    name: str | None = None

    def __post_init__(self) -> None:
        if self.sense not in ("<=", "=="):
            raise ValueError(f"constraint sense must be '<=' or '==', got {self.sense!r}")
        if not self.expression.depends_on_model:
            raise ValueError(f"constraint {self.description!r} does not depend on the model: "
                             "it is either always or never satisfied")

    def named(self, name: str) -> Constraint:
        return Constraint(self.expression, self.sense, self.description, name)

    def value(self, values: LeafLookup) -> torch.Tensor:
        """``g`` in ``g <= 0`` (or ``g == 0``): positive values are violations."""
        return self.expression.evaluate(values, "true")

    def violation(self, values: LeafLookup) -> torch.Tensor:
        g = self.value(values)
        return torch.relu(g) if self.sense == "<=" else g.abs()

    def __bool__(self) -> bool:
        raise TypeError("a constraint has no truth value; give it to a Problem, or evaluate "
                        "its .violation(values)")

    def __str__(self) -> str:
        label = f"{self.name}: " if self.name else ""
        return f"{label}{self.description or self.expression} ({self.expression} {self.sense} 0)"


def leaves_of(items: Iterable[Expression | Constraint]) -> list[Leaf]:
    """Distinct leaves of expressions and constraints, in first-seen order."""
    seen: dict[tuple, Leaf] = {}
    for it in items:
        expr = it.expression if isinstance(it, Constraint) else as_expression(it)
        for lf in expr.leaves():
            seen.setdefault(lf.key, lf)
    return list(seen.values())


def mapping_lookup(true: Mapping[tuple, torch.Tensor]) -> LeafLookup:
    """A :class:`LeafLookup` over a dict of true values keyed by leaf key (bounds = true)."""

    class _Lookup(LeafLookup):
        def true_value(self, leaf: Leaf) -> torch.Tensor:
            return true[leaf.key]

        def bounds(self, leaf: Leaf) -> tuple[torch.Tensor, torch.Tensor]:
            v = true[leaf.key]
            return v, v

    return _Lookup()
