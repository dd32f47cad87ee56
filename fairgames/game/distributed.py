"""Data-parallel games: the one collective that makes every rank play the global game.

Under ``torch.distributed`` each rank scores its shard of the global batch. The fused pass's
per-cell sums (the weight, the true / upper / lower indicator sums of every cell: every leaf's
numerator, every subset's weight and the batch's total) are additive over examples, so the
game all-reduces them — undivided — in ONE ``all_reduce(SUM)`` per pass, before any division
(:class:`SumReduction`). Every rank then divides the same global numerators by the same
global denominators, updates the same running estimates and hands its players the same rates:
the multipliers and slacks agree across ranks without any broadcast. Averaging already-divided
rates instead would be biased whenever ranks hold different group counts.

θ's gradient. The global surrogate is ``L = Σ_k c_k·N_k / D_k`` with ``N_k = Σ_r N_k^r`` (the
numerator summed over the ranks' examples) and ``D_k`` global. Rank ``r``'s pass differentiates
only its own examples: ``g_r = Σ_k c_k / D_k · ∂N_k^r/∂θ``, and ``Σ_r g_r = ∂L/∂θ``.
``DistributedDataParallel`` *averages* the ranks' gradients, ``(1/W)·Σ_r g_r``, so the game
multiplies each rank's gradient by the world size ``W`` (:func:`scale_gradient`; the loss's
value stays ``L``): DDP's average is then exactly the single-process gradient on the
concatenated batch.

Example:
    >>> import torch
    >>> x = torch.tensor(2.0, requires_grad=True)
    >>> scaled = scale_gradient(1.5 * x, 4)        # the value of 1.5·x, 4× its gradient
    >>> scaled.backward()
    >>> float(scaled.detach()), float(x.grad)
    (3.0, 6.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .players.base import Player


class SumReduction:
    """Sums flat float tensors over a process group in one ``all_reduce`` (see the module).

    Args:
        group: the process group (``None``: the default group).

    Example (a one-process group; under torchrun every rank gets the sum over ranks):
        >>> import torch
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> reduce = SumReduction()
        >>> [t.tolist() for t in reduce([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])]
        [[1.0, 2.0], [3.0]]
        >>> reduce.calls, reduce.world_size
        (1, 1)
        >>> dist.destroy_process_group()
    """

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.calls = 0

    def __call__(self, parts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The sums over the ranks of ``parts`` (flat tensors of one dtype and device),
        concatenated into one buffer so that the game makes one collective."""
        sizes = [p.numel() for p in parts]
        buffer = torch.cat([p.reshape(-1) for p in parts])
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=self.group)
        self.calls += 1
        return list(buffer.split(sizes))


def resolve_process_group(process_group: Any) -> SumReduction | None:
    """The game's reduction for ``ConstrainedOptimizer(process_group=...)``: ``None`` (one
    process, no collective), ``"default"`` (torch.distributed's default group) or a
    ``ProcessGroup``. A clear error when torch.distributed is not initialised."""
    if process_group is None:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("ConstrainedOptimizer(process_group=...) needs torch.distributed "
                         "initialised: call torch.distributed.init_process_group(...) first "
                         "(torchrun sets its environment variables), or pass "
                         "process_group=None for a single process")
    if isinstance(process_group, str):
        if process_group != "default":
            raise ValueError(f"process_group must be None, 'default' or a torch.distributed "
                             f"ProcessGroup, got {process_group!r}")
        return SumReduction(None)
    return SumReduction(process_group)


def refuse_local_state(players: Sequence[Player], problem: Any) -> None:
    """Refuse, naming the player or setting and the remedy, what the one collective cannot
    make global: players with per-example or per-rank state, a per-batch ``loss``, the
    objective's own surrogate (a second pass) and a best-response θ (its inner loop)."""
    for p in players:
        if not _data_parallel(p):
            raise ValueError(
                f"the player {p.name!r} ({type(p).__name__}) keeps per-example or per-rank "
                "state that the game's one all-reduce of the rates' sums does not combine, so "
                "its ranks would disagree: train it in a single process (process_group=None), "
                "or give the player data_parallel = True once it reduces its own state")
        if p.plays_inside_step:
            raise ValueError(
                f"the θ-player {p.name!r} ({type(p).__name__}) re-fits θ inside step(), a "
                "collective per inner step: use the gradient θ-player under a process group")
    if problem.loss is not None:
        raise ValueError("Problem(loss=...) is a per-batch value each rank computes on its "
                         "own shard, not a sum the game can all-reduce: under a process group "
                         "express it as rates or group losses (group_loss), or train in a "
                         "single process")
    if problem.objective_surrogate is not None:
        raise ValueError("Problem(objective_surrogate=...) takes a second fused pass that the "
                         "game does not reduce: leave objective_surrogate unset under a "
                         "process group")


def _data_parallel(player: Player) -> bool:
    """A player's own declaration, else: safe unless it transforms batches (a transform is
    per-example state: reweighting or relabelling this rank's rows)."""
    declared = getattr(player, "data_parallel", None)
    if declared is not None:
        return bool(declared)
    return type(player).transform is Player.transform


def scale_gradient(loss: torch.Tensor, world_size: int) -> torch.Tensor:
    """``loss`` with its value unchanged and its gradient times ``world_size``: what makes
    DDP's average of the ranks' gradients the single-process gradient (see the module)."""
    if world_size == 1:
        return loss
    return loss * world_size - loss.detach() * (world_size - 1)
