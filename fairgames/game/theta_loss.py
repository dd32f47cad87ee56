"""The Lagrangian's algebra at one batch: the leaf costs, the θ-player's loss, and what a
step records of the batch.

At the weights ``(ω, λ)`` a batch's leaf costs are ``c(λ) = ω·w + λᵀA`` (plus the ratio
slacks' and the linearised ratios' parts, paper 000 Algorithm 3), and the θ-player descends
``Σ c⁺·upper + c⁻·lower (+ ω·loss)`` — the surrogate Lagrangian ``L̃2`` of Algorithm 2 — plus
the objective's own bound and the θ-terms of players that add one. A best-response θ's inner
loop (Algorithm 1) descends the same algebra at costs frozen at its first call
(:meth:`ThetaLoss.fixed_costs`). :class:`~fairgames.game.ConstrainedOptimizer` calls this
module; nothing here reads a device value on the host.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, error_rate, positive_prediction_rate
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> problem = Problem(error_rate(), [positive_prediction_rate() >= 0.5])
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(torch.nn.Linear(1, 1).parameters(),
    ...                                                      lr=0.1))
    >>> costs, ratios = copt.theta_loss.leaf_costs(torch.tensor([0.2, 0.4]),
    ...                                            *copt.weights())
    >>> costs.shape, ratios is None
    (torch.Size([2]), True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from fairgames.rates import Batch, LeafValues, RateEvaluator, RatesError

from .lagrangian import LagrangianTerms
from .players.base import Player
from .problem import Problem
from .round import Record

Ratios = tuple[torch.Tensor, torch.Tensor] | None


@dataclass
class FrozenCosts:
    """The leaf costs of a best-response inner loop (see ``GameContext.fixed_costs``): the
    weights when the loop began, and the costs formed at its first call's true rates."""

    omega: torch.Tensor
    lam: torch.Tensor
    costs: torch.Tensor | None = None


