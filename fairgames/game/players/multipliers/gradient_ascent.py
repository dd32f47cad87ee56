"""Projected gradient ascent on ``Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}``, plain OGD or through a torch
optimizer (:data:`MULTIPLIER_OPTIMIZERS`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from ...projections import project_l1_ball_nonnegative
from ..base import lr_group, step_size
from ..keys import ConfigKey, one_of
from .base import DEFAULT_RADIUS, MULTIPLIER_LR, RADIUS, MultiplierPlayer, commit
from .nupi import NUPI_KEYS, NuPI

MULTIPLIER_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad,
    "nupi": NuPI}
"""The torch optimizers a :class:`GradientAscent` player can step with, by config name."""

MULTIPLIER_OPTIMIZER = ConfigKey(
    "multiplier_optimizer", str, None,
    "a torch optimizer (sgd, adam, adagrad, nupi) stepping the gradient-ascent λ-player, "
    "projected on Λ (TFCO's constraint_optimizer; nupi: Sohrabi et al. 2024's PI controller, "
    "algorithm.nupi_kp / nupi_ki / nupi_nu); null: plain projected OGD",
    one_of(MULTIPLIER_OPTIMIZERS), argument="optimizer", convert=MULTIPLIER_OPTIMIZERS.get)


class GradientAscent(MultiplierPlayer):
    """Projected gradient ascent ``λ ← Π_Λ(λ + η·gain)`` with ``Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}``.

    ``optimizer`` may be any ``torch.optim.Optimizer`` class (built with ``lr`` and
    ``maximize=True``) or a factory ``params -> optimizer`` that sets ``maximize=True``; the
    default is plain OGD ``λ + η·gain`` (paper 000 Algorithms 1–3), done in place. The
    projection is the exact Euclidean one (sort-based, no sync). Note: torch's Adam/Adagrad
    read their step counter on the host (a CPU tensor, so no device wait on a GPU, but the
    CPU guard flags it). ``optimizer=NuPI`` (``"nupi"``) takes the gains ``kp``, ``ki`` and
    the EMA ``nu`` (:mod:`~fairgames.game.players.multipliers.nupi`; sync-free).
    """

    strategy = "gradient_ascent"
    config_keys = (MULTIPLIER_OPTIMIZER, MULTIPLIER_LR, RADIUS, *NUPI_KEYS)

    def __init__(self, num_rows: int, *, lr: float = 0.5, radius: float = DEFAULT_RADIUS,
                 optimizer: type[torch.optim.Optimizer] | Callable[..., torch.optim.Optimizer]
                 | None = None, initial: float = 0.0, kp: float | None = None,
                 ki: float | None = None, nu: float | None = None, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        gains = {k: v for k, v in (("kp", kp), ("ki", ki), ("nu", nu)) if v is not None}
        if gains and optimizer is not NuPI:
            raise ValueError(f"{sorted(gains)} are the gains of the νPI multiplier optimizer: "
                             "pass optimizer=NuPI (algorithm.multiplier_optimizer=nupi) or drop "
                             "them (algorithm.nupi_kp / nupi_ki / nupi_nu=null)")
        if not radius > 0:
            raise ValueError(f"radius must be positive, got {radius}")
        self.radius = float(radius)
        self.lr = step_size(lr, self.device, "lr", self.dtype)
        self.lam = torch.nn.Parameter(project_l1_ball_nonnegative(
            torch.full((num_rows,), float(initial), device=self.device, dtype=self.dtype),
            self.radius), requires_grad=False)
        self._lam = self.lam.data      # the same storage, without a detach per access
        self.optimizer: torch.optim.Optimizer | None = None
        if optimizer is None:
            pass      # plain OGD λ + η·gain, without torch.optim's per-step overhead
        elif isinstance(optimizer, type):
            self.optimizer = optimizer([self.lam], lr=lr, maximize=True, **gains)
        else:
            self.optimizer = optimizer([self.lam])
        if self.optimizer is not None and not all(
                g.get("maximize", False) for g in self.optimizer.param_groups):
            raise ValueError("the multiplier optimizer must ascend: build it with maximize=True")

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self._lam

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self._lam.clone()     # ω is the constant 1

    def param_groups(self) -> list[dict[str, Any]]:
        if self.optimizer is None:
            return [lr_group(self, self.lr)]
        for group in self.optimizer.param_groups:   # the inner optimizer's own groups
            group["player"] = self.name
        return list(self.optimizer.param_groups)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        if self.num_rows == 0:
            return
        if self.optimizer is None:
            # λ + η·g (one fused multiply-add, as torch.add(λ, g, alpha=η))
            new = project_l1_ball_nonnegative(torch.addcmul(self._lam, g, self.lr),
                                              self.radius)
            commit(self._lam, new, ok)
            return
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        if ok is not None:
            saved = [(t, t.detach().clone()) for t in self._optimizer_tensors()]
        self.lam.grad = g.clone()
        self.optimizer.step()
        self.lam.grad = None
        with torch.no_grad():
            self.lam.copy_(project_l1_ball_nonnegative(self.lam, self.radius))
            for t, old in saved:
                torch.where(ok, t, old, out=t)   # the skipped step leaves no trace

    def _optimizer_tensors(self) -> list[torch.Tensor]:
        out = [self.lam.data]
        assert self.optimizer is not None
        for v in self.optimizer.state.get(self.lam, {}).values():
            if isinstance(v, torch.Tensor):
                out.append(v)
        return out

    def saturation(self) -> torch.Tensor:
        return self._lam.sum() / self.radius

    def _tensors(self) -> dict[str, torch.Tensor]:
        # With a torch optimizer the step size lives in its parameter group (its state).
        return {"lam": self._lam} if self.optimizer is not None else {
            "lam": self._lam, "lr": self.lr}

    def state_dict(self) -> dict[str, Any]:
        # A deep copy: torch's optimizer state_dict aliases the live state tensors.
        opt = copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None
        return {**super().state_dict(), "optimizer": opt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict({k: state[k] for k in self._tensors()})
        if self.optimizer is not None:
            if state.get("optimizer") is None:
                raise ValueError("the checkpoint has no multiplier optimizer state")
            self.optimizer.load_state_dict(state["optimizer"])
