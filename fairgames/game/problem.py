"""A constrained rate problem and its compilation into the terms of a Lagrangian.

``Problem(objective, constraints)`` takes the expressions of :mod:`fairgames.rates` and
rewrites them in the form the game plays (paper 000, Sections 3–4; notes in
``shared/notes/paper-000-three-players.md``). Every expression is
``affine(R) + Σ c·node`` over the leaf rates ``R``; the compiler turns it into

* **affine rows** — a constraint ``g = ⟨a, R⟩ + d ≤ 0`` is one multiplier row; ``g == 0`` is
  the pair ``g ≤ 0``, ``−g ≤ 0`` (so that every multiplier is non-negative). Leaves that do not
  depend on the model (``p = E[y]``) stay inside ``⟨a, R⟩`` with their true value: they get no
  multiplier and no surrogate.
* **ψ terms** (P1, P2) — ``c·ψ(args)`` becomes ``c·ψ(ξ)`` with one slack ``ξ_i`` per
  model-dependent argument and one slack row per direction: ``arg_i − ξ_i ≤ 0`` when ``c·ψ``
  increases in that argument, ``ξ_i − arg_i ≤ 0`` when it decreases, both when it is monotone
  in neither (KLD's ``p̂``). Model-independent arguments (KLD's ``p``) are *fixed*: their value
  is read from the true leaf values of the batch. ``c·ψ`` must be convex.
* **ratio terms** (P3) — ``c·⟨α,R⟩/⟨β,R⟩`` (numerators must be non-negative, denominators
  are floored at ``ratio_floor``) is compiled in one of three ways (``compile(ratios=...)``,
  the preset's ``ratio_slacks``; see :mod:`fairgames.game.lagrangian`):

  - ``"linearize"`` — no slack: the row gains the true ratio, θ sees its gradient;
  - ``"num_den"`` — paper 000 Algorithm 3: ``c·a/b`` with a numerator slack
    ``a ∈ [max(0, num̲), num̄]`` and a denominator slack ``b ∈ [max(ratio_floor, den̲), den̄]``,
    and two slack rows, ``⟨α,R⟩ − a ≤ 0`` and ``b − ⟨β,R⟩ ≤ 0`` when ``c > 0``, the reverse
    when ``c < 0`` (so ``c·a/b ≥ c·num/den``: a restriction of the original);
  - ``"gradient"`` — ``c·z`` with one ratio slack ``z`` and the row
    ``σ·(⟨α,R⟩ − z·⟨β,R⟩) ≤ 0``, ``σ = sign c`` (the ratio slack of Cotter et al., JMLR 2019,
    TFCO).

The result is :class:`~fairgames.game.lagrangian.LagrangianTerms`: dense tensors ``A [M, K]``,
``d [M]``, ``B [M, S]``, the bilinear ratio entries and a short list of ψ terms, so that a step
is a few mat-vecs on the device.

Example:
    >>> from fairgames.rates import error_rate, true_positive_rate, group
    >>> gap = true_positive_rate(group("g", "a")) - true_positive_rate(group("g", "b"))
    >>> p = Problem(error_rate(), [(gap <= 0.05).named("tpr_gap"), gap >= -0.05])
    >>> p.constraint_names, p.terms.row_names
    (['tpr_gap', 'c1'], ['tpr_gap', 'c1'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from fairgames.rates import (
    AffineForm,
    Batch,
    Constraint,
    Expression,
    Leaf,
    PsiNode,
    RateEvaluator,
    RatioNode,
    Surrogate,
    as_expression,
    leaves_of,
)

from .lagrangian import (
    Bilinear,
    CompiledRows,
    LagrangianTerms,
    LinearRatio,
    PsiTerm,
    RatioTerm,
    TrueEvaluation,
    ratio_psi,
)

RATIO_MODES = ("linearize", "num_den", "gradient")
AUTO_SURROGATE = "auto"

LossFn = Callable[[torch.Tensor, Batch], torch.Tensor]


@dataclass(kw_only=True)
class _Builder(CompiledRows):
    """Accumulates rows, slacks and terms while walking the expressions (host side)."""

    leaf_index: dict[tuple, int]
    ratio_mode: str = "linearize"

    @property
    def k(self) -> int:
        return len(self.leaf_index)

    def vector(self, form: AffineForm, scale: float = 1.0) -> list[float]:
        v = [0.0] * self.k
        for lf, c in form.terms:
            v[self.leaf_index[lf.key]] += scale * c
        return v

    def entries(self, form: AffineForm, scale: float = 1.0) -> dict[int, float]:
        """:meth:`vector`'s non-zero part, ``{leaf index: coefficient}`` (the same sums): a
        constraint row reads a few of the K leaves."""
        v: dict[int, float] = {}
        for lf, c in form.terms:
            i = self.leaf_index[lf.key]
            v[i] = v.get(i, 0.0) + scale * c
        return v

    def add_row(self, a: list[float] | dict[int, float], d: float, b: dict[int, float], name: str,
                kind: str) -> int:
        self.rows_a.append(a)
        self.rows_d.append(d)
        self.rows_b.append(b)
        self.row_names.append(name)
        self.row_kinds.append(kind)
        return len(self.rows_a) - 1

    def add_slack(self, lo: float, hi: float, name: str, kind: str, num: AffineForm,
                  den: AffineForm | None = None) -> int:
        """A slack in ``[lo, hi]`` that starts at ``num(R)`` (or ``num(R)/den(R)``)."""
        if den is None:
            init = (self.vector(num), num.constant, [0.0] * self.k, 1.0)
        else:
            init = (self.vector(num), num.constant, self.vector(den), den.constant)
        self.slack_lo.append(lo)
        self.slack_hi.append(hi)
        self.slack_init.append(init)
        self.slack_names.append(name)
        self.slack_kinds.append(kind)
        return len(self.slack_lo) - 1

    def add_fixed(self, form: AffineForm) -> int:
        self.fixed_map.append(self.vector(form))
        self.fixed_const.append(form.constant)
        return len(self.fixed_map) - 1

    # ------------------------------------------------------------------ node compilation
    def psi(self, node: PsiNode, coef: float, row: int, owner: str) -> None:
        psi = node.psi
        convex = (psi.curvature == "convex" and coef > 0) or (
            psi.curvature == "concave" and coef < 0)
        if not convex:
            raise ValueError(
                f"{owner}: the term {coef:+g}·{node} is not convex ({psi.name} is "
                f"{psi.curvature}); the three-player game needs convex ψ terms (paper 000, P1–P2)"
                " — e.g. minimise 1 − gmean(), or constrain gmean() >= t")
        free: list[int] = []
        slacks: list[int] = []
        fixed: dict[int, int] = {}
        for i, arg in enumerate(node.args):
            if not arg.is_affine:
                raise NotImplementedError(
                    f"{owner}: argument {i + 1} of {psi.name} ({arg}) is not affine in the "
                    "rates; nested non-linear terms are not supported")
            if not arg.affine.depends_on_model:
                fixed[i] = self.add_fixed(arg.affine)
                continue
            lo, hi = (float(v) for v in psi.domain[i])
            name = f"{owner}:{psi.name}#{len(self.psi_terms)}[{i}]"
            s = self.add_slack(lo, hi, name, "psi", arg.affine)
            free.append(i)
            slacks.append(s)
            direction = (1 if coef > 0 else -1) * psi.monotone[i]
            alpha = self.vector(arg.affine)
            const = arg.affine.constant
            if direction >= 0:   # arg ≤ ξ (also one half of the two-sided pair)
                self.add_row(alpha, const, {s: -1.0}, name + " <= slack", "slack")
            if direction <= 0:   # ξ ≤ arg
                self.add_row([-x for x in alpha], -const, {s: 1.0}, name + " >= slack",
                             "slack")
        if not free:
            raise ValueError(f"{owner}: {node} does not depend on the model")
        self.psi_terms.append(PsiTerm(row, coef, psi, tuple(free), tuple(slacks), fixed,
                                      f"{owner}:{psi.name}#{len(self.psi_terms)}"))

    def ratio(self, node: RatioNode, coef: float, row: int, owner: str) -> None:
        """``c·num/den`` → no slack (``"linearize"``), ``c·a/b`` with a numerator and a
        denominator slack (``"num_den"``, paper 000 Algorithm 3), or ``c·z`` with the row
        ``σ(num − z·den) ≤ 0``, ``σ = sign c`` (``"gradient"``, the ratio slack of Cotter et al.
        2019 / TFCO)."""
        num, den = node.numerator, node.denominator
        n_lo, n_hi = _interval(num)
        d_lo, d_hi = _interval(den)
        if n_lo < 0:
            raise ValueError(
                f"{owner}: the numerator of {node} can be negative (down to {n_lo:g}); ratio "
                "terms need a non-negative numerator and a positive denominator")
        if d_hi <= 0:
            raise ValueError(f"{owner}: the denominator of {node} is never positive")
        floor = max(d_lo, self.ratio_floor)
        hi = n_hi / floor
        # num ≤ den term by term (e.g. 2TP ≤ 2TP + FP + FN) bounds the ratio by 1.
        if _dominated(num, den):
            hi = min(hi, 1.0)
        count = len(self.ratio_terms) + len(self.linear_ratios) + sum(
            t.ratio for t in self.psi_terms)
        name = f"{owner}:ratio#{count}"
        if self.ratio_mode == "linearize":
            self.linear_ratios.append(LinearRatio(row, coef, self.vector(num), num.constant,
                                                  self.vector(den), den.constant, name))
            return
        if self.ratio_mode == "num_den":
            self.num_den(num, den, coef, row, name, (max(0.0, n_lo), n_hi), (floor, d_hi))
            return
        z = self.add_slack(0.0, hi, name, "ratio", num, den)
        sigma = 1.0 if coef > 0 else -1.0
        j = self.add_row(self.vector(num, sigma), sigma * num.constant, {},
                         name + (" >= num/den" if coef > 0 else " <= num/den"), "slack")
        self.bilinear.append(Bilinear(j, z, self.vector(den, -sigma), -sigma * den.constant))
        if row < 0:
            self.objective_slack[z] = self.objective_slack.get(z, 0.0) + coef
        else:
            self.rows_b[row][z] = self.rows_b[row].get(z, 0.0) + coef
        self.ratio_terms.append(RatioTerm(row, coef, z, j, name))


    def num_den(self, num: AffineForm, den: AffineForm, coef: float, row: int, name: str,
                a_box: tuple[float, float], b_box: tuple[float, float]) -> None:
        """``c·num/den`` → ``c·a/b`` (paper 000 Algorithm 3): a numerator slack ``a`` and a
        denominator slack ``b`` in their box, with the rows ``num − a ≤ 0``, ``b − den ≤ 0`` for
        ``c > 0`` (then ``a/b ≥ num/den``) and ``a − num ≤ 0``, ``den − b ≤ 0`` for ``c < 0``
        (``a/b ≤ num/den``): either way ``c·a/b ≥ c·num/den``, a restriction of the original.
        The term is a ψ term ``c·ψ(a, b)``, ``ψ = a/b`` (increasing in ``a``, decreasing in
        ``b``; not convex, so its slacks always play OGD, never a best response)."""
        psi = ratio_psi(a_box, b_box)
        sigma = 1.0 if coef > 0 else -1.0
        slacks = []
        for form, box, part, mono in ((num, a_box, "a", 1), (den, b_box, "b", -1)):
            s = self.add_slack(box[0], box[1], f"{name}.{part}", "ratio", form)
            slacks.append(s)
            vec, const = self.vector(form), form.constant
            if sigma * mono > 0:     # form ≤ slack
                self.add_row(vec, const, {s: -1.0},
                             f"{name} {'num' if part == 'a' else 'den'} <= {part}", "slack")
            else:                    # slack ≤ form
                self.add_row([-x for x in vec], -const, {s: 1.0},
                             f"{name} {part} <= {'num' if part == 'a' else 'den'}", "slack")
        self.psi_terms.append(PsiTerm(row, coef, psi, (0, 1), tuple(slacks), {}, name,
                                      ratio=True))


def _dominated(num: AffineForm, den: AffineForm) -> bool:
    """Whether ``num(R) ≤ den(R)`` for all non-negative leaf values, term by term."""
    n = {lf.key: c for lf, c in num.terms}
    d = {lf.key: c for lf, c in den.terms}
    return num.constant <= den.constant and all(
        n.get(key, 0.0) <= d.get(key, 0.0) for key in set(n) | set(d))


def _interval(form: AffineForm) -> tuple[float, float]:
    """Range of an affine form when every rate leaf lies in [0, 1] (losses in [0, inf))."""
    lo = hi = form.constant
    for lf, c in form.terms:
        top = 1.0 if lf.event is not None else math.inf
        lo += c * top if c < 0 else 0.0
        hi += c * top if c > 0 else 0.0
    return lo, hi


def gain_scale(g: Expression) -> float:
    """The λ-player's step scale of the rows of a constraint ``g ≤ 0`` (or ``g == 0``).

    A rate lies in [0, 1], so a rate row's violation is already on the scale the λ-players'
    steps are made for: 1. A group loss has no such range (squared errors of a good regressor
    are ~0.01), so an affine row that reads a loss and has a bound ``d ≠ 0`` plays its
    violation relative to that bound, ``g / |d|`` (``E[ℓ | a] ≤ ζ`` as ``E[ℓ | a]/ζ − 1 ≤ 0``):
    the same feasible set, and a violation of 0.002 over ζ = 0.012 moves λ as a rate 0.17 over
    its bound would. Only the λ-player's gain is scaled; θ, the reports and the verdicts keep
    the constraint as written. Anything else (no loss, a ψ or ratio term, ``d = 0``): 1.

    Example:
        >>> from fairgames.rates import group_loss, error_rate
        >>> gain_scale(group_loss("squared") - 0.02), gain_scale(error_rate() - 0.02)
        (50.0, 1.0)
    """
    reads_loss = any(lf.loss is not None for lf, _ in g.affine.terms)
    if g.nodes or not reads_loss or g.affine.constant == 0.0:
        return 1.0
    return 1.0 / abs(g.affine.constant)


def _two_sided_psi(expr: Expression) -> bool:
    """Whether ``expr`` holds a ψ monotone in neither direction in a model-dependent argument
    (KLD's ``p̂``)."""
    for _, node in expr.nodes:
        if isinstance(node, PsiNode):
            for sign, arg in zip(node.psi.monotone, node.args, strict=True):
                if (sign == 0 and arg.depends_on_model) or _two_sided_psi(arg):
                    return True
    return False


def _has_ratio(expr: Expression) -> bool:
    """Whether ``expr`` holds a ratio of rates (at any depth)."""
    return any(isinstance(node, RatioNode) or any(_has_ratio(a) for a in node.args)
               for _, node in expr.nodes)


def default_surrogate(objective: Expression | None, constraints: Iterable[Constraint]) -> str:
    """The surrogate ``"auto"`` stands for: ``"sigmoid"`` when the problem needs its rates
    tracked from both sides — a ψ monotone in neither direction (KLD: paper 000's Remark 3,
    a one-sided bound leaves ψ's domain), or ratios of rates in the objective *and* in a
    constraint (F-measure parity) — else ``"hinge"``.

    Where a ratio sits on one side only and the other is affine in the rates (an error
    objective, an error bound), the hinge's convexity drives the affine side well and the
    recommended LP mixture settles the rest: measured on the catalog
    (``docs/solved_by_default.md``), the sigmoid lost there.

    Example:
        >>> from fairgames.rates import error_rate, fmeasure, group, kld, true_positive_rate
        >>> default_surrogate(error_rate(), [true_positive_rate() >= 0.5])
        'hinge'
        >>> f = group("sex", "Female")
        >>> default_surrogate(1 - fmeasure(), [fmeasure(f) >= fmeasure() - 0.02])
        'sigmoid'
        >>> default_surrogate(kld(f), [error_rate() <= 0.2])
        'sigmoid'
    """
    obj, exprs = _expressions(objective, constraints)
    if any(_two_sided_psi(e) or reads_thresholds(e) for e in obj + exprs):
        return "sigmoid"
    both = any(_has_ratio(e) for e in obj) and any(_has_ratio(e) for e in exprs)
    return "sigmoid" if both else "hinge"


# The sigmoid's temperature on threshold rates P[f ≥ z] of predictions in [0, 1] (paper
# 003's grid, spacing 1/N = 0.025 at N = 40): the width over which θ sees a prediction cross
# a threshold. Chosen by a sweep τ ∈ {0.02, 0.05, 0.1, 0.25} of sp_regression on Law and Crime:
# every τ met the constraints on train; 0.05 traded Crime's loss against its test violation
# best (Law barely moved).
THRESHOLD_TEMPERATURE = 0.05


def reads_thresholds(expr: Expression) -> bool:
    """Whether ``expr`` reads a threshold rate ``P[f ≥ z]`` (``score_at_least``).

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> reads_thresholds(score_rates(0.5)[0]), reads_thresholds(error_rate())
        (True, False)
    """
    return bool(threshold_points(as_expression(expr).leaves()))


def threshold_points(leaves: Iterable[Leaf]) -> list[float]:
    """The thresholds ``z`` of the threshold-rate leaves ``P[f ≥ z]`` among ``leaves``
    (``score_at_least``: the one event read through a non-strict indicator), sorted.

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> threshold_points([lf for e in score_rates([1.0, 0.5]) + [error_rate()]
        ...                   for lf in e.leaves()])
        [0.5, 1.0]
    """
    return sorted({lf.event.indicator.threshold for lf in leaves
                   if lf.event is not None and not lf.event.indicator.strict})


def default_temperature(objective: Expression | None, constraints: Iterable[Constraint]
                        ) -> float:
    """The surrogate's scale ``algorithm.temperature=null`` stands for: 1 on scores (the
    margin ``s − 0`` of a classifier), :data:`THRESHOLD_TEMPERATURE` where a statement reads
    threshold rates of predictions in [0, 1] (paper 003's statistical parity): a unit scale
    there would blur the whole range of f into one slope.

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> default_temperature(error_rate(), []), default_temperature(
        ...     error_rate(), [score_rates(0.5)[0] <= 0.4])
        (1.0, 0.05)
    """
    obj, exprs = _expressions(objective, constraints)
    return THRESHOLD_TEMPERATURE if any(reads_thresholds(e) for e in obj + exprs) else 1.0


def _expressions(objective: Expression | None, constraints: Iterable[Constraint]
                 ) -> tuple[list[Expression], list[Expression]]:
    """The objective (a list of none or one) and the constraints' expressions."""
    obj = [as_expression(objective)] if objective is not None else []
    return obj, [c.expression for c in constraints]


STEPS_AFFINE = 500       # full-batch steps where every statement is affine in the rates
STEPS_NONLINEAR = 1000   # ... and where one holds a ratio of rates or a ψ


def default_steps(objective: Expression | None, constraints: Iterable[Constraint]) -> int:
    """The step budget ``trainer.steps=null`` stands for: :data:`STEPS_AFFINE` when every
    statement is affine in the rates (equal opportunity, demographic parity, error, churn),
    else :data:`STEPS_NONLINEAR` (ratios of rates, ψ of rates: F-measure parity, predictive
    parity, KLD, G-mean). Measured on the catalog (``docs/solved_by_default.md``): the affine
    games have settled by 500 full-batch steps (1 000 move the objective by at most 0.001),
    the others gain up to 0.16 in their objective from 500 to 1 000.

    Example:
        >>> from fairgames.rates import error_rate, fmeasure, group, true_positive_rate
        >>> f = group("sex", "Female")
        >>> default_steps(error_rate(), [true_positive_rate(f) >= true_positive_rate() - 0.05])
        500
        >>> default_steps(1 - fmeasure(), [fmeasure(f) >= fmeasure() - 0.02])
        1000
    """
    obj, exprs = _expressions(objective, constraints)
    return STEPS_NONLINEAR if any(e.nodes for e in obj + exprs) else STEPS_AFFINE


# The game of the threshold-grid family (paper 003's statistical parity): the flat
# ``algorithm`` keys of the preset and its players. θ takes theta_steps steps per step of a
# slow exponentiated-gradient λ, because the default preset's λ moves too fast for θ there
# and its mixtures lose objective to the paper's reduction (docs/fair_regression.md).
THRESHOLD_GAME = {"name": "algorithm1", "multipliers": "exponentiated_gradient",
                  "radius": 10.0, "multiplier_lr": 2.0, "theta_steps": 5}


def default_game(objective: Expression | None, constraints: Iterable[Constraint]
                 ) -> dict[str, object] | None:
    """The game a problem's family plays in place of the default preset (the flat
    ``algorithm`` keys): :data:`THRESHOLD_GAME` where a constraint reads threshold rates
    ``P[f ≥ z]`` (``score_at_least``: the statistical-parity grid of paper 003), else
    ``None`` (the default preset).

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> default_game(error_rate(), [score_rates(0.5)[0] <= 0.4])["name"]
        'algorithm1'
        >>> default_game(score_rates(0.5)[0], [error_rate() <= 0.2]) is None
        True
    """
    _, exprs = _expressions(objective, constraints)
    return dict(THRESHOLD_GAME) if any(reads_thresholds(e) for e in exprs) else None


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
            self._compiled[ratios] = self._compile(ratios)
        return self._compiled[ratios]

    def _compile(self, ratios: str) -> LagrangianTerms:
        index = {lf.key: i for i, lf in enumerate(self.leaves)}
        b = _Builder(leaf_index=index, ratio_floor=self.ratio_floor, ratio_mode=ratios)
        # The original constraints' rows come first, in order; slack rows follow.
        owners: list[tuple[str, Expression, int]] = []
        first_rows: list[int] = []     # the row holding each constraint's g (== : its "<=" row)
        for name, con in self.constraints.items():
            g = con.expression
            if con.sense == "<=":
                r = b.add_row(b.entries(g.affine), g.affine.constant, {}, name, "constraint")
                owners.append((name, g, r))
                first_rows.append(r)
            else:
                r1 = b.add_row(b.entries(g.affine), g.affine.constant, {}, name + "[<=]",
                               "constraint")
                r2 = b.add_row(b.entries(g.affine, -1.0), -g.affine.constant, {},
                               name + "[>=]", "constraint")
                owners.append((name + "[<=]", g, r1))
                owners.append((name + "[>=]", g * -1.0, r2))
                first_rows.append(r1)
            if (scale := gain_scale(g)) != 1.0:    # both rows of an equality
                b.gain_scales.update({r: scale for r in range(first_rows[-1], len(b.rows_a))})
        objective = self.objective if self.objective is not None else Expression.constant(0.0)
        for owner, expr, row in [("objective", objective, -1)] + owners:
            for c, node in expr.nodes:
                if isinstance(node, PsiNode):
                    b.psi(node, c, row, owner)
                elif isinstance(node, RatioNode):
                    b.ratio(node, c, row, owner)
                else:  # pragma: no cover - the algebra has only these two node kinds
                    raise TypeError(f"unknown node {type(node).__name__}")
        truth = TrueEvaluation.build(objective, [c.expression for c in self.constraints.values()],
                                     index)
        return LagrangianTerms(b, num_leaves=len(self.leaves),
                               objective=b.vector(objective.affine),
                               objective_constant=objective.affine.constant, truth=truth,
                               constraint_rows=first_rows,
                               objective_in_costs=self.objective_surrogate is None)


class ObjectiveBound(torch.nn.Module):
    """The θ-player's sign-correct bound ``ω·Σ_k (w_k⁺·upper_k + w_k⁻·lower_k)`` of an affine
    objective ``⟨w, R⟩`` under its own surrogate (paper 000 eq. (4) with the objective's
    costs alone), from one fused pass over the objective's leaves. It never updates running
    estimates: its values are θ's, the game's records come from the main evaluator.

    Example:
        >>> import torch
        >>> from fairgames.rates import Batch, error_rate
        >>> bound = ObjectiveBound(error_rate(), Surrogate("logistic"), {})
        >>> s = torch.tensor([2.0, -1.0])
        >>> value = bound(Batch(scores=s, labels=torch.tensor([1.0, 1.0])), torch.tensor(1.0))
        >>> ce = torch.nn.functional.softplus(-s).mean() / math.log(2.0)  # cross-entropy, bits
        >>> bool(torch.isclose(value, ce))
        True
    """

    def __init__(self, objective: Expression, surrogate: Surrogate,
                 evaluator_options: Mapping[str, object]) -> None:
        super().__init__()
        self.evaluator = RateEvaluator([objective], surrogate, **evaluator_options)  # type: ignore[arg-type]
        weights = [0.0] * len(self.evaluator.leaves)
        for leaf, coefficient in objective.affine.terms:
            weights[self.evaluator.index[leaf.key]] += coefficient
        self.register_buffer("weights", torch.tensor(weights), persistent=False)

    def forward(self, batch: Batch, omega: torch.Tensor) -> torch.Tensor:
        costs = omega * self.weights
        value, _ = self.evaluator.combination_bound(batch, lambda _true: costs, update=False)
        return value


def objective_surrogate_for(surrogate: Surrogate | str | None, objective: Expression | None
                            ) -> Surrogate | None:
    """``Problem(objective_surrogate=...)`` checked: an objective affine in the rates, that
    reads some (a ``ValueError`` otherwise; ``None`` passes through).

    Example:
        >>> from fairgames.rates import error_rate
        >>> objective_surrogate_for("logistic", error_rate()).kind
        'logistic'
    """
    if surrogate is None:
        return None
    surrogate = surrogate if isinstance(surrogate, Surrogate) else Surrogate(surrogate)
    if objective is not None and objective.nodes:
        raise ValueError(f"objective_surrogate needs an objective affine in the rates; "
                         f"{objective} is not affine in the rates (its ratio or ψ terms take "
                         "the problem's surrogate): leave objective_surrogate unset")
    if objective is None or not objective.affine.terms:
        raise ValueError("objective_surrogate needs an objective over rates; this problem's "
                         f"objective is {objective}")
    return surrogate


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
