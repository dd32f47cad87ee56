"""The compiled Lagrangian: dense device tensors and a few slack terms (built by ``Problem``).

With leaf rates ``R [K]``, slacks ``s [S]`` (ψ slacks ξ and ratio slacks z), values of
model-independent arguments ``φ [P]`` (e.g. KLD's ``p``), objective weight ``ω`` and
multipliers ``λ [M]``, the Lagrangian is (paper 000, eqs. (2), (5); ratios as below)::

    L = ω·(⟨w, R⟩ + w₀ + ⟨w_s, s⟩ + h₀(s, φ))
        + Σ_j λ_j·(⟨A_j, R⟩ + d_j + ⟨B_j, s⟩ + h_j(s, φ) + Σ_{b: row j} s_{k_b}·(⟨u_b, R⟩ + u0_b))

where ``h_j`` sums the row's ψ terms ``c·ψ(ξ, φ)``, and the last sum holds the bilinear
entries of ratio rows. :class:`LagrangianTerms` holds it as a list of small terms
(:mod:`fairgames.game.terms`: affine rows, slack rows, bilinear ratio rows, ψ terms, linearised
ratios), each owning its dense tensors and adding its part of the quantities below in list
order. Everything a step needs is then a mat-vec:

* the θ-player's leaf costs ``c(λ, s) = ω·w + Aᵀλ + Σ_b λ_{j_b}·s_{k_b}·u_b`` (each leaf then
  enters through its sign-correct surrogate bound: ``c⁺·upper + c⁻·lower``);
* the multipliers' gradient ``∂L/∂λ`` — each row's value — the TRUE violations when ``R`` are
  the true rates (no second autograd pass);
* the slacks' gradient ``ω·w_s + Bᵀλ + ∂h/∂s + Σ_b λ_{j_b}(⟨u_b,R⟩+u0_b)e_{k_b}``.

Ratios (P3). A term ``c·⟨α,R⟩/⟨β,R⟩`` is played in one of three ways (the preset's
``ratio_slacks``, ``Problem.compile(ratios=...)``):

* ``"linearize"`` (every preset's, ``algorithm3`` included): no slack — the θ-player sees
  the ratio's gradient at the true rates, ``c·(α − z·β)/den`` with ``z = num/den``, and its row
  gains ``c·z``, the true value. This is the slacks and their rows' multipliers at their best
  responses (``z = num/den`` makes the row tight, where ``∂L/∂z = 0`` fixes that multiplier).
* ``"num_den"`` (paper 000 Algorithm 3 as Table 2 plays it): ``c·a/b`` with a numerator slack
  ``a ∈ [max(0, num̲), num̄]`` and a denominator slack ``b ∈ [max(ratio_floor, den̲), den̄]``
  (the ranges of ``num``, ``den`` over rates in [0, 1]) and two slack rows: ``⟨α,R⟩ − a ≤ 0``
  and ``b − ⟨β,R⟩ ≤ 0`` when ``c > 0``, ``a − ⟨α,R⟩ ≤ 0`` and ``⟨β,R⟩ − b ≤ 0`` when
  ``c < 0``. It is a ψ term ``c·ψ(a, b)``, ``ψ = a/b`` (:func:`ratio_psi`), so it shares the ψ
  machinery (``h_j``, the slack rows, ``∂h/∂s`` by autograd), but ``a/b`` is not convex: its
  slacks always play projected OGD, never a best response. θ sees only the slack rows' linear
  terms; λ sees each row at the true rates and the slacks.
* ``"gradient"``: ``c·z`` with one ratio slack ``z`` and the row ``σ·(⟨α,R⟩ − z·⟨β,R⟩) ≤ 0``
  (``σ = sign c``): for ``c < 0`` ``z ≤ num/den``, for ``c > 0`` ``z ≥ num/den``, with ``z`` on
  projected OGD — the ratio slack of Cotter et al. (JMLR 2019, TFCO). ``L`` is linear in ``z``.

Measured (1000 steps on the F-measure parity problem of ``tests/game/test_game_metrics.py``,
unconstrained model: F1 0.711, parity violation 0.211): ``"num_den"`` is a heuristic that the
paper does not prove anything about, and it is fragile. ``c·a/b`` has an indefinite Hessian for
every ``(a, b)`` (determinant ``−c²/b⁴``), so simultaneous OGD on ``(a, b)`` against OGD on the
slack rows' multipliers has no interior rest point. With ``slack_lr ≥ 0.003`` the slacks ran
to the corner (``a`` at its top, ``b`` at its floor) within a few hundred steps and both F1 and
the violation got worse (violation ≈ 0.30); ``slack_lr = 0.001`` (``multiplier_lr = 0.3``)
keeps them near the rates and gets a mixture violation of about 0.15 at F1 ≈ 0.59; on paper
000's Table 4 data the OGD slacks over-satisfy the constraint at a large cost in F1. The
``algorithm3`` preset therefore plays the slacks' subgame exactly — the tight point
``a = num, b = den`` with KKT multipliers ``|c|w/den``, ``|c|w·num/den²``, which is
``"linearize"`` (presets note [4]); on the test problem it reached violation 0.043 at F1 0.29.
``"gradient"`` (``z``) had its mixture at violation 0.152 with F1 0.42. (A linear model can
reach violation ≤ 0.105 at F1 ≈ 0.72 and violation 0 at F1 ≈ 0.49 on that data, by random
search.)

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, true_positive_rate, group
    >>> from fairgames.game import Problem
    >>> t = Problem(error_rate(), [true_positive_rate(group("g", "a")) >= 0.8]).terms
    >>> t.leaf_costs(torch.tensor(1.0), torch.tensor([2.0]), t.slack_lo).tolist()
    [1.0, -2.0]
    >>> [round(v, 4) for v in t.affine_rows(torch.tensor([0.1, 0.7])).tolist()]  # 0.8 - TPR
    [0.1]
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from fairgames.rates import Expression, Psi, PsiNode, RatioNode, sign_correct_sum, sign_split

from .sparse import RowMatrix
from .terms import AffineRows, BilinearRatios, LinearRatios, PsiTerms, SlackRows, Term, _t


@dataclass(frozen=True, eq=False)
class PsiTerm:
    """``coefficient·ψ(ξ, φ)`` in row ``row`` (``-1``: the objective)."""

    row: int
    coefficient: float
    psi: Psi
    free: tuple[int, ...]          # argument positions played by slacks
    slacks: tuple[int, ...]        # slack index of each free argument
    fixed: Mapping[int, int]       # argument position → index into the fixed values φ
    name: str
    ratio: bool = False            # c·a/b of a ratio (Algorithm 3): OGD only, no best response


def _ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a / b


def ratio_psi(a_box: tuple[float, float], b_box: tuple[float, float]) -> Psi:
    """``ψ(a, b) = a/b`` on the box ``a_box × b_box`` (``b̲ > 0``): the numerator/denominator
    slack form of a ratio term (paper 000 Algorithm 3). Increasing in ``a``, decreasing in
    ``b`` and neither convex nor concave, so it is never best-responded.

    Example:
        >>> psi = ratio_psi((0.0, 1.0), (0.01, 2.0))
        >>> psi.monotone, psi.curvature, float(psi(0.5, 2.0))
        ((1, -1), 'none', 0.25)
    """
    if not b_box[0] > 0:
        raise ValueError(f"the denominator slack's box must be positive, got {b_box}")
    return Psi("ratio", _ratio, 2, "none", (1, -1), (tuple(a_box), tuple(b_box)))


@dataclass(frozen=True, eq=False)
class RatioTerm:
    """``coefficient·num/den`` in row ``row`` (``-1``: objective), played by slack ``slack``
    through the bilinear row ``slack_row``."""

    row: int
    coefficient: float
    slack: int
    slack_row: int
    name: str


@dataclass(frozen=True)
class LinearRatio:
    """``coefficient·num/den`` in row ``row`` (``-1``: objective), played without a slack: the
    θ-player sees its gradient at the true rates, ``c·(α − z·β)/den`` with ``z = num/den``,
    and its row gains ``c·z`` (see :class:`LagrangianTerms`)."""

    row: int
    coefficient: float
    num: list[float]
    num0: float
    den: list[float]
    den0: float
    name: str


@dataclass(frozen=True)
class Bilinear:
    """``s_slack·(⟨u, R⟩ + u0)`` added to row ``row``."""

    row: int
    slack: int
    u: list[float]
    u0: float


class TrueEvaluation(torch.nn.Module):
    """The original (un-relaxed) objective and constraints as functions of leaf values."""

    def __init__(self, objective: Expression, constraints: Sequence[Expression],
                 index: Mapping[tuple, int]) -> None:
        super().__init__()
        k = len(index)

        def vec(form) -> list[float]:
            v = [0.0] * k
            for lf, c in form.terms:
                v[index[lf.key]] += c
            return v

        def entries(form) -> dict[int, float]:
            v: dict[int, float] = {}
            for lf, c in form.terms:
                i = index[lf.key]
                v[i] = v.get(i, 0.0) + c
            return v

        exprs = [objective, *constraints]
        # [C+1, K]: sparse from SPARSE_ENTRIES on (one constraint per group reads two leaves)
        self.matrix = RowMatrix([entries(e.affine) for e in exprs], k)
        self.register_buffer("d", _t([e.affine.constant for e in exprs]), persistent=False)
        self.nodes: list[tuple[int, float, object, list[torch.Tensor], list[float]]] = []
        node_rows: list[int] = []
        for i, e in enumerate(exprs):
            for c, node in e.nodes:
                if isinstance(node, RatioNode):
                    forms = [node.numerator, node.denominator]
                else:
                    assert isinstance(node, PsiNode)
                    forms = [arg.affine for arg in node.args]
                self.nodes.append((i, c, node, [_t(vec(f)) for f in forms],
                                   [f.constant for f in forms]))
                node_rows.append(i)
        self.register_buffer("node_rows", torch.tensor(node_rows, dtype=torch.long),
                             persistent=False)

    @staticmethod
    def build(objective: Expression, constraints: Sequence[Expression],
              index: Mapping[tuple, int]) -> TrueEvaluation:
        return TrueEvaluation(objective, constraints, index)

    def _apply(self, fn, recurse=True):  # keep the per-node vectors on the module's device
        super()._apply(fn, recurse)
        self.nodes = [(i, c, n, [fn(v) for v in vs], cs) for i, c, n, vs, cs in self.nodes]
        return self

    def forward(self, leaves: torch.Tensor, ratio_floor: float | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(objective, constraints [C])`` at leaf values ``[K]``, in their precision (float64
        for a whole split's exact values). A ratio whose denominator is 0 is undefined (NaN,
        ±inf) unless ``ratio_floor`` is given: it then reads ``num / ratio_floor``."""
        dt = leaves.dtype if leaves.is_floating_point() else self.d.dtype
        leaves = leaves.to(dt)
        out = self.matrix.mv(leaves) + self.d.to(dt)
        extra = []
        for i, c, node, vs, cs in self.nodes:
            args = [v.to(dt) @ leaves + k for v, k in zip(vs, cs, strict=True)]
            if isinstance(node, RatioNode):
                den = args[1]
                if ratio_floor is not None:
                    den = torch.where(den == 0, ratio_floor, den)
                val = args[0] / den
            else:
                val = node.psi(*args)  # type: ignore[attr-defined]
            extra.append((i, c * val))
        if extra:
            out = out.index_add(0, self.node_rows, torch.stack([v for _, v in extra]).to(out.dtype))
        return out[0], out[1:]