class ThetaLoss:
    """The θ-player's loss and the step's record of a batch, for one bound game.

    Args:
        problem: the game's problem (its own ``loss``, if any, is added times ``ω``).
        terms: the compiled Lagrangian.
        evaluator: the fused pass (the frozen loop evaluates batches with it).
        objective_bound: the objective's own surrogate, or ``None``.
        players: the bound players, in order (their views, θ-terms and masks are read).
        views: ``{view: player}`` (the ratio slacks are the ``"slacks"`` view).
    """

    def __init__(self, problem: Problem, terms: LagrangianTerms, evaluator: RateEvaluator,
                 objective_bound: Any, players: Sequence[Player], views: dict[str, Any],
                 device: torch.device) -> None:
        self.problem, self.terms, self.evaluator = problem, terms, evaluator
        self.objective_bound = objective_bound
        self.views = views
        # leaves a player takes out of the fused pass's θ loss and adds back as its own term
        self.theta_terms = [p for p in players if type(p).theta_term is not Player.theta_term]
        masks = [p.theta_mask for p in players if p.theta_mask is not None]
        self.theta_mask = torch.stack(masks).prod(0).to(device) if masks else None
        self.needs_surrogate = any("surrogate" in p.needs for p in players)
        # a λ-player whose θ-side weights read the batch's surrogate rows (penalty methods)
        self.shaper = next((p for p in players if getattr(p, "shapes_theta", False)), None)
        inside = [p.name for p in players if p.plays_inside_step]
        if self.shaper is not None and inside:
            raise ValueError(
                f"the {getattr(self.shaper, 'strategy', self.shaper.name)} λ-player forms "
                "θ's weights from each batch's surrogate rows, which a best-response "
                "θ-player's inner loop (at frozen costs) does not read: play it with a "
                "gradient θ-player (theta='gradient': algorithm2, lagrangian, "
                "proxy_lagrangian)")
        self.empty = torch.zeros(0, device=device)
        self.frozen: FrozenCosts | None = None
        self.device = device

    def loss_and_record(self, batch: Batch, values: LeafValues | None, omega: torch.Tensor,
                        lam: torch.Tensor, *, reduce: Callable[[torch.Tensor], torch.Tensor]
                        | None = None) -> tuple[torch.Tensor, Record]:
        """The θ-player's loss of a batch at the weights ``(ω, λ)``, and the batch's record.
        ``values``: precomputed leaf values (else one fused pass, whose per-cell sums
        ``reduce`` all-reduces under a process group)."""
        autocast = torch.is_autocast_enabled(self.device.type)
        if self.shaper is not None:
            values, lam = self._shaped(batch, values, lam, reduce)
        if values is None:
            # One pass: the costs are formed from the batch's true rates inside it, and the
            # loss is one autograd node (see RateEvaluator.combination_bound).
            used: list[tuple[torch.Tensor, torch.Tensor] | None] = []

            def costs(true: torch.Tensor) -> torch.Tensor:
                c, ratios = self.leaf_costs(true, omega, lam)
                used.append(ratios)
                return c

            try:
                loss, values = self.evaluator.combination_bound(batch, costs, reduce=reduce)
            except (RuntimeError, IndexError) as error:
                _explain(batch, error)
                raise
            true, ratios = values.true, used[0]
        elif autocast:
            with torch.autocast(device_type=self.device.type, enabled=False):
                loss, true, ratios = self.rates_loss(values, omega, lam)
        else:
            loss, true, ratios = self.rates_loss(values, omega, lam)
        loss = self.added_terms(loss, batch, omega)
        if autocast:
            with torch.no_grad(), torch.autocast(device_type=self.device.type, enabled=False):
                rec = self.record(values, true, ratios, loss)
        else:
            with torch.no_grad():
                rec = self.record(values, true, ratios, loss)
        return loss, rec

    def _shaped(self, batch: Batch, values: LeafValues | None, lam: torch.Tensor,
                reduce: Callable[[torch.Tensor], torch.Tensor] | None
                ) -> tuple[LeafValues, torch.Tensor]:
        """The batch's leaf values (one pass, bounds first) and the weights a penalty player
        forms θ's loss at from the batch's surrogate rows ``g̃`` (e.g. ``[λ + ρ·g̃]₊``, the
        gradient of the augmented term, Nocedal & Wright eq. 17.65)."""
        if values is None:
            values = self.evaluator(batch, reduce=reduce)
        with torch.no_grad():
            rows = self.terms.affine_rows_bound(values.upper.detach(), values.lower.detach())
            lam = self.shaper.theta_multipliers(lam, rows.to(lam.dtype))
        return values, lam

    def leaf_costs(self, true: torch.Tensor, omega: torch.Tensor, lam: torch.Tensor
                   ) -> tuple[torch.Tensor, Ratios]:
        """The leaf costs ``c(ω, λ)`` at this batch's true rates (the ratio slacks and the
        linearised ratios read them), with the linearised ratios used."""
        t = self.terms
        slacks = self.empty
        if t.num_bilinear:      # ratio rows put the ratio slacks into the leaf costs
            slacks = self.views["slacks"].current(true)
        ratios = t.ratio_values(true) if t.num_linear else None
        costs = t.leaf_costs(omega, lam, slacks, ratios)
        if self.theta_mask is not None:     # leaves a player's theta_term covers instead
            costs = costs * self.theta_mask
        return costs, ratios

    def rates_loss(self, values: LeafValues, omega: torch.Tensor, lam: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, Ratios]:
        """``Σ c⁺·upper + c⁻·lower`` at the leaf costs of ``(ω, λ)`` (fp32, outside autocast)
        from precomputed leaf values, with the true leaf values and the linearised ratios."""
        t = self.terms
        true = values.true.detach() if values.true.requires_grad else values.true
        costs, ratios = self.leaf_costs(true, omega, lam)
        if values.flat_bounds is not None:
            loss = t.surrogate_flat(costs, values.flat_bounds)
        else:
            loss = t.surrogate(costs, values.upper, values.lower)
        return loss, true, ratios

    def added_terms(self, loss: torch.Tensor, batch: Batch, omega: torch.Tensor
                    ) -> torch.Tensor:
        """The rates' loss plus the problem's own loss (times ω), the objective's bound and
        the θ-terms of players that add one."""
        if self.problem.loss is not None:
            extra = self.problem.loss(batch.scores, batch)
            if not isinstance(extra, torch.Tensor) or extra.dim() != 0:
                raise ValueError("the problem's loss must return a scalar tensor, got "
                                 f"{getattr(extra, 'shape', type(extra).__name__)}")
            loss = torch.addcmul(loss, omega, extra.float())       # loss + ω·extra
        if self.objective_bound is not None:
            loss = loss + self.objective_bound(batch, omega)
        for player in self.theta_terms:
            term = player.theta_term()
            if term is not None:
                loss = loss + term
        return loss

    def record(self, values: LeafValues, true: torch.Tensor, ratios: Ratios,
               loss: torch.Tensor) -> Record:
        """What the step needs of this call (device tensors, no graph)."""
        t = self.terms
        affine_sur = bilinear_sur = None
        if self.needs_surrogate:
            upper, lower = values.upper.detach(), values.lower.detach()
            affine_sur = t.affine_rows_bound(upper, lower)
            if t.num_bilinear:
                bilinear_sur = t.bilinear_values_bound(upper, lower)
        return Record(
            count=1, leaves=true, affine_true=t.affine_rows(true),
            bilinear_true=t.bilinear_values(true) if t.num_bilinear else self.empty,
            affine_surrogate=affine_sur, bilinear_surrogate=bilinear_sur,
            ratios=ratios[0] if ratios is not None else None,
            objective_surrogate=loss.detach(), empty_subsets=values.empty_subsets)

    def heldout_record(self, batch: Batch, reduce: Any) -> Record:
        """The record of a held-out batch (its true rates; no loss)."""
        # update=False: the running proportion estimates belong to θ's (mini)batches.
        values = self.evaluator(batch, update=False, reduce=reduce)
        t = self.terms
        ratios = t.ratio_values(values.true) if t.num_linear else None
        return self.record(values, values.true, ratios, self.empty.sum())

    @contextmanager
    def fixed_costs(self, weights: tuple[torch.Tensor, torch.Tensor]
                    ) -> Iterator[FrozenCosts]:
        """Inside, :meth:`frozen_loss` is the loss (a best-response θ's inner loop)."""
        omega, lam = (w.detach().clone() for w in weights)
        self.frozen = FrozenCosts(omega, lam)
        try:
            yield self.frozen
        finally:
            self.frozen = None

    def frozen_loss(self, batch: Batch) -> torch.Tensor:
        """The best-response inner loop's loss: ``⟨c, R̃⟩`` at the frozen costs (formed at the
        first call's true rates), without touching the running estimates or the records."""
        frozen = self.frozen
        assert frozen is not None
        values = self.evaluator(batch, update=False)
        if frozen.costs is None:
            with torch.no_grad():
                frozen.costs = self.terms.leaf_costs(frozen.omega, frozen.lam,
                                                     *self._ratio_state(values.true.detach()))
                if self.theta_mask is not None:
                    frozen.costs = frozen.costs * self.theta_mask
        loss = self.terms.surrogate(frozen.costs, values.upper, values.lower)
        for player in self.theta_terms:
            term = player.theta_term()
            if term is not None:
                loss = loss + term
        if self.problem.loss is not None:
            loss = loss + frozen.omega * self.problem.loss(batch.scores, batch).float()
        if self.objective_bound is not None:
            loss = loss + self.objective_bound(batch, frozen.omega)
        return loss

    def _ratio_state(self, leaves: torch.Tensor) -> tuple[torch.Tensor, Ratios]:
        """Ratio slacks and linearised ratios at true leaf values (for frozen costs)."""
        t = self.terms
        if not (t.num_bilinear or t.num_linear):
            return self.empty, None
        slack_player = self.views.get("slacks")
        slacks = slack_player.current(leaves) if slack_player is not None else self.empty
        return slacks, (t.ratio_values(leaves) if t.num_linear else None)


def _explain(batch: Batch, error: Exception) -> None:
    """Raise the clear error of a batch whose values broke the fused pass (labels outside
    {0, 1}, group codes out of range; the pass indexes with them), if that is the cause."""
    try:
        batch.check_values()      # syncs: only on the way out of a failed step
    except RatesError as clear:
        raise clear from error
