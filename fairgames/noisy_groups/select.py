"""``robust.select``: which constraint values choose a robust run's best iterate.

Paper 004's Algorithms 2 and 4 return "the best iterate satisfying (3) [DRO] / (7) [SA] with
the lowest objective" (notes §2.2, §2.7). The library's default (``noisy``) compares the
snapshots on the NOISY-group constraints; the other rules replace each constraint's value by
a robust one on the selection split, at report time (no step of the game reads them):

* ``tv``: the exact maximum over the TV balls ``‖p̃_j − p̂_j‖₁ ≤ 2γ_j`` ∩ simplex, constraint
  (3) (:func:`~fairgames.noisy_groups.tv_ball.robust_values`: the closed form / Dinkelbach per
  group);
* ``tv_sampled``: the largest value over ``robust.select_samples`` random ``p̃_j`` per group,
  drawn as the authors' code draws them (:func:`~fairgames.noisy_groups.tv_ball.sample_tv_ball`,
  seeded by the run's seed; the same draws for every candidate) — a lower bound on (3);
* ``soft``: the exact worst case over the soft assignments 𝒲, constraint (7) (an LP per
  candidate, :func:`~fairgames.noisy_groups.noise_model.soft_values`);
* ``played`` (``robust=dro``, selection on train): the constraints under the ``p̃_j`` the
  adversary held at the candidate's step (snapshotted with the model at the same steps,
  :class:`PlayedState`; the final model's: the last ``p̃``) — the value the game itself
  played, between the noisy value and (3) when the adversary has not reached the worst case.
  A mixture meets the largest over its members' ``p̃``.

A constraint a rule does not cover (an equality, a non-affine one) keeps its noisy value.
The true groups never enter: ``γ_j`` and the noise model ``P(G | Ĝ)`` are the run's own
(read off the training rows, as the robust players read them).

Example:
    >>> merge_rows([[0.1, -0.2, 0.2]], [{"a": 0.3, "b": None}], ["a", "b"], ["<=", "=="])
    [[0.3, -0.2, 0.2]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fairgames.data import TabularDataset
from fairgames.game import Problem

from .noise_model import soft_values
from .tv_ball import robust_values, sample_tv_ball

SELECTS = ("noisy", "tv", "tv_sampled", "soft", "played")


class PlayedState(nn.Module):
    """The DRO adversary's current ``p̃`` ``[G, n]`` as the one buffer ``p``, read afresh at
    every snapshot (the engine's ``SnapshotSettings.extra``).

    Example:
        >>> class Adversary:
        ...     p = torch.ones(2, 3)
        >>> [name for name, _ in PlayedState(Adversary()).named_buffers()]
        ['p']
    """

    def __init__(self, player: Any) -> None:
        super().__init__()
        self._players = [player]     # a list: the player is no submodule

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        yield prefix + "p", self._players[0].p.detach()


def merge_rows(rows: Sequence[Sequence[float]], values: Sequence[Mapping[str, float | None]],
               names: Sequence[str], senses: Sequence[str]) -> list[list[float]]:
    """Each candidate's ``g ≤ 0`` rows (an equality gives two) with every ``<=`` constraint's
    row replaced by its robust value where that is known."""
    out = []
    for row, vals in zip(rows, values, strict=True):
        new, i = [], 0
        for name, sense in zip(names, senses, strict=True):
            width = 1 if sense == "<=" else 2
            v = vals.get(name) if sense == "<=" else None
            new += list(row[i:i + width]) if v is None else [float(v)]
            i += width
        out.append(new)
    return out


@dataclass
class RobustSelector:
    """The robust constraint values of candidates (module docstring): ``rule``, the problem,
    the noisy ``attribute``, the TV radii ``gamma``, the noise model ``b`` (``[G, Ĝ]``, for
    ``soft``), the number of random ``p̃`` (``tv_sampled``) and their seed, and the
    adversary's ``p̃`` ``[G, n_train]`` by training step (``played``)."""

    rule: str
    problem: Problem
    attribute: str
    gamma: list[float]
    b: torch.Tensor | None = None
    samples: int = 20
    seed: int = 0
    played: dict[int, torch.Tensor] | None = None
    _draws: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict, repr=False)

    def values(self, ds: TabularDataset, scores: torch.Tensor,
               weights: torch.Tensor | None = None, steps: Sequence[int] = ()
               ) -> dict[str, float | None]:
        """Each constraint's robust value on ``ds`` for ``scores`` ``[N]`` (or a mixture:
        ``[R, N]`` with ``weights`` ``[R]``) of the candidates of training ``steps``
        (``played`` reads their ``p̃``; none known: ``{}``, the noisy values stay)."""
        if self.rule == "soft":
            if self.b is None:
                raise ValueError("robust.select=soft needs the noise model P(G | Ĝ)")
            return soft_values(self.problem, scores, ds, self.attribute, self.b,
                               weights) or {}
        if self.rule == "played":
            samples = self._played(ds, steps)
            if samples is None:
                return {}
        else:
            samples = self._points(ds) if self.rule == "tv_sampled" else None
        return robust_values(self.problem.constraints, self.attribute, self.gamma,
                             scores.cpu(), ds.labels.cpu(),
                             {k: v.cpu() for k, v in ds.groups.items()}, ds.group_names,
                             mixture_weights=None if weights is None else weights.cpu(),
                             samples=samples)

    def _points(self, ds: TabularDataset) -> dict[int, torch.Tensor]:
        """The random ``p̃_j`` of ``ds``, drawn once (every candidate meets the same ones)."""
        key = id(ds)
        if key not in self._draws:
            gen = torch.Generator().manual_seed(self.seed)
            codes = ds.groups[self.attribute].cpu()
            draws = {}
            for j in range(len(ds.group_names[self.attribute])):
                center = (codes == j).double()
                draws[j] = sample_tv_ball(center / center.sum().clamp_min(1.0),
                                          self.gamma[j], self.samples, gen)
            self._draws[key] = draws
        return self._draws[key]

    def _played(self, ds: TabularDataset, steps: Sequence[int]
                ) -> dict[int, torch.Tensor] | None:
        """``{j: [K, n]}``: the ``p̃_j`` played at those of ``steps`` that have one."""
        held = [self.played[s] for s in steps if self.played and s in self.played]
        if not held:
            return None
        if held[0].shape[-1] != len(ds):
            raise ValueError(f"robust.select=played reads the adversary's p̃ over the "
                             f"{held[0].shape[-1]} training rows, not this split's {len(ds)}: "
                             "choose on train (trainer.selection_split=train)")
        stack = torch.stack([p.detach().cpu().double() for p in held])     # [K, G, n]
        return {j: stack[:, j] for j in range(stack.shape[1])}

    def rows(self, evaluator: Any, ds: TabularDataset, scores: torch.Tensor,
             rows: Sequence[Sequence[float]], steps: Sequence[int] = ()
             ) -> list[list[float]]:
        """The candidates' (``scores`` ``[R, N]``, training ``steps`` ``[R]``) ``g ≤ 0`` rows,
        ``rows`` their noisy ones, with the robust values in place."""
        names = [c.name for c in evaluator.constraints]
        senses = [c.sense for c in evaluator.constraints]
        at = list(steps) or [None] * scores.shape[0]
        values = [self.values(ds, scores[r], steps=[at[r]] if at[r] is not None else [])
                  for r in range(scores.shape[0])]
        return merge_rows(rows, values, names, senses)

    def exact(self, evaluator: Any, ds: TabularDataset, scores: torch.Tensor,
              exact: Callable[[torch.Tensor], tuple[float, list[float]]],
              steps: Sequence[int] = ()
              ) -> Callable[[torch.Tensor], tuple[float, list[float]]]:
        """``exact`` (a mixture ``w ↦ (objective, noisy rows)``) with the mixture's robust
        values in place of its noisy rows."""
        names = [c.name for c in evaluator.constraints]
        senses = [c.sense for c in evaluator.constraints]

        def robust(w: torch.Tensor) -> tuple[float, list[float]]:
            f, rows = exact(w)
            kept = [i for i, v in enumerate(w.tolist()) if v]
            vals = self.values(ds, scores[kept], w[kept].double(),
                               [steps[i] for i in kept] if steps else [])
            return f, merge_rows([rows], [vals], names, senses)[0]
        return robust

    def record(self) -> dict[str, Any]:
        """``results.json``'s ``robust.selection``."""
        return {"rule": self.rule,
                "samples": self.samples if self.rule == "tv_sampled" else None,
                "seed": self.seed if self.rule == "tv_sampled" else None}


def played_steps(engine: Any, copt: Any) -> dict[int, torch.Tensor] | None:
    """``robust.select=played``: the adversary's ``p̃`` by training step, at every kept
    snapshot and at the final step (``None`` when the run does not record them)."""
    rec = engine.extra_snapshots
    if rec is None:
        return None
    if rec.steps != engine.snapshots.steps:
        raise RuntimeError(f"the adversary's snapshots (steps {rec.steps}) are not the "
                           f"model's ({engine.snapshots.steps})")
    played = dict(zip(rec.steps, rec.stacked()["p"], strict=True)) if len(rec) else {}
    played[engine.step] = copt.player("dro").p.detach().clone()
    return played