@dataclass
class CompiledRows:
    """What the compiler (:meth:`Problem.compile`) fills while walking the expressions: the
    rows (``A``, ``d``, ``B`` as dicts), the bilinear ratio entries, the slacks (box, start,
    names, kinds), the model-independent arguments ``φ``, and the ψ and ratio terms."""

    ratio_floor: float = 0.01
    rows_a: list[dict[int, float] | list[float]] = field(default_factory=list)  # sparse or dense
    rows_d: list[float] = field(default_factory=list)
    rows_b: list[dict[int, float]] = field(default_factory=list)
    bilinear: list[Bilinear] = field(default_factory=list)
    objective_slack: dict[int, float] = field(default_factory=dict)
    row_names: list[str] = field(default_factory=list)
    row_kinds: list[str] = field(default_factory=list)
    slack_lo: list[float] = field(default_factory=list)
    slack_hi: list[float] = field(default_factory=list)
    slack_init: list[tuple[list[float], float, list[float], float]] = field(
        default_factory=list)
    slack_names: list[str] = field(default_factory=list)
    slack_kinds: list[str] = field(default_factory=list)
    fixed_map: list[list[float]] = field(default_factory=list)
    fixed_const: list[float] = field(default_factory=list)
    psi_terms: list[PsiTerm] = field(default_factory=list)
    ratio_terms: list[RatioTerm] = field(default_factory=list)
    linear_ratios: list[LinearRatio] = field(default_factory=list)
    gain_scales: dict[int, float] = field(default_factory=dict)   # rows whose scale is not 1


