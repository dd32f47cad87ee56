"""The generic part of the multiplier (λ) players: :class:`MultiplierPlayer` (the interface,
the payoff, checkpoints, the gain check), the settings the kinds share, the
:class:`DualContext` of follow-the-leader, and :func:`commit`, the masked in-place write every
kind's update ends with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..base import Player
from ..keys import ConfigKey, positive

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ...round import Round

PAYOFFS = ("true", "surrogate")

DEFAULT_RADIUS = 10.0
"""Default κ, the bound ‖λ‖₁ ≤ κ of the Lagrangian players (paper 000's Λ). Rates and the usual
objectives are O(1), so a constraint rarely needs a multiplier above a few units; κ = 10 leaves
room and keeps the θ-player's step bounded. Multipliers that sit at κ while violations persist
make :meth:`ConstrainedOptimizer.likely_infeasible` fire; raise κ if the problem is feasible."""

# The settings of the λ-players (``algorithm.<name>`` of a run config). ``None``: the preset's
# value, else the strategy's own default.
MULTIPLIER_LR = ConfigKey("multiplier_lr", float, None, "the λ-player's step size",
                          positive(), argument="lr")
RADIUS = ConfigKey("radius", float, None, "κ of Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}", positive())


@dataclass
class DualContext:
    """What a follow-the-leader player needs besides this step's gain.

    ``affine`` is the R-part of every row this step (true or surrogate, per the payoff),
    ``fixed`` the model-independent arguments, and ``gain_at(λ, affine, fixed)`` the rows'
    values with the slacks at their best response to ``λ`` (the min over ξ of paper 000's
    ``min_ξ L1 + L2``); ``leader(affine, fixed)``, when given, returns the exact
    ``argmax_λ min_ξ L`` (or ``None`` when the problem's shape has no closed form).
    """

    affine: torch.Tensor
    fixed: torch.Tensor
    gain_at: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    has_slacks: bool
    leader: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None] | None = None


def commit(target: torch.Tensor, new: torch.Tensor, ok: torch.Tensor | None) -> None:
    """``target ← new`` where the device boolean ``ok`` holds (all of it when ``ok`` is
    ``None``), in place and without a sync."""
    with torch.no_grad():
        if ok is None:
            target.copy_(new)
        else:     # in place: no temporary the size of the state (a K × K matrix)
            torch.where(ok, new, target, out=target)


class MultiplierPlayer(Player):
    """Base class; see :mod:`fairgames.game.players.multipliers`. ``strategy`` names the
    class's strategy (the player's ``name`` is ``"multipliers"``, its role in the game)."""

    strategy = "multipliers"
    name = "multipliers"
    order = 20
    provides = ("weights",)
    lagrangian = True   # False: the objective weight ω moves too (proxy-Lagrangian)
    has_lr = True       # takes a step size ``lr``
    has_radius = True   # takes κ (``radius``) of Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}
    no_radius_reason = ""
    shapes_theta = False  # True: θ's weights depend on θ's own surrogate rows (penalties)

    def __init__(self, num_rows: int, *, device: torch.device | str | None = None,
                 dtype: torch.dtype = torch.float32, payoff: str = "true") -> None:
        if num_rows < 0:
            raise ValueError(f"num_rows must be non-negative, got {num_rows}")
        if payoff not in PAYOFFS:
            raise ValueError(f"payoff must be one of {PAYOFFS}, got {payoff!r}")
        self.num_rows = int(num_rows)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.payoff = payoff
        self.needs = frozenset({payoff}) - {"true"}
        self._one = torch.ones((), device=self.device, dtype=dtype)
        self._gain_scale: torch.Tensor | None = None

    def bind(self, game: Any) -> None:
        if game.terms.num_rows != self.num_rows:
            raise ValueError(f"the multiplier player has {self.num_rows} rows, the problem "
                             f"{game.terms.num_rows}")
        # rows over group losses step relative to their bound (Problem's gain_scale)
        self._gain_scale = game.terms.gain_scale

    def play(self, round: Round) -> None:
        """One step on the round's rows under this player's payoff, each row's scaled by
        its ``gain_scale`` (1 for rates)."""
        rows, scale = round.rows(self.payoff), self._gain_scale
        self.update(rows if scale is None else rows * scale, ok=round.ok)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`weights` as they are now, unchanged by later updates (clones, unless the
        player's update rebinds its state instead of writing it in place)."""
        omega, lam = self.weights()
        return omega.clone(), lam.clone()

    def theta_multipliers(self, lam: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The multipliers θ's loss is formed at, given the batch's surrogate rows ``rows``
        [M] (read only when :attr:`shapes_theta`; default: the played ``lam``)."""
        return lam

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        """One step from the gain ``∂L/∂λ`` [M], masked by ``ok``."""
        raise NotImplementedError

    def saturation(self) -> torch.Tensor:
        raise NotImplementedError

    def _tensors(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in self._tensors().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        own = self._tensors()
        missing = set(own) - set(state)
        if missing:
            raise KeyError(f"{type(self).__name__} state is missing {sorted(missing)}")
        with torch.no_grad():
            for k, v in own.items():
                if tuple(state[k].shape) != tuple(v.shape):
                    raise ValueError(f"{type(self).__name__}: {k} has shape "
                                     f"{tuple(state[k].shape)} in the checkpoint, "
                                     f"{tuple(v.shape)} here (a different problem?)")
                v.copy_(state[k].to(v.device, v.dtype))

    def _check_gain(self, gain: torch.Tensor) -> torch.Tensor:
        if gain.shape != (self.num_rows,):
            raise ValueError(f"expected a gain of shape [{self.num_rows}], got "
                             f"{tuple(gain.shape)}")
        if gain.requires_grad:
            gain = gain.detach()
        return gain if (gain.device == self.device and gain.dtype == self.dtype) else gain.to(
            self.device, self.dtype)
