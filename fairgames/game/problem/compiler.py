"""The compiler: a problem's expressions rewritten into the terms of a Lagrangian.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairgames.rates import (
    AffineForm,
    Constraint,
    Expression,
    Leaf,
    PsiNode,
    RatioNode,
)

from ..lagrangian import (
    Bilinear,
    CompiledRows,
    LagrangianTerms,
    LinearRatio,
    PsiTerm,
    RatioTerm,
    TrueEvaluation,
    ratio_psi,
)

# how a ratio term compiles: ``compile(ratios=...)``, the preset's ``ratio_slacks``
RATIO_MODES = ("linearize", "num_den", "gradient")


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


def compile_terms(objective: Expression | None, constraints: Mapping[str, Constraint],
                  leaves: Sequence[Leaf], *, ratios: str, ratio_floor: float,
                  objective_in_costs: bool) -> LagrangianTerms:
    """The Lagrangian terms of ``objective`` and the named ``constraints`` over ``leaves``
    (their order is the leaf order of the terms), with ratio terms compiled as ``ratios``
    (one of :data:`RATIO_MODES`; :meth:`Problem.compile
    <fairgames.game.problem.Problem.compile>` checks it and caches the result)."""
    index = {lf.key: i for i, lf in enumerate(leaves)}
    b = _Builder(leaf_index=index, ratio_floor=ratio_floor, ratio_mode=ratios)
    owners, first_rows = _constraint_rows(b, constraints)
    objective = objective if objective is not None else Expression.constant(0.0)
    for owner, expr, row in [("objective", objective, -1)] + owners:
        for c, node in expr.nodes:
            if isinstance(node, PsiNode):
                b.psi(node, c, row, owner)
            elif isinstance(node, RatioNode):
                b.ratio(node, c, row, owner)
            else:  # pragma: no cover - the algebra has only these two node kinds
                raise TypeError(f"unknown node {type(node).__name__}")
    truth = TrueEvaluation.build(objective, [c.expression for c in constraints.values()],
                                 index)
    return LagrangianTerms(b, num_leaves=len(leaves),
                           objective=b.vector(objective.affine),
                           objective_constant=objective.affine.constant, truth=truth,
                           constraint_rows=first_rows,
                           objective_in_costs=objective_in_costs)


def _constraint_rows(b: _Builder, constraints: Mapping[str, Constraint]
                     ) -> tuple[list[tuple[str, Expression, int]], list[int]]:
    """The original constraints' rows, first and in order (slack rows follow): each row's
    owner ``(name, g, row)`` and the row holding each constraint's ``g`` (``==``: its
    ``"<="`` row)."""
    owners: list[tuple[str, Expression, int]] = []
    first_rows: list[int] = []
    for name, con in constraints.items():
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
    return owners, first_rows
