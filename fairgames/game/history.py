"""Per-step records for logging, and the device-side infeasibility monitor.

A :class:`StepRecord` holds detached device tensors (no host copy is made per step); a logger
reads them at its own interval. The :class:`InfeasibilityMonitor` keeps exponential moving
averages of the largest true violation (a fast and a slow one) and of the multiplier player's
saturation (``‖λ‖₁/κ``, or ``1 − ω`` for the proxy-Lagrangian) on the device; the verdict is
read — with one sync — only when asked.

Example:
    >>> import torch
    >>> m = InfeasibilityMonitor(min_steps=5)
    >>> for _ in range(50):
    ...     m.update(torch.tensor(0.2), torch.tensor(1.0))
    >>> m.likely_infeasible()
    True
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class StepRecord:
    """One game step's values (device tensors, detached).

    Attributes:
        step: the step's index (0-based).
        objective_true: the original objective at the batch's true rates (plus nothing of
            the loss, which has no true counterpart).
        objective_surrogate: the θ-player's loss (surrogate Lagrangian, loss included).
        constraints_true: ``[C]`` original constraint values ``g`` (violations are ``> 0``).
        rows_true, rows_surrogate: ``[M]`` every multiplier row's value with true / surrogate
            rates at the slacks played this step (the multipliers' gain under each payoff).
        objective_weight: ``ω`` (1 for Lagrangian players).
        multipliers: ``[M]`` λ used this step.
        slacks: ``[S]`` slacks played this step.
        leaves_true: ``[K]`` the batch's true leaf values (in ``problem.leaves`` order).
        empty_subsets: the number of the evaluator's subsets with no weight in the batch
            (averaged over the step's batches; their leaves read running estimates, see
            :class:`~fairgames.rates.RateEvaluator`), or ``None`` when not known.
    """

    step: int
    objective_true: torch.Tensor
    objective_surrogate: torch.Tensor
    constraints_true: torch.Tensor
    rows_true: torch.Tensor
    rows_surrogate: torch.Tensor
    objective_weight: torch.Tensor
    multipliers: torch.Tensor
    slacks: torch.Tensor
    leaves_true: torch.Tensor
    empty_subsets: torch.Tensor | None = None

    def to_host(self) -> dict[str, Any]:
        """Plain Python values (syncs: call at logging intervals only)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.detach().cpu().tolist() if isinstance(v, torch.Tensor) else v
        return out


class InfeasibilityMonitor:
    """Running statistics behind :meth:`ConstrainedOptimizer.likely_infeasible`.

    The problem is reported likely infeasible when, after ``min_steps`` steps, the player's
    saturation average is at least ``saturation``, the fast average of the largest violation
    exceeds ``tolerance``, and it is not shrinking (fast average ≥ ``1 − shrink`` × slow).
    """

    def __init__(self, *, device: torch.device | str | None = None, fast: float = 0.9,
                 slow: float = 0.99, min_steps: int = 200, saturation: float = 0.95,
                 tolerance: float = 0.01, shrink: float = 0.1) -> None:
        self.fast, self.slow = float(fast), float(slow)
        self.min_steps, self.saturation_level = int(min_steps), float(saturation)
        self.tolerance, self.shrink = float(tolerance), float(shrink)
        # One vector, updated as state·decay + (1 − decay)·x in two ops per step:
        # [violation (fast), violation (slow), saturation (slow), fast^t, slow^t, steps].
        self.decay = torch.tensor([fast, slow, slow, fast, slow, 1.0], dtype=torch.float64,
                                  device=device)
        self.gain = torch.tensor([1 - fast, 1 - slow, 1 - slow, 0.0, 0.0, 1.0],
                                 dtype=torch.float64, device=device)
        self.state = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64,
                                  device=device)
        self._one = torch.ones((), dtype=torch.float64, device=device)
        self._ones: dict[torch.dtype, torch.Tensor] = {torch.float64: self._one}

    def update(self, violation: torch.Tensor, saturation: torch.Tensor,
               ok: torch.Tensor | None = None) -> None:
        """Fold in one step's largest violation and saturation (device scalars; no sync)."""
        dtype = violation.dtype
        one = self._ones.get(dtype)
        if one is None:
            one = self._ones[dtype] = self._one.to(dtype)
        sat = saturation if saturation.dtype == dtype else saturation.to(dtype)
        # Stacked in the inputs' dtype; addcmul promotes to float64 exactly.
        x = torch.stack([violation, violation, sat, one, one, one])
        if ok is None:
            self.state.mul_(self.decay).addcmul_(self.gain, x)
        else:
            new = torch.addcmul(self.state * self.decay, self.gain, x)
            torch.where(ok, new, self.state, out=self.state)

    def summary(self) -> dict[str, float]:
        """Bias-corrected averages as floats (syncs)."""
        vf, vs, sat, pf, ps, steps = self.state.tolist()
        return {"steps": steps, "violation_fast": vf / max(1 - pf, 1e-300),
                "violation_slow": vs / max(1 - ps, 1e-300),
                "saturation": sat / max(1 - ps, 1e-300)}

    def likely_infeasible(self) -> bool:
        s = self.summary()
        return bool(s["steps"] >= self.min_steps and s["saturation"] >= self.saturation_level
                    and s["violation_fast"] > self.tolerance
                    and s["violation_fast"] >= (1 - self.shrink) * s["violation_slow"])

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"state": self.state.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.state.copy_(state["state"].to(self.state.device, self.state.dtype))
