"""One step of the game as its players see it: the recorded values and what each player played.

:class:`Record` holds what :meth:`~fairgames.game.ConstrainedOptimizer.lagrangian` recorded of
a batch (device tensors, no graph); :class:`RecordBuffer` sums a step's records (gradient
accumulation, the held-out batches of the two-dataset game) until the step takes their mean;
:class:`Round` is the narrow state object handed to every
player's ``play``: it reads the compiled Lagrangian for them (row values at the slacks played,
the true objective and constraints, follow-the-leader's inputs) and caches each value, so that
two players asking for the same thing compute it once. Players publish what they play on it
(the θ-player the AMP ``ok`` mask and the loss, the slack player the slacks).

Nothing here reads a device value on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from .history import StepRecord
from .lagrangian import LagrangianTerms
from .players.multipliers import DualContext


@dataclass
class Record:
    """Sums of what ``lagrangian`` recorded since the last ``step`` (device tensors)."""

    count: int
    leaves: torch.Tensor
    affine_true: torch.Tensor
    bilinear_true: torch.Tensor
    affine_surrogate: torch.Tensor | None
    bilinear_surrogate: torch.Tensor | None
    ratios: torch.Tensor | None
    objective_surrogate: torch.Tensor
    empty_subsets: torch.Tensor | None = None   # subsets with no weight in the batch

    def add(self, other: Record) -> None:
        self.count += other.count
        for f in fields(self)[1:]:
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine is not None and theirs is not None:
                setattr(self, f.name, mine + theirs)

    def mean(self) -> Record:
        if self.count == 1:
            return self
        n = float(self.count)
        values = [getattr(self, f.name) for f in fields(self)[1:]]
        return Record(1, *[v / n if v is not None else None for v in values])


class RecordBuffer:
    """What :meth:`~fairgames.game.ConstrainedOptimizer.lagrangian` and
    :meth:`~fairgames.game.ConstrainedOptimizer.record_heldout` recorded since the last step,
    summed (several calls before one step average their records)."""

    def __init__(self) -> None:
        self.pending: Record | None = None
        self.heldout: Record | None = None

    @property
    def empty(self) -> bool:
        return self.pending is None and self.heldout is None

    def add(self, record: Record) -> None:
        if self.pending is None:
            self.pending = record
        else:
            self.pending.add(record)

    def add_heldout(self, record: Record) -> None:
        if self.heldout is None:
            self.heldout = record
        else:
            self.heldout.add(record)

    def take(self) -> Record:
        """The step's record: the mean of ``lagrangian``'s, or of the held-out batches' (the
        two-dataset game: every player but θ sees the held-out rates)."""
        if self.pending is None:
            raise RuntimeError("step()'s closure recorded nothing: it must call "
                               "copt.lagrangian(batch)")
        pend = self.pending.mean()
        self.pending = None
        if self.heldout is not None:
            objective_surrogate = pend.objective_surrogate
            pend = self.heldout.mean()
            pend.objective_surrogate = objective_surrogate
            self.heldout = None
        return pend

    def clear(self) -> None:
        self.pending = self.heldout = None


class Round:
    """What the players of one step see (see the module docstring).

    Attributes:
        closure, scaler: ``step``'s arguments (for the θ-players).
        omega, lam: the objective weight and multipliers this step plays (a snapshot taken
            before any player moves).
        ok: ``None``, or a device boolean: ``False`` when the θ-player's step was skipped (AMP),
            which every other player then skips too.
        loss: what the θ-player's step returns (``step``'s return value).
        slacks: the slacks played this step (set by the slack player; empty without one).
    """

    def __init__(self, terms: LagrangianTerms, *, omega: torch.Tensor, lam: torch.Tensor,
                 take_record: Callable[[], Record], views: dict[str, Any],
                 equality: torch.Tensor, empty: torch.Tensor,
                 closure: Callable[[], Any] | None = None, scaler: Any = None) -> None:
        self.terms, self.omega, self.lam = terms, omega, lam
        self.closure, self.scaler = closure, scaler
        self.views, self._equality = views, equality
        self._take_record = take_record
        self._record: Record | None = None
        self.ok: torch.Tensor | None = None
        self.loss: Any = None
        self.empty = empty      # made once by the optimizer: no op per step
        self.slacks = self.empty
        self._cache: dict[str, Any] = {}

    @property
    def record(self) -> Record:
        """The step's record (taken when first read: after θ's step, which may add to it)."""
        if self._record is None:
            self._record = self._take_record()
        return self._record

    @property
    def fixed(self) -> torch.Tensor:
        """Values ``φ`` of the model-independent ψ arguments at the step's true rates."""
        out = self._cache.get("fixed")
        if out is None:
            t = self.terms
            out = self._cache["fixed"] = (t.fixed_values(self.record.leaves) if t.num_fixed
                                          else self.empty)
        return out

    @property
    def has_surrogate(self) -> bool:
        """Whether the surrogate rows were recorded (some player ``needs`` them)."""
        return self.record.affine_surrogate is not None

    def affine(self, payoff: str) -> torch.Tensor:
        """The rows' rate part ``A·R + d`` under ``payoff`` (``"true"`` or ``"surrogate"``)."""
        rec = self.record
        if payoff == "surrogate":
            assert rec.affine_surrogate is not None, "surrogate rows were not recorded"
            return rec.affine_surrogate
        return rec.affine_true

    def rows(self, payoff: str = "true") -> torch.Tensor:
        """``∂L/∂λ`` [M]: every row's value at the slacks played (the multipliers' gain)."""
        out = self._cache.get(payoff)
        if out is None:
            out = self._cache[payoff] = self._rows(payoff)
        return out

    def _rows(self, payoff: str) -> torch.Tensor:
        rec = self.record
        bilinear = rec.bilinear_true
        if payoff == "surrogate":
            bilinear = (rec.bilinear_surrogate if rec.bilinear_surrogate is not None
                        else self.empty)
        return self.terms.row_values(self.affine(payoff), bilinear, self.slacks, self.fixed,
                                     rec.ratios)

    def dual_context(self, payoff: str) -> DualContext:
        """Follow-the-leader's inputs: the rows' rate parts, ``φ``, and the rows' values with
        the ψ slacks at their best response to any λ (``min_ξ L``; the slack player's inner
        steps for a ψ without a closed form)."""
        t, slacks, empty = self.terms, self.slacks, self.empty
        slack_player = self.views.get("slacks")
        psi_steps = slack_player.psi_steps if slack_player is not None else 100
        one = torch.ones((), device=self.empty.device)

        def gain_at(lam: torch.Tensor, affine: torch.Tensor, fixed: torch.Tensor
                    ) -> torch.Tensor:
            s = t.psi_best_response(one, lam, slacks, fixed, steps=psi_steps)
            return t.row_values(affine, empty, s, fixed)

        return DualContext(self.affine(payoff), self.fixed, gain_at, t.has_psi, t.psi_leader)

    def truth(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(objective, constraints [C], largest violation)`` at the step's true rates."""
        out = self._cache.get("truth")
        if out is None:
            out = self._cache["truth"] = self._truth()
        return out

    def _truth(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t, leaves, rows = self.terms, self.record.leaves, self.rows("true")
        if t.affine_only:
            objective, constraints = t.truth_from_rows(leaves, rows)
            return objective, constraints, t.max_violation_from_rows(rows)
        # a ratio whose denominator is 0 on the batch reads num / ratio_floor, the value the
        # game plays (0 for precision or an F-measure): no NaN in the step's record
        objective, constraints = t.truth(leaves, ratio_floor=t.ratio_floor)
        if constraints.numel():
            # max(g, 0) for g <= 0 rows and |g| for g == 0 rows, in three ops.
            viol = torch.maximum(constraints, -constraints * self._equality).max()
        else:
            viol = self.empty.sum()
        return objective, constraints, viol

    def saturation(self) -> torch.Tensor:
        """The multipliers' saturation in [0, 1] (1 at the edge of their set)."""
        return self.views["weights"].saturation()

    def step_record(self, step: int | torch.Tensor) -> StepRecord:
        """The step's :class:`~fairgames.game.StepRecord` (after every player moved)."""
        objective_true, constraints_true, _ = self.truth()
        rows_true = self.rows("true")
        rec = self.record
        rows_surrogate = (self.rows("surrogate") if rec.affine_surrogate is not None
                          else rows_true)
        return StepRecord(
            step=step, objective_true=objective_true,
            objective_surrogate=rec.objective_surrogate,
            constraints_true=constraints_true, rows_true=rows_true,
            rows_surrogate=rows_surrogate, objective_weight=self.omega,
            multipliers=self.lam, slacks=self.slacks, leaves_true=rec.leaves,
            empty_subsets=rec.empty_subsets)
