"""The compiled Lagrangian's terms: each owns its dense tensors and computes its own parts.

:class:`~fairgames.game.lagrangian.LagrangianTerms` is a list of these (see its module for the
Lagrangian they sum to). Every term adds, in list order, its part of

* ``add_costs``: the θ-player's leaf costs ``c(ω, λ, s)`` [K];
* ``add_rows``: the rows' values ``∂L/∂λ`` [M] (the multipliers' gain);
* ``add_slack_gradient``: ``∂L/∂s`` [S] (the slacks' OGD step);

and a term that has none of a part leaves it unchanged. A new kind of term (a group-loss term,
an adversarial reweighting's) is one more class here and one more entry in the list.

Example:
    >>> import torch
    >>> rows = AffineRows(objective=[1.0, 0.0], objective_constant=0.0,
    ...                   rows_a=[[0.0, -1.0]], rows_d=[0.8])
    >>> rows.add_costs(None, torch.tensor(1.0), torch.tensor([2.0]), None, None).tolist()
    [1.0, -2.0]
    >>> [round(v, 4) for v in rows.rows(torch.tensor([0.1, 0.7])).tolist()]   # 0.8 - R₂
    [0.1]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .conjugates import psi_linear_argmin
from .sparse import Row, RowMatrix

Ratios = tuple[torch.Tensor, torch.Tensor] | None


def _t(x: object, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    out = torch.tensor(x, dtype=torch.float32)
    return out.reshape(shape) if shape is not None else out


class Term(torch.nn.Module):
    """Base of the terms: every part defaults to "adds nothing"."""

    def _buffers_from(self, buffers: dict[str, torch.Tensor]) -> None:
        for name, value in buffers.items():
            self.register_buffer(name, value, persistent=False)

    def add_costs(self, costs: torch.Tensor | None, omega: torch.Tensor, lam: torch.Tensor,
                  slacks: torch.Tensor | None, ratios: Ratios) -> torch.Tensor | None:
        return costs

    def add_rows(self, rows: torch.Tensor, slacks: torch.Tensor, fixed: torch.Tensor,
                 bilinear: torch.Tensor, ratios: torch.Tensor | None) -> torch.Tensor:
        return rows

    def add_slack_gradient(self, grad: torch.Tensor | None, omega: torch.Tensor,
                           lam: torch.Tensor, slacks: torch.Tensor, fixed: torch.Tensor,
                           bilinear: torch.Tensor) -> torch.Tensor | None:
        return grad


class AffineRows(Term):
    """The objective's rate part ``ω·⟨w, R⟩`` and the rows' ``A·R + d``: θ's leaf costs start
    at ``ω·w + Aᵀλ``; the rows' R-part (true, or its sign-correct surrogate bound) is what the
    other terms add to."""

    def __init__(self, *, objective: list[float], objective_constant: float,
                 rows_a: Sequence[Row], rows_d: list[float],
                 constraint_rows: Sequence[int] | None = None,
                 objective_in_costs: bool = True, sparse: bool | None = None) -> None:
        super().__init__()
        k, m = len(objective), len(rows_a)
        rows = list(range(m)) if constraint_rows is None else list(constraint_rows)
        self.objective_constant = float(objective_constant)
        # Shortcuts of the per-step ops (same values): a zero objective vector, and constraint
        # rows that are the rows themselves.
        self.objective_zero = not any(objective)
        # False: θ bounds the objective under its own surrogate (Problem.objective_surrogate,
        # ObjectiveBound), so the leaf costs carry the constraints' part alone.
        self.costs_without_objective = self.objective_zero or not objective_in_costs
        self.rows_are_constraints = rows == list(range(m))
        # A, Aᵀ, A⁺, A⁻: dense for small problems, CSR from SPARSE_ENTRIES on (sparse.py)
        self.matrix = RowMatrix(rows_a, k, sparse=sparse)
        self.sparse = self.matrix.sparse
        self.matrix_t, self.matrix_pos = self.matrix.t(), self.matrix.positive()
        self.matrix_neg = self.matrix.negative()
        self._buffers_from({
            "objective": _t(objective, (k,)), "d": _t(rows_d, (m,)),
            "constraint_rows": torch.tensor(rows, dtype=torch.long),
            "objective_constant_t": torch.tensor(float(objective_constant))})

    @property
    def a(self) -> torch.Tensor:
        """``A`` [M, K] as a dense tensor."""
        return self.matrix.dense()

    def add_costs(self, costs, omega, lam, slacks, ratios):
        if self.costs_without_objective:
            return self.matrix_t.mv(lam)
        if self.sparse:
            return omega * self.objective + self.matrix_t.mv(lam)
        return torch.addmv(omega * self.objective, self.matrix_t.matrix, lam)

    def rows(self, leaves: torch.Tensor) -> torch.Tensor:
        """``A·R + d`` [M] at leaf values."""
        if self.sparse:
            return self.d + self.matrix.mv(leaves)
        return torch.addmv(self.d, self.matrix.matrix, leaves)

    def rows_bound(self, upper: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
        """``A⁺·upper + A⁻·lower + d``: the rows' surrogate (upper-bound) R-part."""
        return self.matrix_pos.mv(upper) + self.matrix_neg.mv(lower) + self.d

    def truth_from_rows(self, leaves: torch.Tensor, rows: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.objective_zero:
            objective = self.objective_constant_t
        else:
            objective = self.objective @ leaves + self.objective_constant
        return objective, rows if self.rows_are_constraints else rows[self.constraint_rows]


class SlackRows(Term):
    """The slacks' linear part: ``ω·⟨w_s, s⟩ + Σ_j λ_j ⟨B_j, s⟩`` (the slack rows of ψ and
    ratio slacks)."""

    def __init__(self, *, objective_slack: dict[int, float], rows_b: list[dict[int, float]],
                 num_slacks: int) -> None:
        super().__init__()
        b = torch.zeros(len(rows_b), num_slacks)
        for j, entries in enumerate(rows_b):
            for col, v in entries.items():
                b[j, col] = v
        w_s = torch.zeros(num_slacks)
        for col, v in objective_slack.items():
            w_s[col] = v
        self._buffers_from({"objective_slack": w_s, "b": b, "b_t": b.t().contiguous()})

    def add_rows(self, rows, slacks, fixed, bilinear, ratios):
        return torch.addmv(rows, self.b, slacks)

    def add_slack_gradient(self, grad, omega, lam, slacks, fixed, bilinear):
        return omega * self.objective_slack + self.b_t @ lam

    def pull(self, lam: torch.Tensor) -> torch.Tensor:
        """``Bᵀλ``: ∂/∂s of ``Σ λ_j ⟨B_j, s⟩`` (the linear term of the slacks' best response)."""
        return self.b_t @ lam


class BilinearRatios(Term):
    """Ratio slacks ``z`` in their rows: ``Σ_b λ_{j_b}·s_{k_b}·(⟨u_b, R⟩ + u0_b)`` (the
    ``"gradient"`` ratio mode, Cotter et al. 2019)."""

    def __init__(self, *, entries: Sequence[object], num_leaves: int) -> None:
        super().__init__()
        u = _t([x.u for x in entries], (len(entries), num_leaves))   # type: ignore[attr-defined]
        self._buffers_from({
            "row": torch.tensor([x.row for x in entries], dtype=torch.long),  # type: ignore
            "slack": torch.tensor([x.slack for x in entries], dtype=torch.long),  # type: ignore
            "u": u, "u_t": u.t().contiguous(), "u_pos": u.clamp_min(0.0),
            "u_neg": u.clamp_max(0.0),
            "u0": _t([x.u0 for x in entries], (len(entries),))})  # type: ignore[attr-defined]

    def add_costs(self, costs, omega, lam, slacks, ratios):
        return torch.addmv(costs, self.u_t, lam[self.row] * slacks[self.slack])

    def add_rows(self, rows, slacks, fixed, bilinear, ratios):
        return rows.index_add(0, self.row, slacks[self.slack] * bilinear)

    def add_slack_gradient(self, grad, omega, lam, slacks, fixed, bilinear):
        return grad.index_add(0, self.slack, lam[self.row] * bilinear)

    def values(self, leaves: torch.Tensor) -> torch.Tensor:
        """``⟨u_b, R⟩ + u0_b`` [Bn]: what each ratio slack multiplies in its row."""
        return torch.addmv(self.u0, self.u, leaves)

    def values_bound(self, upper: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
        """Upper bound of ``⟨u_b, R⟩ + u0_b`` (ratio slacks are non-negative)."""
        return self.u_pos @ upper + self.u_neg @ lower + self.u0


class LinearRatios(Term):
    """Ratios played without a slack (``"linearize"``): the row gains the true ``c·z``,
    ``z = num/den``; θ's leaf costs gain ``weight·c·(α − z·β)/den`` at the true rates."""

    def __init__(self, *, ratios: Sequence[object], num_leaves: int, ratio_floor: float
                 ) -> None:
        super().__init__()
        n, k = len(ratios), num_leaves
        num = _t([r.num for r in ratios], (n, k))      # type: ignore[attr-defined]
        den = _t([r.den for r in ratios], (n, k))      # type: ignore[attr-defined]
        self.ratio_floor = float(ratio_floor)
        self._buffers_from({
            "num": num, "num_t": num.t().contiguous(),
            "num0": _t([r.num0 for r in ratios], (n,)),  # type: ignore[attr-defined]
            "den": den, "den_t": den.t().contiguous(),
            "den0": _t([r.den0 for r in ratios], (n,)),  # type: ignore[attr-defined]
            "row": torch.tensor([r.row + 1 for r in ratios], dtype=torch.long),  # type: ignore
            "coef": _t([r.coefficient for r in ratios], (n,))})  # type: ignore[attr-defined]

    def values(self, leaves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z, den)`` [T] at leaf values (den floored)."""
        num = torch.addmv(self.num0, self.num, leaves)
        den = torch.addmv(self.den0, self.den, leaves).clamp_min(self.ratio_floor)
        return num / den, den

    def add_costs(self, costs, omega, lam, slacks, ratios):
        assert ratios is not None, "linearised ratios need ratio_values() of the step"
        z, den = ratios
        w = torch.cat([omega.reshape(1), lam])[self.row] * self.coef / den
        return torch.addmv(torch.addmv(costs, self.num_t, w), self.den_t, -w * z)

    def add_rows(self, rows, slacks, fixed, bilinear, ratios):
        assert ratios is not None, "linearised ratios need ratio_values() of the step"
        full = torch.zeros(rows.shape[0] + 1, dtype=rows.dtype, device=rows.device)
        return rows + full.index_add(0, self.row, self.coef * ratios)[1:]


class PsiTerms(Term):
    """The rows' ψ terms ``c·ψ(ξ, φ)`` (P1, P2; and the ``c·a/b`` of ``"num_den"`` ratios):
    their values ``h_j`` in the rows, their slacks' gradient by autograd over the slack terms
    only, the slacks' best response (paper 000 Lemma 1) and, for (P1), the closed-form leader.

    Args:
        terms: the compiled :class:`~fairgames.game.lagrangian.PsiTerm` s.
        num_rows: M.
        slack_rows: slack → ``[(row, σ)]`` of its slack rows (σ = +1: arg ≤ slack, −1: ≥).
        p1_leader: every row a ψ slack row of the objective (the leader's closed form holds).
    """

    def __init__(self, *, terms: Sequence[object], num_rows: int,
                 slack_rows: dict[int, list[tuple[int, float]]], p1_leader: bool) -> None:
        super().__init__()
        self.terms = list(terms)
        self.num_rows = int(num_rows)
        # ψ terms proper (best-responded) and the a/b terms of Algorithm 3 (OGD only).
        self.br_terms = [(n, t) for n, t in enumerate(self.terms) if not t.ratio]  # type: ignore
        self.p1_leader = bool(p1_leader)
        buffers = {"slack_index": torch.tensor(
            [i for _, t in self.br_terms for i in t.slacks], dtype=torch.long)}  # type: ignore
        rows, signs, args = [], [], []
        offset = 0
        for n, t in enumerate(self.terms):
            # Per-term index tensors, made once: building them per step would copy to the device.
            buffers[f"idx_{n}"] = torch.tensor(t.slacks, dtype=torch.long)   # type: ignore
            buffers[f"row_{n}"] = torch.tensor([t.row + 1], dtype=torch.long)  # type: ignore
            first = [slack_rows.get(si, [(0, 1.0)])[0] for si in t.slacks]   # type: ignore
            buffers[f"leader_first_{n}"] = torch.tensor([j for j, _ in first], dtype=torch.long)
            buffers[f"leader_first_sign_{n}"] = _t([sg for _, sg in first], (len(first),))
            free = t.free                                                      # type: ignore
            buffers[f"leader_lo_{n}"] = _t([t.psi.domain[i][0] + 1e-6 for i in free],  # type: ignore
                                           (len(free),))
            buffers[f"leader_hi_{n}"] = _t([t.psi.domain[i][1] - 1e-6 for i in free],  # type: ignore
                                           (len(free),))
            for m, si in enumerate(t.slacks):                                  # type: ignore
                for j, sg in slack_rows.get(si, []):
                    rows.append(j)
                    signs.append(sg)
                    args.append(offset + m)
            offset += len(t.slacks)                                            # type: ignore
        buffers["leader_rows"] = torch.tensor(rows, dtype=torch.long)
        buffers["leader_sign"] = _t(signs, (len(signs),))
        buffers["leader_arg"] = torch.tensor(args, dtype=torch.long)
        self._buffers_from(buffers)

    @property
    def has_best_response(self) -> bool:
        return bool(self.br_terms)

    def non_monotone(self) -> list[str]:
        """ψ terms monotone in neither direction in some model-dependent argument (KLD's p̂)."""
        return [t.name for t in self.terms if any(t.psi.monotone[i] == 0 for i in t.free)]

    def values(self, slacks: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """``[h₀, h_1..h_M]``: every row's ψ terms at the slacks (index 0: the objective)."""
        out = torch.zeros(self.num_rows + 1, dtype=slacks.dtype, device=slacks.device)
        for n, t in enumerate(self.terms):
            args: list[torch.Tensor] = [slacks[0]] * t.psi.arity
            for i, si in zip(t.free, t.slacks, strict=True):
                args[i] = slacks[si]
            for i, fi in t.fixed.items():
                args[i] = fixed[fi]
            val = t.coefficient * t.psi(*args)
            out = out.index_add(0, getattr(self, f"row_{n}"), val.reshape(1).to(out.dtype))
        return out

    def add_rows(self, rows, slacks, fixed, bilinear, ratios):
        return rows + self.values(slacks, fixed)[1:]

    def add_slack_gradient(self, grad, omega, lam, slacks, fixed, bilinear):
        with torch.enable_grad():
            leaf = slacks.detach().requires_grad_(True)
            h = self.values(leaf, fixed.detach())
            value = omega.detach() * h[0] + lam.detach() @ h[1:]
            (g,) = torch.autograd.grad(value, leaf)
        return grad + torch.nan_to_num(g, nan=0.0, posinf=1e6, neginf=-1e6)

    def best_response(self, omega: torch.Tensor, lam: torch.Tensor, pull: torch.Tensor,
                      slacks: torch.Tensor, fixed: torch.Tensor, steps: int) -> torch.Tensor:
        """``slacks`` with every ψ slack at ``argmin_ξ L`` given the linear term ``pull``."""
        parts = []
        for n, t in self.br_terms:
            weight = omega if t.row < 0 else lam[t.row]
            idx = getattr(self, f"idx_{n}")
            xi = psi_linear_argmin(t.psi, weight * t.coefficient, pull[idx],
                                   fixed={i: fixed[fi] for i, fi in t.fixed.items()},
                                   steps=steps)
            parts.append(xi)
        return slacks.index_copy(0, self.slack_index, torch.cat(parts).to(slacks.dtype))

    def leader(self, affine: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor | None:
        """``argmax_λ min_ξ L`` in closed form for (P1) — every row a ψ slack row of the
        objective: at ``ξ = args`` stationarity gives ``λ_row = max(σ·∂(cψ)/∂ξ, 0)`` with the
        arguments read off the rows' R-parts (``arg = σ·affine``). ``None`` for other shapes."""
        if not self.p1_leader:
            return None
        grads = []
        for n, t in enumerate(self.terms):
            first = getattr(self, f"leader_first_{n}")         # [free] row of each argument
            sign = getattr(self, f"leader_first_sign_{n}")
            lo, hi = getattr(self, f"leader_lo_{n}"), getattr(self, f"leader_hi_{n}")
            with torch.enable_grad():
                # Inside ψ's domain (a surrogate-payoff leader may sit outside it); a ψ whose
                # gradient blows up at the boundary is then capped by the projection on Λ.
                x = torch.minimum(torch.maximum(sign * affine[first], lo), hi).detach()
                x.requires_grad_(True)
                args: list[torch.Tensor] = [x[0]] * t.psi.arity
                for m, i in enumerate(t.free):
                    args[i] = x[m]
                for i, fi in t.fixed.items():
                    args[i] = fixed[fi].detach()
                (grad,) = torch.autograd.grad(t.coefficient * t.psi(*args), x)
            grads.append(torch.nan_to_num(grad, nan=0.0, posinf=1e6, neginf=-1e6))
        g = torch.cat(grads)[self.leader_arg]
        return torch.zeros_like(affine).index_copy(0, self.leader_rows,
                                                   (self.leader_sign * g).clamp_min(0.0))
