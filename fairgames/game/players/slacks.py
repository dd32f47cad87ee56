"""The slack players: ξ for ψ terms (P1, P2) and the slacks of ratio terms (P3).

* ψ slacks play their **best response** ``ξ = argmin_ξ L(ξ; λ) = ∇ψ*(·)`` (paper 000 Lemma 1;
  closed forms for G-mean, H-mean, Q-mean and KLD, a fixed-step box solve otherwise — see
  :mod:`fairgames.game.conjugates`), or **OGD** (``psi="gradient"``).
* ratio slacks — the numerator and denominator slacks ``a, b`` of ``c·a/b`` (paper 000
  Algorithm 3, ``ratios="num_den"``) or the single slack ``z`` (``ratios="gradient"``) — play
  projected **OGD** in their box: ``s ← Π(s − η·∂L/∂s)``. ``a/b`` is not convex, so these are
  never best-responded, whatever ``psi`` says.

The slacks start at the rates they stand for (the first step's true values, clamped to the
box) — a device-side flag, so resuming from a checkpoint and the first step need no host
branch on a tensor. Every update is masked by ``ok`` (a skipped AMP step leaves no trace).

As a :class:`~fairgames.game.players.base.Player` (name ``"slacks"``, order 10: before the
multipliers, whose gain is read at the slacks played) it ``provides`` the ``"slacks"`` view
(:meth:`SlackPlayer.current`, read by the θ-player's leaf costs of ratio rows) and exposes its
OGD step ``lr`` as a parameter group.

Example:
    >>> import torch
    >>> from fairgames.rates import gmean
    >>> from fairgames.game import Problem
    >>> terms = Problem(1.0 - gmean()).terms
    >>> player = SlackPlayer(terms)
    >>> lam = torch.tensor([0.3, 0.3])          # multipliers of TPR ≤ ξ₁, TNR ≤ ξ₂
    >>> xi = player.respond(torch.tensor(1.0), lam, torch.zeros(0), torch.tensor([0.6, 0.8]),
    ...                     torch.zeros(0))
    >>> [round(v, 3) for v in xi.tolist()]       # argmin −√(ξ₁ξ₂) + 0.3ξ₁ + 0.3ξ₂ on [0,1]²
    [1.0, 1.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..lagrangian import LagrangianTerms
from .base import Player, lr_group, step_size
from .keys import ConfigKey, positive

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..round import Round

PSI_STRATEGIES = ("best_response", "gradient")
RATIO_STRATEGIES = ("gradient",)   # slack-played ratios; "linearize" needs no slack


class SlackPlayer(Player):
    """Plays every slack of a compiled problem (see the module docstring).

    Args:
        terms: the compiled Lagrangian (on the device the slacks should live on).
        psi: ``"best_response"`` (default) or ``"gradient"`` for ψ slacks.
        ratio: ``"gradient"`` (projected OGD, Algorithm 3) for ratio slacks (``a, b`` or ``z``).
        lr: OGD step length.
        psi_steps: inner steps of the generic (non closed-form) best response.
    """

    name = "slacks"
    order = 10
    provides = ("slacks",)
    config_keys = (
        ConfigKey("slack_lr", float, 0.05, "the OGD step of gradient-played slacks",
                  positive(), argument="lr"),
        ConfigKey("psi_steps", int, 100, "inner steps of a ψ best response without a closed "
                  "form", positive(integer=True)))

    def __init__(self, terms: LagrangianTerms, *, psi: str = "best_response",
                 ratio: str = "gradient", lr: float = 0.05, psi_steps: int = 100) -> None:
        if psi not in PSI_STRATEGIES:
            raise ValueError(f"psi slack strategy must be one of {PSI_STRATEGIES}, got {psi!r}")
        if ratio not in RATIO_STRATEGIES:
            raise ValueError(f"ratio slack strategy must be one of {RATIO_STRATEGIES}, got "
                             f"{ratio!r} (a slack-played ratio has no best response inside its "
                             "box: L is linear in z and not convex in (a, b); use "
                             "ratios='linearize' in the preset for a slack-free ratio)")
        dev = terms.slack_lo.device
        self.terms, self.psi, self.ratio = terms, psi, ratio
        self.lr = step_size(lr, dev, "slack lr", terms.slack_lo.dtype)
        self.psi_steps = int(psi_steps)
        self.slacks = 0.5 * (terms.slack_lo + terms.slack_hi.clamp_max(1e6))
        self.started = torch.zeros((), dtype=torch.bool, device=dev)
        # Which slacks move by gradient steps (ratio always; ψ only with psi="gradient").
        kinds = terms.slack_kinds
        self.gradient_mask = torch.tensor(
            [1.0 if (k == "ratio" or psi == "gradient") else 0.0 for k in kinds],
            device=dev, dtype=self.slacks.dtype)

    def current(self, leaves: torch.Tensor) -> torch.Tensor:
        """``s_t``: the stored slacks, or their start at these true rates before the first step."""
        return torch.where(self.started, self.slacks, self.terms.initial_slacks(leaves))

    def bind(self, game: Any) -> None:
        if game.terms.slack_names != self.terms.slack_names:
            raise ValueError(f"the slack player plays {self.terms.slack_names}, the problem has "
                             f"{game.terms.slack_names}")

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def play(self, round: Round) -> None:
        """Publish the slacks ``s_t`` of this round and store ``s_{t+1}``."""
        rec = round.record
        round.slacks = self.respond(round.omega, round.lam, round.fixed, rec.leaves,
                                    rec.bilinear_true, round.ok)

    def respond(self, omega: torch.Tensor, lam: torch.Tensor, fixed: torch.Tensor,
                leaves: torch.Tensor, bilinear: torch.Tensor,
                ok: torch.Tensor | None = None) -> torch.Tensor:
        """One round: returns the slacks ``s_t`` the other players see this step and stores
        ``s_{t+1}`` (best responses to ``λ_t``; OGD from ``s_t``). ``bilinear`` are the ratio
        rows' ``⟨u, R⟩ + u0`` at this step's true rates."""
        t = self.terms
        used = self.current(leaves)
        if t.has_psi and self.psi == "best_response":
            used = t.psi_best_response(omega, lam, used, fixed, steps=self.psi_steps)
        new = used
        if t.has_ratios or self.psi == "gradient":
            grad = t.slack_gradient(omega, lam, used, fixed, bilinear)
            new = t.project_slacks(used - self.lr * self.gradient_mask * grad)
        with torch.no_grad():
            if ok is None:
                self.slacks.copy_(new)
                self.started.fill_(True)
            else:
                torch.where(ok, new, self.slacks, out=self.slacks)
                self.started.copy_(self.started | ok)
        return used

    def state_dict(self) -> dict[str, Any]:
        return {"slacks": self.slacks.clone(), "started": self.started.clone(),
                "lr": self.lr.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["slacks"].shape) != tuple(self.slacks.shape):
            raise ValueError(f"the checkpoint has {state['slacks'].shape[0]} slacks, this "
                             f"problem {self.slacks.shape[0]}")
        self.slacks.copy_(state["slacks"].to(self.slacks.device, self.slacks.dtype))
        self.started.copy_(state["started"].to(self.started.device))
        self.lr.copy_(state["lr"])
