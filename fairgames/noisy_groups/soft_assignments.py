"""The soft-assignment player of paper 004 (Sec. 4, practical Algorithm 4; after Kallus et al.).

Training data carry noisy group codes ``Ĝ``; the problem's constraints read the TRUE groups
``G``, which the player supplies as soft memberships: example ``i`` belongs to true group ``j``
with weight ``W[ĝ_i, c_i, j]``, ``c_i = 2·ŷ_i + y_i``, ``ŷ = 1[s > 0]`` from the current model
without gradient (:mod:`fairgames.noisy_groups.soft_groups`). ``W`` is an adversary inside the
feasible set 𝒲(θ) of Eq. (5): it ascends the Lagrangian ``Σ_k c_k(ω, λ)·R_k(W)`` — the 0/1
rates as functions of ``W`` (:mod:`fairgames.noisy_groups.soft_rates`), the exact objective of
Algorithm 4's ``argmax_{w ∈ 𝒲(θ)} Σ_j λ_j g_j(θ, w)`` — by ``steps`` (default 5) Adam steps
per game step on the gradient's component along 𝒲(θ)'s equalities, each followed by a
fixed-iteration Dykstra projection onto 𝒲(θ) built from the batch's cell statistics. One
``W`` serves every constraint (Lemma 7; the authors' code).

How the player sees the model: its :meth:`~SoftAssignmentPlayer.transform` reads the batch's
scores (detached) and noisy codes and hands the fused pass the batch with ``attribute``
replaced by the soft memberships. When ``W`` moves is ``timing``:

* ``"before_theta"`` — Algorithm 4's order "W × 5 → θ → λ": ``transform`` itself takes the
  ``W`` steps on this batch's cell counts (the current θ's predictions) with the ``(ω, λ)``
  played now, then hands the pass the memberships of the new ``W``, so θ descends on the
  ``W`` just maximised at its own predictions;
* ``"after_theta"`` (the default of the class): ``transform`` records the counts and
  ``play`` (order 5: after θ, before the multipliers) takes the steps, so the ``W`` θ descends
  on at step ``t`` was maximised at step ``t − 1``'s batch and multipliers (one step behind).

Either way a step θ skipped (``round.ok``) leaves no trace.

θ's price of the ``W``-dependent rates is not read off the memberships: a prediction flip moves
an example to the other cell's ``W`` row, so the player takes those leaves out of the fused
pass's θ loss (``theta_mask``) and adds their linearisation in the cell counts
(``theta_term``; see ``_cell_surrogate``).

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, group, true_positive_rate
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> tpr = lambda v: true_positive_rate(group("g", v))
    >>> problem = Problem(error_rate(), [(tpr(v) >= true_positive_rate() - 0.05).named(v)
    ...                                  for v in ("0", "1")])
    >>> player = SoftAssignmentPlayer("g", torch.tensor([[0.8, 0.3], [0.2, 0.7]]))
    >>> model = torch.nn.Linear(3, 1)
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
    ...                             preset="lagrangian", players=[player])
    >>> x, y = torch.randn(64, 3), (torch.rand(64) < 0.5).float()
    >>> g = torch.randint(0, 2, (64,))                      # the noisy codes
    >>> _ = copt.step_batch(model, x, labels=y, groups={"g": g}, group_values={"g": ["0", "1"]})
    >>> player.assignments().shape                          # [noisy, cells, true]
    torch.Size([2, 4, 2])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from fairgames.game.players.base import (
    GameContext,
    Player,
    adam_ascent,
    check_positive_integers,
    lr_group,
    step_size,
)
from fairgames.rates import Batch

from .soft_groups import (
    affine_projector,
    cell_codes,
    cell_counts,
    cell_fractions,
    check_noise_model,
    dykstra,
    initial_assignments,
    memberships,
)
from .soft_rates import CellRates

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fairgames.game.round import Round

SOFT_OPTIMIZERS = ("adam", "sgd")
SOFT_TIMINGS = ("after_theta", "before_theta")


class SoftAssignmentPlayer(Player):
    """Plays the soft group assignments ``W ∈ 𝒲(θ)`` (see the module docstring).

    Args:
        noisy_attribute: the batch's hard attribute of noisy codes ``Ĝ`` (``m̂`` values).
        p_true_given_noisy: ``[m, m̂]``, ``P(G = j | Ĝ = k)`` (columns sum to 1), e.g.
            ``estimate_group_noise(true, noisy).p_true_given_noisy`` on auxiliary rows.
        attribute: the soft attribute the constraints read (default: ``noisy_attribute``,
            whose codes the memberships then replace in the batch the fused pass sees).
        true_values: names of the true groups (default ``"0"``, ``"1"``, ...).
        noisy_values: names of the noisy groups, needed only when the problem reads
            ``noisy_attribute`` beside another ``attribute``.
        lr: ``W``'s step size (the paper's η_w; 0.01 in its runs).
        steps: ascent steps per game step (5 in the authors' code).
        projection_iterations: Dykstra rounds per projection (20 in the authors' code).
        optimizer: ``"adam"`` (the authors' code) or ``"sgd"`` (plain projected ascent).
        order: place among the players after θ (default 5: before the slacks and λ).
        timing: ``"after_theta"`` or ``"before_theta"`` (Algorithm 4's order; see the
            module docstring).
    """

    name = "soft_assignments"
    strategy = "soft_assignments"
    data_parallel = False     # per-example (per-rank) state; refused under a process group

    def __init__(self, noisy_attribute: str, p_true_given_noisy: torch.Tensor, *,
                 attribute: str | None = None, true_values: Sequence[str] | None = None,
                 noisy_values: Sequence[str] | None = None, lr: float = 0.01,
                 steps: int = 5, projection_iterations: int = 20, optimizer: str = "adam",
                 order: int = 5, timing: str = "after_theta") -> None:
        b = check_noise_model(p_true_given_noisy)
        self.n_true, self.n_noisy = int(b.shape[0]), int(b.shape[1])
        self.true_values = ([str(v) for v in true_values] if true_values is not None
                            else [str(j) for j in range(self.n_true)])
        if len(self.true_values) != self.n_true:
            raise ValueError(f"true_values names {len(self.true_values)} groups, "
                             f"p_true_given_noisy has {self.n_true} rows (true groups)")
        if noisy_values is not None and len(noisy_values) != self.n_noisy:
            raise ValueError(f"noisy_values names {len(noisy_values)} groups, "
                             f"p_true_given_noisy has {self.n_noisy} columns (noisy groups)")
        if optimizer not in SOFT_OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {SOFT_OPTIMIZERS}, got {optimizer!r}")
        if timing not in SOFT_TIMINGS:
            raise ValueError(f"timing must be one of {SOFT_TIMINGS}, got {timing!r}")
        check_positive_integers(steps=steps, projection_iterations=projection_iterations,
                                order=order)
        step_size(lr, None, "the soft assignments' lr")          # checks lr > 0
        self.noisy_attribute = noisy_attribute
        self.attribute = attribute if attribute is not None else noisy_attribute
        self.noisy_values = list(noisy_values) if noisy_values is not None else None
        self.lr_value, self.steps, self.optimizer = float(lr), int(steps), optimizer
        self.projection_iterations, self.order = int(projection_iterations), int(order)
        self._b64 = b
        self.timing = timing

    def bind(self, game: GameContext) -> None:
        if not game.terms.affine_only:
            raise ValueError("the soft-assignment player plays problems whose constraints are "
                             "linear in the rates (equal opportunity, equalized odds, "
                             "demographic parity); this problem has ψ or ratio terms")
        dev = game.device
        noisy = ((self.noisy_attribute, self.noisy_values)
                 if self.noisy_values is not None else None)
        self.cells = CellRates(game.problem, self.attribute, self.true_values, self.n_noisy,
                               noisy=noisy, device=dev)
        self.terms = game.terms
        self.b = self._b64.to(dev, torch.float32)
        self.lr = step_size(self.lr_value, dev, "the soft assignments' lr")
        self.w = initial_assignments(self.b)
        self.moment = torch.zeros_like(self.w)          # Adam's first and second moments
        self.square = torch.zeros_like(self.w)
        self.t = torch.zeros((), device=dev)             # Adam's step count
        self._counts = torch.zeros(self.n_noisy, 4, device=dev)
        self._weights = game.weights
        self._empty = torch.zeros(0, device=dev)
        self._before: tuple[torch.Tensor, ...] | None = None   # the state a skipped step restores
        # θ's price of the W-dependent leaves comes from theta_term (the cells' counts), not
        # from the fused pass's per-example memberships (see _cell_surrogate)
        self.theta_mask = (~self.cells.depends).float()
        self._moving = self.cells.depends.float()
        self._surrogate = game.problem.make_evaluator().surrogate
        self._term: torch.Tensor | None = None
        if game.weights is None:
            raise ValueError("the soft-assignment player prices θ's moves between cells and "
                             "(timing='before_theta') moves W before θ's loss: it needs the "
                             "game's (ω, λ) (GameContext.weights)")

    def assignments(self) -> torch.Tensor:
        """The memberships played now, ``[m̂, 4, m]`` (for logging)."""
        return memberships(self.w)

    def log_scalars(self) -> dict[str, float]:
        """``soft_assignments/w/<noisy k>/<cell ŷy>/<true j>``: the table played (syncs; at
        log time), e.g. ``.../w/1/11/0`` = P(G = 0 | Ŷ = 1, Y = 1, Ĝ = 1)."""
        noisy = self.noisy_values or [str(k) for k in range(self.n_noisy)]
        w = self.assignments().tolist()
        cells = ("00", "01", "10", "11")                 # c = 2·ŷ + y
        return {f"soft_assignments/w/{k}/{cell}/{j}": float(w[kk][c][jj])
                for kk, k in enumerate(noisy) for c, cell in enumerate(cells)
                for jj, j in enumerate(self.true_values)}

    def robust_rows(self, counts: torch.Tensor) -> torch.Tensor:
        """The constraint rows ``[M]`` at the ``W`` played now, on cell counts ``[m̂, 4]``
        (e.g. a whole split's, :func:`~fairgames.noisy_groups.soft_groups.cell_counts`): the robust
        constraints as the authors' code reports them — at most the exact maximum of
        :func:`~fairgames.noisy_groups.soft_worst_case` when ``W`` is in that split's 𝒲."""
        leaves, _ = self.cells.leaves(counts.to(self.w), self.assignments())
        return self.terms.affine_rows(leaves)

    def transform(self, batch: Batch) -> Batch:
        noisy = batch.groups.get(self.noisy_attribute)
        if noisy is None:
            raise ValueError(f"the soft-assignment player reads the noisy group codes "
                             f"{self.noisy_attribute!r}; the batch has groups "
                             f"{sorted(batch.groups)}")
        if noisy.is_floating_point():
            raise ValueError(f"the noisy groups {self.noisy_attribute!r} must be hard integer "
                             "codes (soft memberships are what the player produces)")
        if len(batch.group_values[self.noisy_attribute]) != self.n_noisy:
            raise ValueError(f"the batch's {self.noisy_attribute!r} has "
                             f"{len(batch.group_values[self.noisy_attribute])} values, the noise "
                             f"model {self.n_noisy} noisy groups")
        if batch.scores is None or batch.scores.dim() != 1:
            raise ValueError("the soft-assignment player needs the scores [B] of one model "
                             "(not probabilities or a mixture)")
        codes = cell_codes(noisy, batch.scores, batch.labels)
        weights = batch.weights.detach() if batch.weights is not None else None
        counts = cell_counts(codes, self.n_noisy, weights)
        omega, lam = self._weights()
        omega, lam = omega.detach(), lam.detach()
        if self.timing == "before_theta":
            if self._before is None:
                self._before = tuple(x.clone() for x in self._state())
            with torch.no_grad():
                self._ascend(counts, omega, lam)
        else:
            self._counts += counts
        self._term = self._cell_surrogate(codes, batch, counts, omega, lam)
        member = memberships(self.w).reshape(-1, self.n_true).index_select(0, codes)
        groups = {**batch.groups, self.attribute: member}
        values = {**batch.group_values, self.attribute: self.true_values}
        return dataclasses.replace(batch, groups=groups, group_values=values)

    def theta_term(self) -> torch.Tensor | None:
        term, self._term = self._term, None
        return term

    def _cell_surrogate(self, codes: torch.Tensor, batch: Batch, counts: torch.Tensor,
                        omega: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        """θ's surrogate of the W-dependent part of ``Σ_k c_k·R_k``, linear in the cells.

        Why not the memberships the fused pass reads: they are the row of each example's
        CURRENT cell, so they price a false negative's flip at its own row (say "mostly group
        j"), while after the flip it counts with the true-positive row, which the adversary
        has emptied of group j; θ then chases a gain that W takes back at once (the authors'
        code multiplies each W row by a relaxed count of its cell for this reason). Here each
        example's flip ``(k, y) → (k, 2 + y)`` is priced at ``Δ = ∂L/∂n[k, 2+y] − ∂L/∂n[k, y]``
        (:meth:`~fairgames.noisy_groups.soft_rates.CellRates.count_gradient`, detached) times the
        surrogate of ``1[s > 0]``, the upper bound where ``Δ > 0`` and the lower where
        ``Δ < 0`` (sign-correct).
        """
        with torch.no_grad():
            costs = self.terms.leaf_costs(omega, lam, self._empty) * self._moving
            price = self.cells.count_gradient(costs, counts, memberships(self.w)).reshape(-1)
            low = codes - 2 * (codes % 4 >= 2).long()          # the cell with ŷ = 0
            delta = price.index_select(0, low + 2) - price.index_select(0, low)
            if batch.weights is not None:
                delta = delta * batch.weights.to(delta.dtype)
        upper, lower = self._surrogate.bounds(batch.scores.float())
        return (delta.clamp_min(0) * upper).sum() + (delta.clamp_max(0) * lower).sum()

    def _state(self) -> tuple[torch.Tensor, ...]:
        return self.w, self.moment, self.square, self.t

    def play(self, round: Round) -> None:
        if self.timing == "before_theta":
            before, self._before = self._before, None
            if before is not None and round.ok is not None:   # θ's step skipped: W's too
                for mine, old in zip(self._state(), before, strict=True):
                    torch.where(round.ok, mine, old, out=mine)
            return
        counts, self._counts = self._counts, torch.zeros_like(self._counts)
        self._ascend(counts, round.omega, round.lam, round.ok)

    def _ascend(self, counts: torch.Tensor, omega: torch.Tensor, lam: torch.Tensor,
                ok: torch.Tensor | None = None) -> None:
        """``steps`` projected ascent steps of ``W`` on cell ``counts`` at ``(ω, λ)``; the
        new state is written in place (kept where ``ok``; a rebinding would break the
        ``_before`` copy a skipped step restores)."""
        # At λ = 0 every W maximises λᵀg, and W = b (where it starts) can meet constraints
        # the true groups break, so λ would never leave 0: W then ascends Σ_r g_r instead.
        lam = torch.where(lam.abs().sum() > 0, lam, torch.ones_like(lam))
        costs = self.terms.leaf_costs(omega, lam, self._empty)
        projector = affine_projector(cell_fractions(counts), self.b)
        w, moment, square, t = self.w, self.moment, self.square, self.t
        for _ in range(self.steps):
            grad = self.cells.gradient(costs, counts, memberships(w))
            # the gradient's part along 𝒲's equalities (a feasible direction): Adam's
            # per-coordinate scaling would otherwise turn, e.g., "lower TPR_j for all j" into
            # a step along the simplex rows' normal that the projection then undoes
            grad = (projector[0] @ grad.reshape(-1)).view(grad.shape)
            if self.optimizer == "adam":      # ascending, its step count on the device
                ascent, moment, square, t = adam_ascent(grad, moment, square, t)
            else:
                ascent = grad
            w = dykstra(w + self.lr * ascent, projector, self.projection_iterations)
        for mine, new in zip(self._state(), (w, moment, square, t), strict=True):
            if ok is None:
                mine.copy_(new)
            else:
                torch.where(ok, new, mine, out=mine)

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.w.clone(), "moment": self.moment.clone(),
                "square": self.square.clone(), "t": self.t.clone(), "lr": self.lr.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["w"].shape) != tuple(self.w.shape):
            raise ValueError(f"the checkpoint's soft assignments have shape "
                             f"{tuple(state['w'].shape)}, this game's {tuple(self.w.shape)} "
                             "(noisy groups, cells, true groups)")
        for key in ("w", "moment", "square", "t", "lr"):
            getattr(self, key).copy_(state[key])
        self._counts.zero_()
        self._before = None

    def __repr__(self) -> str:
        return (f"SoftAssignmentPlayer({self.noisy_attribute!r}, noisy={self.n_noisy}, "
                f"true={self.n_true}, lr={self.lr_value}, steps={self.steps}, "
                f"optimizer={self.optimizer!r}, timing={self.timing!r})")
