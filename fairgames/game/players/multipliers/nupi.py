"""νPI, the PI controller of Sohrabi et al. (ICML 2024) as a ``torch.optim`` optimizer for the
gradient-ascent λ-player (``multiplier_optimizer="nupi"``), written to damp the oscillation of
the multipliers; with ``kp = ki = 1, nu = 0`` it is the optimistic gradient method.

The rule (their Algorithm 1, ascent on the error ``e_t = ∂L/∂λ``, "SGD initialisation" as
cooper-optim 1.0.1's ``nuPI`` plays it)::

    λ_{t+1} = λ_t + η·(κ_i·e_t + κ_p·(1 − ν)·(e_t − ξ_{t−1}))     (t ≥ 1)
    ξ_t     = ν·ξ_{t−1} + (1 − ν)·e_t                               (t ≥ 1)
    λ_1 = λ_0 + η·κ_i·e_0, ξ_0 = 0                                  (the first step is SGD's)

(cooper stores ``ξ_0 = 0``, not ``e_0``, so its second step's proportional term is
``κ_p(1 − ν)·e_1``; this optimizer matches it, tested against cooper to 1e-6.) The gradient-ascent
player projects λ on Λ after each step, as cooper projects on λ ≥ 0.

Unlike cooper's, no step branches on a tensor value: the state (``xi`` and a 0/1 ``started``
flag) is allocated at construction and the first step is a ``torch.where`` — no host-device
sync, and the player's masked step (``ok``) can restore it.

Example:
    >>> lam = torch.nn.Parameter(torch.zeros(1))
    >>> opt = NuPI([lam], lr=1.0, kp=1.0, ki=1.0, nu=0.0, maximize=True)
    >>> for e in (1.0, 1.0, 0.0):
    ...     lam.grad = torch.tensor([e]); opt.step()
    >>> lam.tolist()       # 1·1; + (1 + (1 − 0)); + (0 + (0 − 1)): optimistic from step 2
    [2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..keys import ConfigKey, at_least


def _ema(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "expected a number"
    return None if 0 <= value < 1 else "must lie in [0, 1)"


NUPI_KP = ConfigKey("nupi_kp", float, None, "κ_p, νPI's proportional gain (null: 0, plain "
                    "SGD with kp=0, ki=1; 1 with nupi_ki=1, nupi_nu=0 is optimistic λ)",
                    at_least(0), argument="kp")
NUPI_KI = ConfigKey("nupi_ki", float, None, "κ_i, νPI's integral gain (null: 1)",
                    at_least(0), argument="ki")
NUPI_NU = ConfigKey("nupi_nu", float, None, "ν, νPI's EMA coefficient of the error (null: 0)",
                    _ema, argument="nu")
NUPI_KEYS = (NUPI_KP, NUPI_KI, NUPI_NU)


class NuPI(torch.optim.Optimizer):
    """νPI (see the module docstring): ``lr`` η, gains ``kp`` κ_p and ``ki`` κ_i, EMA ``nu``
    ν; ``maximize=True`` ascends (the λ-player's use)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, *, kp: float = 0.0,
                 ki: float = 1.0, nu: float = 0.0, maximize: bool = False) -> None:
        for name, value, check in (("kp", kp, at_least(0)), ("ki", ki, at_least(0)),
                                   ("nu", nu, _ema)):
            problem = check(value)
            if problem is not None:
                raise ValueError(f"νPI's {name} {problem}, got {value!r}")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        super().__init__(params, {"lr": lr, "kp": float(kp), "ki": float(ki), "nu": float(nu),
                                  "maximize": maximize})
        for group in self.param_groups:      # eager state: a masked step can restore it
            for p in group["params"]:
                self.state[p] = {"xi": torch.zeros_like(p.detach()),
                                 "started": torch.zeros((), device=p.device, dtype=p.dtype)}

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            kp, ki, nu = group["kp"], group["ki"], group["nu"]
            sign = 1.0 if group["maximize"] else -1.0
            for p in group["params"]:
                if p.grad is None:
                    continue
                state, e = self.state[p], p.grad.detach()
                xi, started = state["xi"], state["started"]
                # κ_i·e_t + κ_p(1 − ν)(e_t − ξ_{t−1}), the P-term from the second step on
                update = ki * e + started * (kp * (1.0 - nu)) * (e - xi)
                p.add_(update * (sign * group["lr"]))
                xi.copy_(torch.where(started > 0, nu * xi + (1.0 - nu) * e, xi))
                started.fill_(1.0)
        return loss
