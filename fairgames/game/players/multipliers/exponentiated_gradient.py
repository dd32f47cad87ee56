"""Exponentiated gradient on ``Λ``: the multipliers as ``κ·softmax`` of a free vector."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..base import lr_group, step_size
from .base import DEFAULT_RADIUS, MULTIPLIER_LR, RADIUS, MultiplierPlayer, commit


class ExponentiatedGradient(MultiplierPlayer):
    """Exponentiated gradient on ``Λ``: ``λ = κ·softmax([θ, 0])[:M]``, ``θ ← θ + η·gain``.

    The implicit last coordinate holds the mass ``κ − ‖λ‖₁`` (as in the reductions of
    Agarwal et al., paper 003). ``initial`` is every multiplier's starting value.
    """

    strategy = "exponentiated_gradient"
    config_keys = (MULTIPLIER_LR, RADIUS)

    def __init__(self, num_rows: int, *, lr: float = 1.0, radius: float = DEFAULT_RADIUS,
                 initial: float = 0.01, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        if not radius > 0:
            raise ValueError(f"radius must be positive, got {radius}")
        if not 0 < initial * max(num_rows, 1) < radius:
            raise ValueError(f"initial multipliers must be positive with a sum below the radius "
                             f"{radius}, got {num_rows} × {initial}")
        self.radius = float(radius)
        self.lr = step_size(lr, self.device, "lr", self.dtype)
        start = math.log(initial / (radius - num_rows * initial))
        self.theta = torch.full((num_rows,), start, device=self.device, dtype=self.dtype)

    def _lam(self, theta: torch.Tensor) -> torch.Tensor:
        z = torch.cat([theta, torch.zeros(1, device=theta.device, dtype=theta.dtype)])
        return self.radius * torch.softmax(z, 0)[:-1]

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self._lam(self.theta)

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weights()      # computed afresh from θ (updated in place) at every call

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        commit(self.theta, self.theta + self.lr * g, ok)

    def saturation(self) -> torch.Tensor:
        return self._lam(self.theta).sum() / self.radius

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {"theta": self.theta, "lr": self.lr}
