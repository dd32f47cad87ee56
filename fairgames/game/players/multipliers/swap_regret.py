"""The proxy-Lagrangian swap-regret player (Cotter, Jiang & Sridharan, ALT 2019): weights
``(ω, λ)`` on a simplex, the stationary distribution of a multiplicatively updated matrix."""

from __future__ import annotations

from typing import Any

import torch

from ..base import lr_group, step_size
from .base import MULTIPLIER_LR, MultiplierPlayer


class SwapRegret(MultiplierPlayer):
    """The proxy-Lagrangian player of Cotter, Jiang & Sridharan (ALT 2019, Algorithm 2).

    State: a left-stochastic ``(M+1)×(M+1)`` matrix ``Q``, updated multiplicatively by
    ``Q ← Q ⊙ exp(η·Δ·vᵀ)`` and re-normalised column by column, with ``Δ = (0, gain)`` (the
    objective earns nothing) and every entry floored at ``minimum/(M+1)`` (as TFCO does). The
    weights are the stationary distribution ``v = Qv``: ``(ω, λ) = (v_0, v_1..v_M)`` — the
    θ-player minimises ``v_0·f + Σ v_j g̃_j``, so the ratio ``λ_j/ω`` is unbounded and no
    radius κ is needed. The start puts all but ``minimum`` of the mass on the objective.

    ``v`` is computed without a sync (``linalg.solve`` would sync inside its LU solve):
    ``method="tree"`` (the default up to 2 rows, i.e. ``M + 1 <= 3``) uses the Markov chain
    tree theorem, ``v_i ∝ Σ_{trees into i} Π q``: for 3 states
    ``v_i ∝ q_ij·q_ik + q_kj·q_ik + q_jk·q_ij``, a sum of positive products, so exact to float
    precision (no cancellation) in five ops; ``method="squaring"`` takes ``Q^(2^16)·v`` by
    repeated squaring (exact to float precision for any spectral gap above 1e-4; O(M³), the
    default up to 32 rows), ``"power"`` runs a FIXED number of power iterations warm-started at
    the previous ``v`` (O(M²) each; the default beyond 32 rows, where ``v`` is tracked across
    steps as ``Q`` drifts slowly). All three give the same ``v`` to float precision (the
    tests compare them with an eigenvector solve at 1e-7).

    An update writes ``q`` and ``v`` in place (``torch.where`` against the old ones when a step
    is masked), so their storage never moves (a CUDA graph can capture the step); the weights a
    step played are a snapshot (:meth:`weights_snapshot`, one copy of ``v``).
    """

    strategy = "swap_regret"
    lagrangian = False
    has_radius = False
    no_radius_reason = ": its weights live on the simplex (ω, λ), so λ/ω is unbounded"
    config_keys = (MULTIPLIER_LR,)

    def __init__(self, num_rows: int, *, lr: float = 1.0, minimum: float = 1e-3,
                 method: str = "auto", power_iterations: int = 8, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        self.lr = step_size(lr, self.device, "lr", self.dtype)
        if not 0 < minimum < 1:
            raise ValueError(f"minimum must lie in (0, 1), got {minimum}")
        if method not in ("auto", "tree", "power", "squaring"):
            raise ValueError(f"method must be 'auto', 'tree', 'power' or 'squaring', got "
                             f"{method!r}")
        if power_iterations < 1:
            raise ValueError(f"power_iterations must be at least 1, got {power_iterations}")
        n = num_rows + 1
        if method == "tree" and n > 3:
            raise ValueError(f"method='tree' is for at most 2 rows, got {num_rows}")
        self.minimum = float(minimum)
        self.method = method if method != "auto" else (
            "tree" if n <= 3 else "squaring" if n <= 32 else "power")
        # Flat indices of the tree theorem's factors: v_i ∝ Σ_t idx[0, t, i]·idx[1, t, i].
        tree = {2: [[[1, 2]], [[1, 2]]],
                3: [[[1, 3, 6], [7, 6, 3], [5, 2, 1]],     # q_ij, q_kj, q_jk
                    [[2, 5, 7], [2, 5, 7], [1, 3, 6]]]}.get(n)  # q_ik, q_ik, q_ij
        self._tree = (torch.tensor(tree, device=self.device) if tree is not None else None)
        self.power_iterations = int(power_iterations)
        self.floor = minimum / n
        one = 1.0 - minimum * (n - 1) / n
        self.q = torch.full((n, n), self.floor, device=self.device, dtype=self.dtype)
        self.q[0, :] = one
        self.v = torch.full((n,), self.floor, device=self.device, dtype=self.dtype)
        self.v[0] = one
        self.v.copy_(self._stationary(self.q, self.v))
        self._zero = torch.zeros(1, device=self.device, dtype=self.dtype)
        self._split()

    def _split(self) -> None:
        """Views ``(ω, λ)`` of ``v`` (made once: ``v`` is updated in place)."""
        self._weights = (self.v[0], self.v[1:])

    def _stationary(self, q: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        if q.shape[0] == 1:
            return torch.ones_like(start)
        if self.method == "tree":
            assert self._tree is not None
            if self._tree.shape[1] == 1:         # 2 states: v ∝ (q_01, q_10)
                v = torch.take(q, self._tree[0, 0])
            else:
                v = torch.take(q, self._tree).prod(0).sum(0)
        elif self.method == "squaring":
            v = torch.linalg.matrix_power(q, 1 << 16) @ start
        else:
            v = start
            for _ in range(self.power_iterations):
                v = q @ v
        return v / v.sum()

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._weights

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        v = self.v.clone()          # update() writes v in place
        return v[0], v[1:]

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        delta = torch.cat([self._zero, g])
        # η·Δ·vᵀ, with a clamped exponent: a huge gain (a ψ row far off) must not overflow.
        q = torch.addr(self.q, delta * self.lr, self.v, beta=0.0)
        q = q.clamp_(-50.0, 50.0).exp_().mul_(self.q)
        q = q.div_(q.sum(0, keepdim=True)).clamp_min_(self.floor)
        q = q.div_(q.sum(0, keepdim=True))
        v = self._stationary(q, self.v)
        if ok is None:
            self.q.copy_(q)
            self.v.copy_(v)
        else:
            torch.where(ok, q, self.q, out=self.q)      # in place: q is (M + 1) × (M + 1)
            torch.where(ok, v, self.v, out=self.v)

    def saturation(self) -> torch.Tensor:
        return 1.0 - self._weights[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._split()

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {"q": self.q, "v": self.v, "lr": self.lr}