class LagrangianTerms(torch.nn.Module):
    """The compiled Lagrangian as a list of small terms (:mod:`fairgames.game.terms`), in the
    order their parts are summed: the affine rows (θ's leaf costs start there), the slack rows,
    the bilinear ratio rows, the ψ terms, the linearised ratios. Built by
    :class:`~fairgames.game.Problem`; move to a device with :meth:`on`."""

    def __init__(self, c: CompiledRows, *, num_leaves: int, objective: list[float],
                 objective_constant: float, truth: TrueEvaluation,
                 constraint_rows: Sequence[int] = (), objective_in_costs: bool = True) -> None:
        super().__init__()
        rows_a, rows_b, row_kinds, psi_terms = c.rows_a, c.rows_b, c.row_kinds, c.psi_terms
        bilinear, linear_ratios = c.bilinear, c.linear_ratios
        k, m, s, p = num_leaves, len(rows_a), len(c.slack_lo), len(c.fixed_map)
        self.num_leaves, self.num_rows, self.num_slacks, self.num_fixed = k, m, s, p
        self.row_names, self.row_kinds = list(c.row_names), list(row_kinds)
        self.slack_names, self.slack_kinds = list(c.slack_names), list(c.slack_kinds)
        self.objective_constant = float(objective_constant)
        self.psi_terms, self.ratio_terms = list(psi_terms), list(c.ratio_terms)
        self.num_den_terms = [t for t in psi_terms if t.ratio]
        self.num_bilinear, self.num_linear = len(bilinear), len(linear_ratios)
        self.linear_ratios = list(linear_ratios)
        self.ratio_floor = float(c.ratio_floor)
        self.original = truth
        # the λ-player's per-row step scale (Problem's ``gain_scale``); None: every row's is 1
        scales = [c.gain_scales.get(j, 1.0) for j in range(m)] if c.gain_scales else None
        self.register_buffer("gain_scale", _t(scales) if scales else None, persistent=False)
        # slack → [(row, σ)] of its slack rows (σ = +1: arg ≤ slack, −1: arg ≥ slack).
        slack_rows: dict[int, list[tuple[int, float]]] = {}
        for j, entries in enumerate(rows_b):
            if row_kinds[j] == "slack":
                for col, v in entries.items():
                    slack_rows.setdefault(col, []).append((j, -float(v)))
        self.rows_of_slack = slack_rows
        p1_leader = bool(psi_terms) and all(kind == "slack" for kind in row_kinds) and all(
            t.row < 0 for t in psi_terms) and not bilinear and not linear_ratios and not (
            self.num_den_terms)
        self.affine = AffineRows(objective=objective, objective_constant=objective_constant,
                                 rows_a=rows_a, rows_d=c.rows_d,
                                 constraint_rows=list(constraint_rows),
                                 objective_in_costs=objective_in_costs)
        self.slack_rows = SlackRows(objective_slack=c.objective_slack, rows_b=rows_b,
                                    num_slacks=s)
        self.bilinear = BilinearRatios(entries=bilinear, num_leaves=k)
        self.psi = PsiTerms(terms=psi_terms, num_rows=m, slack_rows=slack_rows,
                            p1_leader=p1_leader)
        self.linear = LinearRatios(ratios=linear_ratios, num_leaves=k,
                                   ratio_floor=c.ratio_floor)
        present = [self.affine, self.slack_rows if s else None,
                   self.bilinear if bilinear else None, self.psi if psi_terms else None,
                   self.linear if linear_ratios else None]
        self.terms = torch.nn.ModuleList([t for t in present if t is not None])
        # the same modules as a plain list: iterated on every step, without ModuleList's and
        # nn.Module.__getattr__'s overhead (.to() moves the modules' tensors in place)
        self._terms: list[Term] = list(self.terms)
        for name, value in {
            "slack_lo": _t(c.slack_lo, (s,)), "slack_hi": _t(c.slack_hi, (s,)),
            "init_num": _t([x[0] for x in c.slack_init], (s, k)),
            "init_num0": _t([x[1] for x in c.slack_init], (s,)),
            "init_den": _t([x[2] for x in c.slack_init], (s, k)),
            "init_den0": _t([x[3] for x in c.slack_init], (s,)),
            "fixed_map": _t(c.fixed_map, (p, k)), "fixed_const": _t(c.fixed_const, (p,)),
        }.items():
            self.register_buffer(name, value, persistent=False)

    # ------------------------------------------------------------------ structure
    @property
    def has_slacks(self) -> bool:
        return self.num_slacks > 0

    @property
    def has_psi(self) -> bool:
        """Whether there are ψ terms proper (best-responded; not the ``a/b`` of ratios)."""
        return self.psi.has_best_response

    @property
    def has_ratios(self) -> bool:
        """Whether ratio terms are played by slacks (``ratios="num_den"`` or ``"gradient"``)."""
        return bool(self.ratio_terms or self.num_den_terms)

    @property
    def a(self) -> torch.Tensor:
        """``A`` [M, K]: the rows' rate coefficients."""
        return self.affine.a

    @property
    def d(self) -> torch.Tensor:
        """``d`` [M]: the rows' constants."""
        return self.affine.d

    @property
    def b(self) -> torch.Tensor:
        """``B`` [M, S]: the rows' slack coefficients."""
        return self.slack_rows.b

    def non_monotone_terms(self) -> list[str]:
        """ψ terms monotone in neither direction in some model-dependent argument (KLD's p̂)."""
        return self.psi.non_monotone()

    def on(self, device: torch.device | str) -> LagrangianTerms:
        """A copy of these terms on ``device`` (the problem's own copy stays where it is)."""
        return copy.deepcopy(self).to(device)

    # ------------------------------------------------------------------ the θ-player
    def leaf_costs(self, omega: torch.Tensor, lam: torch.Tensor, slacks: torch.Tensor,
                   ratios: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """``c(λ, s) = ω·w + Aᵀλ + Σ_b λ_{j_b} s_{k_b} u_b`` [K]: each leaf's coefficient in L;
        linearised ratios add ``weight·c·(α − z·β)/den`` with ``(z, den)`` =
        :meth:`ratio_values` at the true rates."""
        costs = None
        for term in self._terms:
            costs = term.add_costs(costs, omega, lam, slacks, ratios)
        assert costs is not None
        return costs

    def ratio_values(self, leaves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z, den)`` [T] of the linearised ratios at leaf values (den floored)."""
        return self.linear.values(leaves)

    @staticmethod
    def surrogate(costs: torch.Tensor, upper: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
        """``Σ c⁺·upper + c⁻·lower``: the sign-correct surrogate of ``⟨c, R⟩`` (an upper bound
        for bound surrogates, paper 000 eq. (4))."""
        return sign_correct_sum(costs, upper, lower)

    def surrogate_flat(self, costs: torch.Tensor, flat_bounds: torch.Tensor) -> torch.Tensor:
        """:meth:`surrogate` with both bounds in one ``[2K]`` tensor ``[upper, lower]`` (the
        fused evaluator's ``LeafValues.flat_bounds``): one clamp and one dot."""
        return torch.dot(sign_split(costs).view(-1), flat_bounds)

    # ------------------------------------------------------------------ rows
    def affine_rows(self, leaves: torch.Tensor) -> torch.Tensor:
        """``A·R + d`` [M] at leaf values (the R-part of every row)."""
        return self.affine.rows(leaves)

    def affine_rows_bound(self, upper: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
        """``A⁺·upper + A⁻·lower + d``: the rows' surrogate (upper-bound) R-part."""
        return self.affine.rows_bound(upper, lower)

    def bilinear_values(self, leaves: torch.Tensor) -> torch.Tensor:
        """``⟨u_b, R⟩ + u0_b`` [Bn]: what each ratio slack multiplies in its row."""
        return self.bilinear.values(leaves)

    def bilinear_values_bound(self, upper: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
        """Upper bound of ``⟨u_b, R⟩ + u0_b`` (ratio slacks are non-negative)."""
        return self.bilinear.values_bound(upper, lower)

    def fixed_values(self, leaves: torch.Tensor) -> torch.Tensor:
        """Values ``φ [P]`` of the model-independent arguments at true leaf values."""
        return torch.addmv(self.fixed_const, self.fixed_map, leaves)

    def psi_values(self, slacks: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """``[h₀, h_1..h_M]``: every row's ψ terms at the slacks (index 0: the objective)."""
        return self.psi.values(slacks, fixed)

    def row_values(self, affine: torch.Tensor, bilinear: torch.Tensor, slacks: torch.Tensor,
                   fixed: torch.Tensor, ratios: torch.Tensor | None = None) -> torch.Tensor:
        """``∂L/∂λ`` [M]: each multiplier's gain (its row's value) given the rows' R-parts
        ``affine`` (= :meth:`affine_rows`), ``bilinear`` (= :meth:`bilinear_values`) and the
        linearised ratios' values ``z`` (= :meth:`ratio_values`)."""
        out = affine
        for term in self._terms:
            out = term.add_rows(out, slacks, fixed, bilinear, ratios)
        return out

    # ------------------------------------------------------------------ slacks
    def initial_slacks(self, leaves: torch.Tensor) -> torch.Tensor:
        """Slacks at the values they stand for (an argument of ψ, or num/den of a ratio),
        clamped to their box (a tight start)."""
        num = torch.addmv(self.init_num0, self.init_num, leaves)
        den = torch.addmv(self.init_den0, self.init_den, leaves)
        return self.project_slacks(num / den.clamp_min(1e-6))

    def slack_gradient(self, omega: torch.Tensor, lam: torch.Tensor, slacks: torch.Tensor,
                       fixed: torch.Tensor, bilinear: torch.Tensor) -> torch.Tensor:
        """``∂L/∂s``: linear parts in closed form; ψ parts by autograd over the slack terms
        only (never the model)."""
        grad = None
        for term in self._terms:
            grad = term.add_slack_gradient(grad, omega, lam, slacks, fixed, bilinear)
        assert grad is not None, "slack_gradient() of a problem without slacks"
        return grad

    def psi_best_response(self, omega: torch.Tensor, lam: torch.Tensor, slacks: torch.Tensor,
                          fixed: torch.Tensor, *, steps: int = 100) -> torch.Tensor:
        """Slacks with every ψ slack at its best response ``argmin_ξ L`` (Lemma 1: ``∇ψ*``;
        closed forms or a fixed-step box solve, see ``conjugates.py``); ratio slacks (``z``, and
        the ``a, b`` of ``c·a/b``, which is not convex) unchanged."""
        if not self.psi.has_best_response:
            return slacks
        # ∂/∂ξ of Σ λ_j ⟨B_j, s⟩: the linear term μ
        return self.psi.best_response(omega, lam, self.slack_rows.pull(lam), slacks, fixed,
                                      steps)

    def psi_leader(self, affine: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor | None:
        """``argmax_λ min_ξ L`` in closed form for (P1) (see :meth:`PsiTerms.leader`);
        ``None`` for other shapes."""
        return self.psi.leader(affine, fixed)

    def project_slacks(self, slacks: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(slacks, self.slack_lo), self.slack_hi)

    # ------------------------------------------------------------------ reporting
    def truth(self, leaves: torch.Tensor, ratio_floor: float | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The original objective and constraint values ``(f, g [C])`` at leaf values (see
        :meth:`TrueEvaluation.forward` for ``ratio_floor``)."""
        return self.original(leaves, ratio_floor)

    @property
    def affine_only(self) -> bool:
        """No ψ or ratio term: the constraint rows are the constraints themselves."""
        return not self.original.nodes

    def truth_from_rows(self, leaves: torch.Tensor, rows: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`truth` for an affine-only problem, read off this step's true row values
        (the first row of each constraint is ``g``): two ops instead of a mat-vec pass, none
        when the objective has no rate and every row is a constraint's (the returned tensors
        may then be shared: treat them as read-only)."""
        return self.affine.truth_from_rows(leaves, rows)

    def max_violation_from_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """For an affine-only problem, ``max_c max(g_c, 0)`` (``|g_c|`` for ``==``) read off
        the true rows: an equality's two rows are ``g`` and ``−g`` exactly, so this is the
        largest row clamped at zero (0 without constraints)."""
        if not self.num_rows:
            return self.affine.objective_constant_t * 0.0
        return rows.max().clamp_min(0.0)
