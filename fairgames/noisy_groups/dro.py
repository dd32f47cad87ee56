"""The DRO adversary of paper 004 (Wang et al. 2020, Sec. 4 / Algorithm 2): one distribution
``p̃_j`` over the training rows per noisy group ``j``, in the TV ball
``‖p̃_j − p̂_j‖₁ <= 2γ_j`` intersected with the simplex around ``p̂_j``, uniform over the rows
whose noisy group is ``j``.

How it enters the game: :meth:`DROPlayer.transform` replaces the noisy attribute's hard codes
by soft memberships ``m_ij = n_j · p̃_j[id_i]`` gathered by example id (``n_j`` the number of
training rows of noisy group ``j``), so at ``p̃ = p̂`` every membership is today's 0/1 and every
rate is today's; a group rate ``Σ m y ŷ / Σ m y`` then becomes the ``p̃_j``-weighted one, while
unmasked rates stay unweighted (the evaluator's "no value" cell takes ``1 − Σ_j m_ij``).

Its gradient (``ascent``): for ``λ ≥ 0``, ``argmax_{p̃} Σ_r λ_r f_r(θ, p̃)`` contains the
maximisers of the unweighted ``Σ_r f_r(θ, p̃)``, so ascending the constraints themselves is a
best-response direction for every ``λ`` — and, unlike Algorithm 2's ``λ``-scaled step, it does
not vanish at ``λ = 0``. There, a model that meets the noisy-group constraints would keep
``p̃ = p̂`` (where it starts) for good, the robust constraint would never show as violated
and ``λ`` would never leave 0 (the paper's algorithm as written stalls so; the authors' code
starts ``p̃`` at 0 instead). ``"unscaled"`` (default; a deliberate deviation from the paper)
takes ``∂/∂p̃ Σ_r f_r``: :meth:`transform` hands θ's pass memberships of a detached ``p̃``
and evaluates the surrogate constraint rows once more on the batch's detached scores
(``ω = 0``, every ``λ_r = 1``; rows that do not read the attribute add nothing), keeping
their gradient in ``p̃`` — device ops, a second rates pass, θ's gradient untouched. The
best-response argument is exact when each ``p̃_j`` enters one row (one TPR row per group);
with several it ascends their sum (TPR and FPR rows: both adverse moves), and rows of
opposite sign on one group cancel there (``|r_j − r| <= ε``, a KLD's ψ-slack rows): use
``"scaled"`` for those.
``"scaled"`` (Algorithm 2, ``λ_r``-weighted): the memberships carry ``p̃``'s autograd graph,
so θ's own ``backward`` of the Lagrangian also leaves ``∂L/∂p̃`` in ``p̃.grad``, with no
second pass. Either way θ's gradient is unchanged (the memberships do not depend on θ).
:meth:`play` (order 30: θ → λ → p̃, the paper's) then takes ``steps`` projected ascent steps
(SGD or Adam, Adam's moments kept here) with that gradient and clears it; a step the game
skipped (non-finite, AMP) leaves ``p̃`` as it was.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch
    >>> codes = torch.tensor([0, 0, 1, 1])
    >>> dro = DROPlayer("g", codes, gamma=[0.1, 0.1])
    >>> dro.bind_device(torch.device("cpu"))
    >>> b = Batch(scores=torch.zeros(4), labels=torch.ones(4), groups={"g": codes},
    ...           group_values={"g": ["a", "b"]}, example_ids=torch.arange(4))
    >>> dro.transform(b).groups["g"].tolist()
    [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from fairgames.game.players.base import GameContext, Player, adam_ascent, lr_group, step_size
from fairgames.game.projections import project_tv_authors, project_tv_simplex
from fairgames.rates import Batch

OPTIMIZERS = ("sgd", "adam")
PROJECTIONS = ("exact", "authors")
ASCENTS = ("unscaled", "scaled")


class DROPlayer(Player):
    """The TV-ball adversary ``p̃`` (see the module docstring).

    Args:
        attribute: the noisy group attribute the problem's constraints read.
        codes: ``[n]`` int64 noisy group codes of the training rows, in example-id order.
        gamma: ``γ_j`` per group value (a sequence of ``G``) or one for all; the ball's ℓ₁
            radius is ``2γ_j``.
        lr: step size of the ascent.
        optimizer: ``"adam"`` (the authors' code) or ``"sgd"``.
        steps: projected steps per game step (each with the step's gradient).
        projection: ``"exact"`` (Euclidean onto TV ball ∩ simplex) or ``"authors"`` (the
            released code's: ℓ₁ ball only, ``Σ p̃ = 1`` not enforced).
        ascent: ``"unscaled"`` (ascend the constraints themselves; moves at ``λ = 0``) or
            ``"scaled"`` (Algorithm 2's ``λ``-weighted step); see the module docstring.
        order: place in the update order (30: after θ 0 and the multipliers 20).
        names: the group values' names (for logging; default their codes).
    """

    name = "dro"
    strategy = "dro"
    data_parallel = False     # per-example (per-rank) state; refused under a process group

    def __init__(self, attribute: str, codes: torch.Tensor, gamma: float | Sequence[float], *,
                 lr: float = 0.01, optimizer: str = "adam", steps: int = 1,
                 projection: str = "exact", ascent: str = "unscaled", order: int = 30,
                 names: Sequence[str] | None = None) -> None:
        if not isinstance(codes, torch.Tensor) or codes.dim() != 1 or codes.dtype != torch.int64:
            raise ValueError("codes must be the [n] int64 noisy group codes of the training rows")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"DRO optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if projection not in PROJECTIONS:
            raise ValueError(f"DRO projection must be one of {PROJECTIONS}, got {projection!r}")
        if ascent not in ASCENTS:
            raise ValueError(f"DRO ascent must be one of {ASCENTS}, got {ascent!r}")
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"DRO steps must be a positive integer, got {steps!r}")
        g = len(gamma) if isinstance(gamma, Sequence) else int(codes.max()) + 1
        counts = torch.bincount(codes.cpu(), minlength=g)
        if len(counts) != g:
            raise ValueError(f"gamma has {g} values but the codes reach {len(counts) - 1}")
        empty = [j for j in range(g) if counts[j] == 0]
        if empty:
            raise ValueError(f"noisy group(s) {empty} of {attribute!r} have no training row: "
                             "DRO needs every noisy group in the training split")
        gam = [float(v) for v in (gamma if isinstance(gamma, Sequence) else [gamma] * g)]
        if any(not 0.0 <= v <= 1.0 for v in gam):
            raise ValueError(f"gamma must lie in [0, 1] (a TV distance), got {gam}")
        self.attribute, self.codes, self.gamma = attribute, codes, gam
        self.counts = counts
        self.lr_value, self.kind, self.steps = float(lr), optimizer, steps
        self.projection, self.ascent, self.order = projection, ascent, int(order)
        self._rows: tuple[Any, Any] | None = None     # (evaluator, terms) of "unscaled"
        self._grad: torch.Tensor | None = None
        self.names = list(names) if names is not None else None
        step_size(lr, None, "DRO lr")

    # ------------------------------------------------------------------ state
    def bind(self, game: GameContext) -> None:
        self.bind_device(game.device)
        if self.ascent == "unscaled":
            if game.terms.num_bilinear:
                raise ValueError("DRO ascent='unscaled' reads the constraint rows at unit "
                                 "multipliers, which ratio-slack rows do not allow: use "
                                 "ascent='scaled'")
            # a private evaluator: its pass must not touch the game's running estimates
            self._rows = (game.problem.make_evaluator().to(game.device).eval(), game.terms)
            self._unit = (torch.zeros((), device=game.device),
                          torch.ones(game.terms.num_rows, device=game.device),
                          torch.zeros(0, device=game.device))

    def bind_device(self, device: torch.device) -> None:
        """Allocate ``p̃ = p̂`` and the optimizer state on ``device``."""
        g = len(self.gamma)
        codes = self.codes.to(device)
        onehot = torch.nn.functional.one_hot(codes, g).T.float()       # [G, n]
        self.scale = self.counts.float().to(device)                      # n_j
        self.center = onehot / self.scale[:, None]                       # p̂_j
        self.radius = 2 * torch.tensor(self.gamma, device=device)
        self.p = self.center.clone().requires_grad_(True)
        self.lr = step_size(self.lr_value, device, "DRO lr")
        self.m1 = torch.zeros_like(self.center)
        self.m2 = torch.zeros_like(self.center)
        self.t = torch.zeros((), device=device)

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def state_dict(self) -> dict[str, Any]:
        return {"p": self.p.detach().clone(), "m1": self.m1.clone(), "m2": self.m2.clone(),
                "t": self.t.clone(), "lr": self.lr.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["p"].shape != self.p.shape:
            raise ValueError(f"the checkpoint's DRO adversary has shape "
                             f"{tuple(state['p'].shape)}, this one {tuple(self.p.shape)} "
                             "(another training split or noisy attribute)")
        with torch.no_grad():
            self.p.copy_(state["p"])
            for name in ("m1", "m2", "t", "lr"):
                getattr(self, name).copy_(state[name])

    # ------------------------------------------------------------------ the game
    def transform(self, batch: Batch) -> Batch:
        """The batch with the noisy attribute's memberships ``n_j · p̃_j[id]`` ``[B, G]``."""
        ids = batch.example_ids
        if ids is None:
            raise ValueError("the DRO player reweights examples by id: the batch needs "
                             "example_ids (row indices in the training split; the engine "
                             "fills them)")
        if self.attribute not in batch.groups:
            raise ValueError(f"the DRO player's attribute {self.attribute!r} is not in the "
                             f"batch ({sorted(batch.groups)})")
        p = self.p if self._rows is None else self.p.detach()   # "unscaled": its own pass
        try:
            weights = p.index_select(1, ids) * self.scale[:, None]
        except (IndexError, RuntimeError) as e:
            raise ValueError(f"an example id is out of range: the DRO adversary has "
                             f"{self.p.shape[1]} training rows (ids 0..{self.p.shape[1] - 1}); "
                             "pass the row indices of the training split the player was "
                             "built on") from e
        if self._rows is not None:
            self._ascend_rows(batch, ids)
        groups = {**batch.groups, self.attribute: weights.T}
        return dataclasses.replace(batch, groups=groups)

    def _ascend_rows(self, batch: Batch, ids: torch.Tensor) -> None:
        """Add ``∂/∂p̃ Σ_r f_r`` on ``batch`` (surrogate rows, detached scores) to the
        step's direction (the ``"unscaled"`` ascent; device ops only)."""
        evaluator, terms = self._rows  # type: ignore[misc]
        scores = batch.scores.detach() if batch.scores is not None else None
        probs = batch.probabilities
        probs = probs.detach() if probs is not None else None
        device = self.p.device.type
        with torch.enable_grad(), torch.autocast(device_type=device, enabled=False):
            weights = self.p.index_select(1, ids) * self.scale[:, None]
            mine = dataclasses.replace(batch, scores=scores, probabilities=probs,
                                       groups={**batch.groups, self.attribute: weights.T})
            values = evaluator(mine, update=False)
            ratios = terms.ratio_values(values.true) if terms.num_linear else None
            costs = terms.leaf_costs(*self._unit, ratios)
            rows = terms.surrogate(costs, values.upper, values.lower)
            (grad,) = torch.autograd.grad(rows, self.p, allow_unused=True)
        if grad is not None:
            self._grad = grad if self._grad is None else self._grad + grad

    def play(self, round: Any) -> None:
        grad = self.p.grad if self._rows is None else self._grad
        self._grad = None
        if grad is None:          # nothing read the memberships (no pass this step)
            return
        ok = getattr(round, "ok", None)
        state = (self.p, self.m1, self.m2, self.t)
        old = [t.detach().clone() for t in state] if ok is not None else None
        with torch.no_grad():
            for _ in range(self.steps):
                self.p.add_(self._direction(grad))
                self.p.copy_(self._project(self.p))
            if old is not None:       # a skipped step moves nothing, Adam's moments included
                for t, before in zip(state, old, strict=True):
                    t.copy_(torch.where(ok, t, before))
        self.p.grad = None

    def _direction(self, grad: torch.Tensor) -> torch.Tensor:
        """The ascent step ``η·g`` (SGD) or Adam's (β = 0.9, 0.999, ε = 1e-8)."""
        if self.kind == "sgd":
            return self.lr * grad
        ascent, *state = adam_ascent(grad, self.m1, self.m2, self.t)
        for mine, new in zip((self.m1, self.m2, self.t), state, strict=True):
            mine.copy_(new)
        return self.lr * ascent

    def _project(self, p: torch.Tensor) -> torch.Tensor:
        if self.projection == "exact":
            return project_tv_simplex(p, self.center, self.radius)
        return project_tv_authors(p, self.center, self.radius)

    def distance(self) -> torch.Tensor:
        """``½‖p̃_j − p̂_j‖₁`` per group (the adversary's TV distance; a device tensor)."""
        return (self.p.detach() - self.center).abs().sum(1) / 2

    def log_scalars(self) -> dict[str, float]:
        """``dro/distance/<value>``: the TV distance per group (syncs; at log time)."""
        names = self.names or [str(j) for j in range(len(self.gamma))]
        return {f"dro/distance/{n}": float(d)
                for n, d in zip(names, self.distance().tolist(), strict=True)}
