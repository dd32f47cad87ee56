"""Follow-the-leader: the best response to the running means of the rows (paper 000
Remark 1's Frank-Wolfe λ-player when the leader has a closed form)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from ...projections import project_l1_ball_nonnegative
from .base import DEFAULT_RADIUS, RADIUS, DualContext, MultiplierPlayer, commit

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ...round import Round


class FollowTheLeader(MultiplierPlayer):
    """Follow-the-leader: ``λ_{t+1} = argmax_{λ∈Λ} Σ_{s≤t} min_ξ L(θ_s, ξ, λ)``.

    The payoff is linear in the rates, so the leader is the best response to the running mean
    of the rows' R-parts. Without slacks that is the vertex ``κ·e_j`` of the most violated row
    (or 0 when none is violated). With ψ slacks ``min_ξ L`` is concave in λ and the argmax is
    found by ``inner_steps`` projected subgradient ascent steps of length ``inner_lr/√k``,
    warm-started at the current λ, whose iterates are averaged — unless the context gives the
    leader in closed form: for (P1) it is ``∇(cψ)`` at the mean rates, i.e. Frank-Wolfe's
    linearisation point (paper 000 Remark 1, the Frank-Wolfe / NEMSIS λ-player of Table 2).
    """

    strategy = "follow_the_leader"
    has_lr = False
    config_keys = (RADIUS,)

    def __init__(self, num_rows: int, *, radius: float = DEFAULT_RADIUS, inner_steps: int = 100,
                 inner_lr: float = 1.0, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        if not radius > 0:
            raise ValueError(f"radius must be positive, got {radius}")
        self.radius = float(radius)
        self.inner_steps = int(inner_steps)
        self.inner_lr = float(inner_lr)
        self.lam = torch.zeros(num_rows, device=self.device, dtype=self.dtype)
        self.total = torch.zeros(num_rows, device=self.device, dtype=self.dtype)
        self.fixed_total: torch.Tensor | None = None
        self.count = torch.zeros((), device=self.device, dtype=self.dtype)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self.lam

    def bind(self, game: Any) -> None:
        super().bind(game)
        if game.terms.has_ratios or game.terms.num_linear:
            raise ValueError("follow-the-leader λ plays the best response to the running mean "
                             "of the rows, which ratio terms do not have (they are not linear "
                             "in the rates); use gradient_ascent or swap_regret for ratio terms")

    def play(self, round: Round) -> None:
        """The leader of the running means of the round's rows (its payoff's) and ``φ``."""
        self.follow(round.dual_context(self.payoff), ok=round.ok)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        raise TypeError("follow-the-leader plays from the rows' rate parts, not a gain: call "
                        "follow(context, ok=) (the optimizer does, through play(round))")

    def follow(self, context: DualContext, *, ok: torch.Tensor | None = None) -> None:
        """Add this step's rows to the running means and move to their leader."""
        u = context.affine.detach().to(self.device, self.dtype)
        phi = context.fixed.detach().to(self.device, self.dtype)
        if self.fixed_total is None or self.fixed_total.shape != phi.shape:
            self.fixed_total = torch.zeros_like(phi)
        commit(self.total, self.total + u, ok)
        commit(self.fixed_total, self.fixed_total + phi, ok)
        commit(self.count, self.count + 1.0, ok)
        if self.num_rows == 0:
            return
        mean_u = self.total / self.count.clamp_min(1.0)
        mean_phi = self.fixed_total / self.count.clamp_min(1.0)
        if not context.has_slacks:
            best, j = mean_u.max(0)
            vertex = torch.zeros_like(mean_u).scatter(0, j.reshape(1), self.radius)
            new = torch.where(best > 0, vertex, torch.zeros_like(mean_u))
        else:
            exact = (context.leader(mean_u, mean_phi) if context.leader is not None else None)
            if exact is not None:
                commit(self.lam, project_l1_ball_nonnegative(exact, self.radius), ok)
                return
            # Projected subgradient ascent on the concave dual min_ξ L(·, λ); the average of
            # its iterates converges (the last one need not).
            lam = self.lam.clone()
            new = torch.zeros_like(lam)
            for k in range(1, self.inner_steps + 1):
                step = context.gain_at(lam, mean_u, mean_phi)
                lam = project_l1_ball_nonnegative(lam + self.inner_lr / math.sqrt(k) * step,
                                                  self.radius)
                new = new + (lam - new) / k
        commit(self.lam, new, ok)

    def saturation(self) -> torch.Tensor:
        return self.lam.sum() / self.radius

    def _tensors(self) -> dict[str, torch.Tensor]:
        out = {"lam": self.lam, "total": self.total, "count": self.count}
        if self.fixed_total is not None:
            out["fixed_total"] = self.fixed_total
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "fixed_total" in state and self.fixed_total is None:
            self.fixed_total = torch.zeros_like(state["fixed_total"], device=self.device,
                                                dtype=self.dtype)
        super().load_state_dict(state)
