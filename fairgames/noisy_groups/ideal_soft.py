"""Paper 004's IDEAL algorithm for soft group assignments: Algorithm 1 (an outer projected
ascent on λ) with Algorithm 3 as θ's best response; its output is a STOCHASTIC classifier.

Notes: ``../shared/notes/paper-004-noisy-groups.md`` §2.3–2.4 (the paper never ran it; every
constant below is this implementation's choice, §5.17). One outer round ``t``:

1. **Algorithm 3** at the multipliers ``λ′ = λ_t``: each constraint row ``j`` has its own
   table ``w_j ∈ 𝒲_Δ`` (the product of simplices ``Σ_j w(j|ŷ,y,k) = 1``, no θ-dependent row;
   §5.6: per-constraint, not the practical algorithm's shared ``W``). The total-probability
   rows of 𝒲(θ) are relaxed by ``τ`` into ``U = 2·m·m̂`` inequalities ``r_u(θ, w_j) ≤ 0`` and
   priced by multipliers ``μ_j ∈ ℳ = {μ ≥ 0, ‖μ‖₁ ≤ R′}``; ``ω = g_j − Σ_u μ_u r_u`` is linear
   in ``μ_j``, so its minimum is closed-form, ``g_j − R′·max(0, max_u r_u)``
   (:func:`mu_minimum`, the notes' [derived] remark). ``Q`` rounds of: the oracle (θ takes
   ``theta_steps`` steps of its own optimizer on the surrogate of ``f + Σ_j λ_j g_j(θ, w_j)``,
   warm-started — the κ of the oracle is what those steps leave), the iterate ``θ^(q)``
   kept, then ``w_j ← Π_{𝒲_Δ}(w_j + η_w ∇_{w_j} ω_j)`` at ``θ^(q)``'s 0/1 cell counts.
2. **Algorithm 1's λ-step**: ``δ_j`` = the mean over the round's ``Q`` iterates of the exact
   worst case ``max_{w ∈ 𝒲(θ)} g_j(θ, w)`` (an LP, :func:`~fairgames.noisy_groups.soft_worst_case`,
   scipy HiGHS on the host, so ``ρ′`` is the LP's tolerance); ``λ ← Π_Λ(λ + η_λ δ)`` with
   ``Λ = {λ ≥ 0, ‖λ‖₁ ≤ R}``.

The output is the uniform mixture of all ``T·Q`` iterates (``θ̄ = (1/T) Σ_t θ̂^(t)``), a
:class:`~fairgames.game.solutions.stochastic.StochasticModel`, evaluated by mixture expectation.

Decisions (θ's gradient): the penalty ``R′·max(0, max_u r_u)`` and ``g_j``'s dependence on
𝒲(θ) read 0/1 cell fractions, piecewise constant in θ, so their θ-gradient is 0 almost
everywhere; the oracle's θ-gradient is the surrogate of ``f + Σ_j λ_j g_j(θ, w_j)`` with
the ``w_j`` fixed. ``w_j`` ascends ``ω_j`` itself, not ``λ_j ω_j``: for ``λ_j > 0`` both
have the same maximisers, and at ``λ_j = 0`` (the start) the scaled step would not move.

This is a host-driven algorithm on the whole training split (full batch), not the minibatch
game: the λ-step reads LP values on the host once per outer round.

Example:
    >>> from fairgames.rates import error_rate, group, true_positive_rate
    >>> from fairgames.game import Problem
    >>> tpr = lambda v: true_positive_rate(group("g", v))
    >>> problem = Problem(error_rate(), [(tpr(v) >= true_positive_rate() - 0.05).named(v)
    ...                                  for v in ("0", "1")])
    >>> gen = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(200, 3, generator=gen), (torch.rand(200, generator=gen) < 0.4).float()
    >>> noisy = torch.randint(0, 2, (200,), generator=gen)
    >>> b = torch.tensor([[0.9, 0.2], [0.1, 0.8]])
    >>> model = torch.nn.Linear(3, 1)
    >>> ideal = IdealSoftAssignments(problem, model, torch.optim.Adam(model.parameters(), 0.05),
    ...                              x, y, noisy, "g", b, IdealSettings(outer=2, rounds=3))
    >>> ideal.run()
    >>> len(ideal.mixture())                       # T·Q iterates, uniform weights
    6
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fairgames.game.players.base import check_positive_integers
from fairgames.game.problem import Problem
from fairgames.game.projections import project_l1_ball_nonnegative, project_simplices
from fairgames.game.solutions.stochastic import StochasticModel
from fairgames.rates import Batch

from .soft_groups import (
    cell_codes,
    cell_counts,
    cell_fractions,
    check_noise_model,
    initial_assignments,
    memberships,
)
from .soft_rates import CellRates
from .soft_worst_case import soft_worst_case


@dataclass(frozen=True)
class IdealSettings:
    """The constants the paper leaves to the implementer (``None``: Theorems 4/5's choice).
    The defaults are ``robust=soft_assignments_ideal``'s; they meet the robust constraint on
    train (docs/noisy_groups.md), where Theorem 4's small-T ``R``, ``η_λ`` do not.

    Attributes:
        outer: ``T``, Algorithm 1's rounds.
        rounds: ``Q``, Algorithm 3's rounds per outer round.
        theta_steps: the oracle's optimizer steps per inner round (its κ).
        tau: ``τ``, the relaxation of 𝒲(θ)'s total-probability rows.
        penalty_radius: ``R′``; ``None``: ``B′/τ`` (Lemma 6: ``W = b`` meets every relaxed
            row with margin ``τ``, the Slater γ; ``B′`` the largest ``|g_j|`` over rates in
            [0, 1]).
        w_lr: ``η_w``, the step of every ``w_j``.
        multiplier_lr: ``η_λ``; ``None``: ``R/(B_λ √T)`` (Theorem 4; ``B_λ`` bounds ``‖δ‖₂``).
            Default 5: that form with the size of ``‖δ‖₂`` a run meets (≈ 0.6, gaps between
            rates) in place of the bound over all rates (≈ 2.9 for two TPR rows).
        radius: ``R`` of Λ; ``None``: ``T^{1/4}`` (Theorem 4). Default 20: Λ must hold the
            equilibrium multipliers, ``‖λ*‖₁ ≤ B_f/γ`` = 1/0.05 for an error objective and a
            Slater margin γ = 0.05 (the all-positive classifier meets each TPR row by its
            tolerance).

    Example:
        >>> s = IdealSettings()
        >>> (s.outer, s.rounds, s.theta_steps, s.tau, s.w_lr, s.multiplier_lr, s.radius)
        (50, 5, 10, 0.05, 0.01, 5.0, 20.0)
    """

    outer: int = 50
    rounds: int = 5
    theta_steps: int = 10
    tau: float = 0.05
    penalty_radius: float | None = None
    w_lr: float = 0.01
    multiplier_lr: float | None = 5.0
    radius: float | None = 20.0

    def __post_init__(self) -> None:
        check_positive_integers(outer=self.outer, rounds=self.rounds,
                                theta_steps=self.theta_steps)
        for key in ("tau", "w_lr", "penalty_radius", "multiplier_lr", "radius"):
            value = getattr(self, key)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{key} must be positive, got {value!r}")


def mu_minimum(g: torch.Tensor, r: torch.Tensor, radius: float) -> torch.Tensor:
    """``min_{μ ≥ 0, ‖μ‖₁ ≤ radius} g − ⟨μ, r⟩ = g − radius·max(0, max_u r_u)`` per leading
    index (``g [...]``, ``r [..., U]``): a linear function's minimum over ℳ is at a vertex,
    ``0`` or ``radius·e_u``.

    Example:
        >>> mu_minimum(torch.tensor([0.3, 0.3]), torch.tensor([[-0.1, 0.2], [-0.1, -0.2]]), 10.0)
        tensor([-1.7000,  0.3000])
    """
    return g - radius * r.amax(-1).clamp_min(0.0)


def relaxed_rows(w: torch.Tensor, v: torch.Tensor, b: torch.Tensor, tau: float
                 ) -> torch.Tensor:
    """The ``U = 2·m·m̂`` relaxed rows ``±(Σ_c v[k,c]·w[k,c,j] − b[j,k]) − τ`` of ``w
    [..., m̂, 4, m]`` flattened ``[..., U]``; a noisy group without examples (``v[k] = 0``,
    no total-probability row in 𝒲) gets ``−inf`` rows.

    Example:
        >>> b = torch.tensor([[0.7], [0.3]])
        >>> v = torch.tensor([[0.25, 0.25, 0.25, 0.25]])
        >>> [round(r, 4) for r in relaxed_rows(initial_assignments(b), v, b, 0.1).tolist()]
        [-0.1, -0.1, -0.1, -0.1]
    """
    s = (w * v[:, :, None]).sum(-2) - b.t()                     # [..., m̂, m]
    rows = torch.stack([s, -s], -1) - tau                       # [..., m̂, m, 2]
    present = (v.sum(1) > 0)[:, None, None]
    rows = torch.where(present, rows, torch.full_like(rows, -math.inf))
    return rows.flatten(-3)


class IdealSoftAssignments:
    """Algorithms 1 and 3 of paper 004 on one full training batch (see the module docstring).

    Args:
        problem: an affine problem whose constraints read ``attribute`` as the TRUE groups.
        model: θ, trained in place (its state after the last inner round is the last member).
        optimizer: θ's optimizer (the oracle's steps; its state persists across rounds).
        features, labels: the training rows.
        noisy: the training rows' noisy group codes ``Ĝ`` ``[N]``.
        attribute: the group attribute the problem reads (values ``true_values``).
        p_true_given_noisy: ``b [m, m̂]``, ``P(G = j | Ĝ = k)``.
        settings: :class:`IdealSettings`.
        true_values: names of the true groups (default ``"0"``, ``"1"``, ...).
    """

    def __init__(self, problem: Problem, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, features: torch.Tensor,
                 labels: torch.Tensor, noisy: torch.Tensor, attribute: str,
                 p_true_given_noisy: torch.Tensor, settings: IdealSettings,
                 true_values: Sequence[str] | None = None) -> None:
        b = check_noise_model(p_true_given_noisy)
        self.terms = problem.compile()
        if not self.terms.affine_only or self.terms.num_slacks:
            raise ValueError("the ideal soft-assignment algorithm plays problems linear in the "
                             "rates (equal opportunity, equalized odds); this one has ψ or "
                             "ratio terms")
        self.m, self.m_hat = int(b.shape[0]), int(b.shape[1])
        self.names = ([str(v) for v in true_values] if true_values is not None
                      else [str(j) for j in range(self.m)])
        if int(noisy.max()) >= self.m_hat or int(noisy.min()) < 0:
            raise ValueError(f"noisy codes must lie in [0, {self.m_hat}) (the noise model's "
                             "columns)")
        self.problem, self.model, self.optimizer = problem, model, optimizer
        self.features, self.labels, self.noisy = features, labels.float(), noisy.long()
        self.attribute, self.settings = attribute, settings
        dev = features.device
        self.b64 = b
        self.b = b.to(dev, torch.float32)
        self.cells = CellRates(problem, attribute, self.names, self.m_hat, device=dev)
        self.host_cells = CellRates(problem, attribute, self.names, self.m_hat)  # for the LP
        self.evaluator = problem.make_evaluator().to(dev)
        self.rows = int(self.terms.a.shape[0])
        a, d = self.terms.a.double().cpu(), self.terms.d.double().cpu()
        bound = a.abs().sum(1) + d.abs()                 # |g_j| over rates in [0, 1]
        self.radius = (settings.radius if settings.radius is not None
                       else settings.outer ** 0.25)
        self.multiplier_lr = (settings.multiplier_lr if settings.multiplier_lr is not None
                              else self.radius / (float(bound.norm()) * math.sqrt(settings.outer)))
        self.penalty_radius = (settings.penalty_radius if settings.penalty_radius is not None
                               else float(bound.max()) / settings.tau)
        self.row_a = self.terms.a.to(dev, torch.float32)
        self.lam = torch.zeros(self.rows, dtype=torch.float64)
        self.w = initial_assignments(self.b)[None].repeat(self.rows, 1, 1, 1)  # [M, m̂, 4, m]
        self.t = 0
        self.members: list[torch.Tensor] = []            # flat θ^(q), in play order
        self.deltas: list[list[float]] = []              # δ^(t) per outer round
        self.lambdas: list[list[float]] = []             # λ^(t) played in round t

    # ------------------------------------------------------------------ the pieces
    def scores(self) -> torch.Tensor:
        return self.model(self.features).reshape(-1)

    def counts(self, scores: torch.Tensor) -> torch.Tensor:
        """The cell counts ``[m̂, 4]`` of the predictions ``1[s > 0]``."""
        return cell_counts(cell_codes(self.noisy, scores, self.labels), self.m_hat)

    def omega_gradient(self, counts: torch.Tensor) -> torch.Tensor:
        """``∇_{w_j} ω_j`` ``[M, m̂, 4, m]`` at cell ``counts``: ``∇g_j`` minus ``R′`` times the
        most violated relaxed row's gradient (where one is violated)."""
        v = cell_fractions(counts)
        grads = []
        for j in range(self.rows):
            wj = self.w[j]
            grad = self.cells.gradient(self.row_a[j], counts, wj)
            r = relaxed_rows(wj, v, self.b, self.settings.tau)
            u = int(r.argmax())
            if float(r[u]) > 0:
                k, jj, side = u // (2 * self.m), (u // 2) % self.m, u % 2
                sign = 1.0 if side == 0 else -1.0
                grad[k, :, jj] -= self.penalty_radius * sign * v[k]
            grads.append(grad)
        return torch.stack(grads)

    def _passes(self, lam: list[float]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(leaf costs, memberships [m̂·4, m])`` of each fused pass of the oracle: one per
        row with ``λ_j > 0`` at its own ``w_j``, the objective riding on the first (alone
        when every ``λ_j = 0``). The costs do not depend on θ: made once per oracle call."""
        dev = self.features.device
        empty = torch.zeros(0, device=dev)
        active = [j for j in range(self.rows) if lam[j] > 0] or [0]
        passes = []
        for n, j in enumerate(active):
            lam_j = torch.zeros(self.rows, device=dev)
            lam_j[j] = lam[j]
            omega = torch.tensor(1.0 if n == 0 else 0.0, device=dev)
            passes.append((self.terms.leaf_costs(omega, lam_j, empty),
                           memberships(self.w[j]).reshape(-1, self.m)))
        return passes

    def oracle(self, lam: list[float]) -> None:
        """``theta_steps`` steps of θ's optimizer on the surrogate of ``f + Σ_j λ_j g_j(θ, w_j)``
        (rows with ``λ_j = 0`` skipped)."""
        passes = self._passes(lam)
        for _ in range(self.settings.theta_steps):
            self.optimizer.zero_grad()
            scores = self.scores()
            codes = cell_codes(self.noisy, scores, self.labels)
            loss = torch.zeros((), device=scores.device)
            for costs, member in passes:
                batch = Batch(scores=scores, labels=self.labels,
                              groups={self.attribute: member.index_select(0, codes)},
                              group_values={self.attribute: self.names})
                values = self.evaluator(batch, update=False)
                loss = loss + self.terms.surrogate(costs, values.upper, values.lower)
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad()

    def worst_case(self, counts: torch.Tensor) -> list[float]:
        """``max_{w ∈ 𝒲(θ)} g_j(θ, w)`` per row (the LP; ``nan`` → 0: no denominator)."""
        worst = soft_worst_case(self.problem, counts.double().cpu(), self.b64, self.attribute,
                                self.names, cells=self.host_cells)
        return [0.0 if v != v else float(v) for v in worst.values]

    # ------------------------------------------------------------------ the algorithm
    def outer_step(self) -> None:
        """One round of Algorithm 1 (its θ best response: Algorithm 3's ``Q`` rounds)."""
        lam = self.lam.tolist()
        values = []
        for _ in range(self.settings.rounds):
            self.oracle(lam)
            flat = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach()
            self.members.append(flat.clone())
            with torch.no_grad():
                counts = self.counts(self.scores())
                self.w = project_simplices(self.w + self.settings.w_lr
                                           * self.omega_gradient(counts))
            values.append(self.worst_case(counts))
        delta = torch.tensor(values, dtype=torch.float64).mean(0)
        self.deltas.append(delta.tolist())
        self.lambdas.append(lam)
        self.lam = project_l1_ball_nonnegative(self.lam + self.multiplier_lr * delta,
                                               self.radius)
        self.t += 1

    def run(self) -> None:
        """The remaining outer rounds up to ``settings.outer``."""
        while self.t < self.settings.outer:
            self.outer_step()

    def mixture(self) -> StochasticModel:
        """``θ̄``: the uniform mixture of every inner iterate played so far."""
        if not self.members:
            raise ValueError("no iterate yet: run at least one outer round")
        modules = []
        for flat in self.members:
            module = copy.deepcopy(self.model)
            torch.nn.utils.vector_to_parameters(flat, module.parameters())
            modules.append(module)
        steps = [i + 1 for i in range(len(self.members))]
        return StochasticModel.from_modules(modules, steps=steps)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "lam": self.lam.clone(), "w": self.w.clone(),
                "model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "members": [m.clone() for m in self.members],
                "deltas": [list(d) for d in self.deltas],
                "lambdas": [list(v) for v in self.lambdas]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["w"].shape) != tuple(self.w.shape):
            raise ValueError(f"the checkpoint's assignments have shape "
                             f"{tuple(state['w'].shape)}, this problem's {tuple(self.w.shape)} "
                             "(rows, noisy groups, cells, true groups)")
        self.t = int(state["t"])
        self.lam = state["lam"].clone()
        self.w = state["w"].clone().to(self.w.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.members = [m.clone() for m in state["members"]]
        self.deltas = [list(d) for d in state["deltas"]]
        self.lambdas = [list(v) for v in state["lambdas"]]
