"""The player protocol: what a player of the game owns, sees and does.

A player owns its state (tensors on the model's device), its feasible set and its strategy. The
:class:`~fairgames.game.ConstrainedOptimizer` holds a list of players and, at every step, hands
each in turn (by :attr:`Player.order`) the step's :class:`~fairgames.game.round.Round` — the
narrow state object through which a player reads what it needs (the true or surrogate row
values, the multipliers and slacks played, the AMP ``ok`` mask) and publishes what it plays.
The optimizer never branches on a player's type or strategy name:

* :meth:`Player.bind` allocates the player's state for the compiled problem (``GameContext``);
* :meth:`Player.transform` may reweight or relabel a batch before the fused pass (DRO,
  soft group assignments);
* :meth:`Player.play` is one round of its strategy;
* :meth:`Player.param_groups` exposes its step sizes (tensors, updated in place) as
  ``torch.optim`` parameter groups tagged ``"player": name``, so ``torch.optim.lr_scheduler``
  drives them through :attr:`ConstrainedOptimizer.param_groups`;
* ``state_dict`` / ``load_state_dict`` restore it bit for bit.

Players that other parts of the game read declare it in :attr:`Player.provides`: ``"weights"``
(``(ω, λ)`` and a ``saturation`` in [0, 1] — the multipliers) and ``"slacks"`` (``current(R)``,
the slacks at true leaf values — the ψ and ratio slacks). A surrogate-payoff player asks the
optimizer to record the surrogate rows with ``needs = {"surrogate"}``.

Example (a player that only counts the rounds it saw):
    >>> import torch
    >>> class Counter(Player):
    ...     name, order = "counter", 95
    ...     def bind(self, game):
    ...         self.count = torch.zeros((), device=game.device)
    ...     def play(self, round):
    ...         self.count += 1
    ...     def state_dict(self):
    ...         return {"count": self.count.clone()}
    >>> Counter().order
    95
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from fairgames.rates import Batch

from .keys import ConfigKey

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..lagrangian import LagrangianTerms
    from ..problem import Problem
    from ..round import Round


@dataclass(frozen=True)
class GameContext:
    """What a player is bound to: the compiled problem, where the game lives, and θ's
    optimizer (for the θ-players)."""

    problem: Problem
    terms: LagrangianTerms
    device: torch.device
    model_optimizer: torch.optim.Optimizer
    fixed_costs: Callable[[], AbstractContextManager[Any]]
    """``with game.fixed_costs() as frozen:`` — inside, ``lagrangian(batch)`` returns the
    surrogate of ``⟨c, R⟩`` at the leaf costs ``frozen.costs`` of the λ (``frozen.omega``,
    ``frozen.lam``) and ratio state of the first call, without updating the evaluator's running
    estimates or recording anything: a best-response θ-player's inner loop."""
    weights: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None
    """``(ω, λ)`` played now (device tensors), for a player that moves inside
    :meth:`Player.transform`, before θ's loss is formed (soft assignments' Algorithm 4 order)."""


class Player:
    """Base class of every player (see the module docstring).

    Attributes:
        name: unique within a game; tags the player's ``param_groups`` and checkpoint entry.
        order: players play in increasing order (θ 0, slacks 10, multipliers 20, monitor 90).
        provides: the views the player offers the game (``"weights"``, ``"slacks"``).
        needs: record parts beyond the true rates the player reads (``"surrogate"``).
        plays_inside_step: the player evaluates batches itself during ``step`` (a best-response
            θ-player), so records made before ``step`` (held-out batches) do not fit it.
        needs_grad: ``play`` runs with autograd and autocast as the caller has them (the
            θ-players, whose closure evaluates the model). These play first, in their order;
            the others then play in theirs under one ``no_grad``, in fp32.
        config_keys: the settings the class takes from a run config (``algorithm.<key>``,
            :class:`~fairgames.game.players.keys.ConfigKey`); a preset takes the union of its
            players' keys.
        data_parallel: whether the player may play under a process group
            (:mod:`fairgames.game.distributed`): ``True`` when it reads only the round (the
            global rates every rank shares), ``False`` when it keeps per-example or per-rank
            state. ``None`` (default): ``True`` unless it overrides :meth:`transform`.
    """

    name: str = "player"
    order: int = 50
    provides: tuple[str, ...] = ()
    needs: frozenset[str] = frozenset()
    plays_inside_step: bool = False
    needs_grad: bool = False
    config_keys: tuple[ConfigKey, ...] = ()
    data_parallel: bool | None = None

    def bind(self, game: GameContext) -> None:
        """Allocate state for ``game`` (called once by the optimizer, before any step)."""

    def transform(self, batch: Batch) -> Batch:
        """The batch the fused pass sees (default: unchanged)."""
        return batch

    theta_mask: torch.Tensor | None = None
    """``[K]`` leaf weights (0 or 1) for θ's surrogate, set at ``bind``: the fused pass drops
    the leaves with weight 0 from θ's loss, whose part the player supplies itself in
    :meth:`theta_term` (``None``: every leaf stays)."""

    def theta_term(self) -> torch.Tensor | None:
        """A term added to θ's loss for the batch this player last transformed (default none):
        e.g. the soft assignments' surrogate of the leaves they masked out."""
        return None

    def play(self, round: Round) -> None:
        """One round of the player's strategy."""
        raise NotImplementedError

    def param_groups(self) -> list[dict[str, Any]]:
        """Step sizes as ``torch.optim`` parameter groups (``"player"`` tagged)."""
        return []

    def log_scalars(self) -> dict[str, float]:
        """TensorBoard scalars the player reports of itself at log time (may sync; default:
        none), e.g. the DRO adversary's distance from p̂."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"player {self.name!r} keeps no state, the checkpoint has "
                             f"{sorted(state)}")


def step_size(value: float, device: torch.device | str | None, name: str,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A positive step size as a 0-dim tensor (updated in place by LR schedulers)."""
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return torch.tensor(float(value), device=device, dtype=dtype)


def check_positive_integers(**values: float) -> None:
    """Raise naming the first of ``values`` (name → value) that is not a positive integer.

    Example:
        >>> check_positive_integers(steps=5, order=0)
        Traceback (most recent call last):
        ...
        ValueError: order must be a positive integer, got 0
    """
    for key, value in values.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")


def lr_group(player: Player, lr: torch.Tensor) -> dict[str, Any]:
    """The parameter group of a player whose only hyper-parameter is its step ``lr``."""
    return {"params": [], "lr": lr, "player": player.name}


def adam_ascent(grad: torch.Tensor, first: torch.Tensor, second: torch.Tensor,
                t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One Adam direction (β = 0.9, 0.999; ε = 1e-8; unscaled by the step size) with its new
    state ``(direction, first, second, t)``; the step count ``t`` is a device tensor, where
    ``torch.optim.Adam`` reads its own on the host. Functional: the caller keeps or discards
    the new state (a skipped step keeps the old).

    Example:
        >>> g = torch.tensor([2.0, -0.5])
        >>> d, m, v, t = adam_ascent(g, torch.zeros(2), torch.zeros(2), torch.zeros(()))
        >>> [round(x, 4) for x in d.tolist()], float(t)     # the first step is sign(g)
        ([1.0, -1.0], 1.0)
    """
    t = t + 1
    first = 0.9 * first + 0.1 * grad
    second = 0.999 * second + 0.001 * grad * grad
    direction = (first / (1 - torch.pow(0.9, t))) / (
        (second / (1 - torch.pow(0.999, t))).sqrt() + 1e-8)
    return direction, first, second, t
