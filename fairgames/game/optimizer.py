"""``ConstrainedOptimizer``: the game, driven like a torch optimizer.

It wraps any ``torch.optim.Optimizer`` of the model (the θ-player) and plays the other
players — multipliers λ, ψ slacks ξ, ratio slacks z — from the values recorded by
:meth:`~ConstrainedOptimizer.lagrangian`::

    copt = ConstrainedOptimizer(problem, torch.optim.Adam(model.parameters(), 1e-3))
    for x, fields in loader:
        copt.zero_grad()
        loss = copt.lagrangian(Batch(scores=model(x), **fields))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # optional
        copt.step()

One step (paper 000 Algorithm 2; which payoff each player sees is a per-player setting, see
:mod:`fairgames.game.presets`):

1. ``lagrangian(batch)`` evaluates every leaf in one fused pass (true rates and surrogate
   bounds, fp32, outside autocast), forms the leaf costs ``c(λ_t) = ω·w + λᵀA`` on the device
   and returns the θ-player's loss ``Σ c⁺·upper + c⁻·lower (+ ω·loss)``; it records the true
   rates. Several calls before one ``step`` (gradient accumulation) average their records.
2. ``step()`` steps the wrapped optimizer (θ), then the slacks (best response to λ_t, or OGD),
   then the multipliers from their gain ``∂L/∂λ = A·R + d + B·s + h(s)`` — the TRUE violations
   (no second autograd pass), or their surrogate bound for a surrogate-payoff λ-player.

With :meth:`~ConstrainedOptimizer.record_heldout` between ``lagrangian`` and ``step``, every
player but θ steps on a held-out batch's true rates instead (Cotter et al. 2019's two-dataset
game, for constraints that must hold beyond θ's training data).

With AMP pass the ``GradScaler`` to ``step(scaler)`` (then call ``scaler.update()``): when the
scaler skips θ's step the game's step is skipped too, through the scaler's ``found_inf`` tensor
in ``torch.where`` (no sync). The scaler itself reads ``found_inf`` on the host unless the
wrapped optimizer is fused (``fused=True``), which takes it on the device. Nothing in the game's
part of a step reads a device value on the host (tested with ``no_host_sync()``, on a GPU with
``torch.cuda.set_sync_debug_mode("error")``). :meth:`state_dict` covers the wrapped
optimizer, every player, the evaluator's running estimates and the monitor, so a resumed run
continues bit for bit (on CPU).

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, error_rate, positive_prediction_rate, group
    >>> from fairgames.game import Problem
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> x, g = torch.randn(64, 3), (torch.rand(64) < 0.5).long()
    >>> y = (x[:, 0] > 0).float()
    >>> model = torch.nn.Linear(3, 1)
    >>> problem = Problem(error_rate(), [positive_prediction_rate(group("g", "b")) >= 0.4])
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> for _ in range(3):
    ...     loss = copt.step_batch(model, x, labels=y, groups={"g": g},
    ...                            group_values={"g": ["a", "b"]})
    >>> copt.steps
    3
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fairgames.rates import Batch, LeafValues

from .history import InfeasibilityMonitor, StepRecord
from .players.multipliers import (
    DEFAULT_LR,
    DualContext,
    MultiplierPlayer,
    make_multiplier_player,
)
from .players.slacks import SlackPlayer
from .players.theta import BestResponsePlayer, ThetaPlayer, make_theta_player
from .presets import Preset, get_preset
from .problem import Problem

CHECKPOINT_FORMAT = 1


@dataclass
class _Pending:
    """Sums of what ``lagrangian`` recorded since the last ``step`` (device tensors)."""

    count: int
    leaves: torch.Tensor
    affine_true: torch.Tensor
    bilinear_true: torch.Tensor
    affine_surrogate: torch.Tensor | None
    bilinear_surrogate: torch.Tensor | None
    ratios: torch.Tensor | None
    objective_surrogate: torch.Tensor

    _FIELDS = ("leaves", "affine_true", "bilinear_true", "affine_surrogate",
               "bilinear_surrogate", "ratios", "objective_surrogate")

    def add(self, other: _Pending) -> None:
        self.count += other.count
        for name in self._FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is not None and theirs is not None:
                setattr(self, name, mine + theirs)

    def mean(self) -> _Pending:
        if self.count == 1:
            return self
        n = float(self.count)
        values = [getattr(self, k) for k in self._FIELDS]
        return _Pending(1, *[v / n if v is not None else None for v in values])


class ConstrainedOptimizer:
    """Plays a :class:`Problem` as a game while a torch optimizer trains the model.

    Args:
        problem: the compiled objective and constraints.
        model_optimizer: any ``torch.optim.Optimizer`` over the model's parameters.
        preset: a row of paper 000 Table 2 (name or :class:`Preset`); default
            ``"proxy_lagrangian"``. The arguments below override its choices.
        multipliers: the λ strategy name, or a ready :class:`MultiplierPlayer`.
        multiplier_lr: λ's step size (default per strategy: swap regret 1.0, gradient
            ascent 0.5, exponentiated gradient 1.0).
        radius: κ of ``‖λ‖₁ ≤ κ`` (default :data:`~fairgames.game.players.DEFAULT_RADIUS`
            = 10; the swap-regret player has none).
        multiplier_options: extra keyword arguments of the λ player (e.g. ``optimizer=``).
        theta: ``"gradient"``, ``"best_response"`` or a θ-player instance.
        psi_slacks: the ψ slack strategy (``"best_response"`` / ``"gradient"``).
        ratio_slacks: how ratio terms are played (``"linearize"``, ``"num_den"`` — paper 000
            Algorithm 3's a, b — or ``"gradient"``; see :mod:`fairgames.game.presets`).
        slack_lr: OGD step of the slacks (default: the preset's, else 0.05).
        payoffs: ``{"theta": ..., "multipliers": ...}``, each ``"true"`` or ``"surrogate"``.
        device: where the game's state lives (default: the model parameters' device).
        monitor_options: options of the :class:`InfeasibilityMonitor`.
    """

    def __init__(self, problem: Problem, model_optimizer: torch.optim.Optimizer, *,
                 preset: str | Preset | None = None,
                 multipliers: str | MultiplierPlayer | None = None,
                 multiplier_lr: float | None = None, radius: float | None = None,
                 multiplier_options: Mapping[str, Any] | None = None,
                 theta: str | ThetaPlayer | None = None, psi_slacks: str | None = None,
                 ratio_slacks: str | None = None, slack_lr: float | None = None,
                 psi_steps: int = 100, payoffs: Mapping[str, str] | None = None,
                 device: torch.device | str | None = None,
                 monitor_options: Mapping[str, Any] | None = None) -> None:
        if not isinstance(problem, Problem):
            raise TypeError(f"problem must be a fairgames.game.Problem, got "
                            f"{type(problem).__name__}")
        if not isinstance(model_optimizer, torch.optim.Optimizer):
            raise TypeError("model_optimizer must be a torch.optim.Optimizer over the model's "
                            f"parameters, got {type(model_optimizer).__name__}")
        self.problem = problem
        self.model_optimizer = model_optimizer
        base = get_preset(preset)
        changes: dict[str, Any] = {}
        if isinstance(multipliers, str):
            changes["multipliers"] = multipliers
        if isinstance(theta, str):
            changes["theta"] = theta
        if psi_slacks is not None:
            changes["psi_slacks"] = psi_slacks
        if ratio_slacks is not None:
            changes["ratio_slacks"] = ratio_slacks
        for who, payoff in dict(payoffs or {}).items():
            if who not in ("theta", "multipliers"):
                raise ValueError(f"payoffs are set for 'theta' and 'multipliers' (the slacks "
                                 f"see λ only), got {who!r}")
            changes["theta_payoff" if who == "theta" else "multiplier_payoff"] = payoff
        if isinstance(theta, BestResponsePlayer) and base.theta != "best_response":
            changes["theta"] = "best_response"
            changes.setdefault("theta_payoff", "true" if theta.oracle else "surrogate")
        self.preset = base.replace(**changes) if changes else base
        if device is None:
            device = _parameter_device(model_optimizer)
        self.device = torch.device(device)
        self.terms = problem.compile(self.preset.ratio_slacks).on(self.device)
        self.evaluator = problem.make_evaluator().to(self.device).train()
        self._check_payoffs()
        strategy = multipliers if isinstance(multipliers, MultiplierPlayer) else (
            self.preset.multipliers)
        lr = multiplier_lr
        same = isinstance(strategy, str) and strategy == base.multipliers
        if lr is None and same:
            lr = self.preset.multiplier_lr
        if radius is None and same:
            radius = self.preset.radius
        if lr is None and isinstance(strategy, str):
            lr = DEFAULT_LR.get(strategy)
        if slack_lr is None:
            slack_lr = self.preset.slack_lr if self.preset.slack_lr is not None else 0.05
        self.multipliers = make_multiplier_player(
            strategy, self.terms.num_rows, lr=lr, radius=radius, device=self.device,
            **dict(multiplier_options or {}))
        if self.multipliers.name == "follow_the_leader" and (
                self.terms.has_ratios or self.terms.num_linear):
            raise ValueError("follow-the-leader λ plays the best response to the running mean of "
                             "the rows, which ratio terms do not have (they are not linear in the "
                             "rates); use gradient_ascent or swap_regret for ratio terms")
        self.theta: ThetaPlayer = make_theta_player(
            theta if theta is not None and not isinstance(theta, str) else self.preset.theta)
        self.slacks: SlackPlayer | None = None
        if self.terms.has_slacks:
            self.slacks = SlackPlayer(self.terms, psi=self.preset.psi_slacks, lr=slack_lr,
                                      psi_steps=psi_steps)
        self.monitor = InfeasibilityMonitor(device=self.device, **dict(monitor_options or {}))
        self._equality = torch.tensor(
            [1.0 if c.sense == "==" else 0.0 for c in problem.constraints.values()],
            device=self.device)
        self._empty = torch.zeros(0, device=self.device)
        self.steps = 0
        self.last: StepRecord | None = None
        self._hooks: list[Callable[[StepRecord], None]] = []
        self._pending: _Pending | None = None
        self._heldout: _Pending | None = None

    # ------------------------------------------------------------------ configuration
    def _check_payoffs(self) -> None:
        p = self.preset
        if p.multiplier_payoff == "surrogate" and not self.problem.surrogate.in_unit_interval:
            # Remark 3: "unless the surrogates are also bounded in the same range" — a
            # smooth approximation (sigmoid, ramp) keeps every surrogate rate in [0, 1], and
            # the λ-player's payoff then stays inside ψ's domain (its boundary is clamped).
            bad = self.terms.non_monotone_terms()
            if bad:
                raise ValueError(
                    f"preset {p.name!r}: the λ-player sees surrogate rates, but {bad} is "
                    "monotone in neither direction in a model-dependent argument (e.g. KLD's "
                    f"p̂): the {self.problem.surrogate.kind} bounds leave ψ's domain, so this "
                    "game cannot be played on them (paper 000 Remark 3). Use a true-payoff "
                    "λ-player (algorithm2, proxy_lagrangian), or a surrogate bounded in "
                    "[0, 1] (surrogate='sigmoid' or 'ramp')")
        if p.theta == "gradient" and p.theta_payoff == "true":  # pragma: no cover - Preset checks
            raise ValueError("a gradient θ-player needs surrogate rates")
        if not self.problem.surrogate.is_bound and p.theta_payoff == "surrogate":
            # Smooth approximations are allowed: they are not bounds, so 'upper'/'lower' agree.
            pass

    # ------------------------------------------------------------------ torch-optimizer API
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's parameter groups (so LR schedulers and clipping see them)."""
        return self.model_optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model_optimizer.zero_grad(set_to_none=set_to_none)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ω, λ)``: the objective's weight and the multipliers (device tensors)."""
        return self.multipliers.weights()

    def lagrangian(self, batch: Batch, values: LeafValues | None = None) -> torch.Tensor:
        """The θ-player's loss on a batch (differentiable in the scores); records the batch's
        true rates for :meth:`step`. ``values`` may pass a precomputed evaluator result."""
        if not isinstance(batch, Batch):
            raise TypeError(f"lagrangian() takes a fairgames.rates.Batch, got "
                            f"{type(batch).__name__}")
        omega, lam = self.multipliers.weights()
        autocast = torch.is_autocast_enabled(self.device.type)
        if values is None:
            # One pass: the costs are formed from the batch's true rates inside it, and the
            # loss is one autograd node (see RateEvaluator.combination_bound).
            used: list[tuple[torch.Tensor, torch.Tensor] | None] = []

            def costs(true: torch.Tensor) -> torch.Tensor:
                c, ratios = self._leaf_costs(true, omega, lam)
                used.append(ratios)
                return c

            loss, values = self.evaluator.combination_bound(batch, costs)
            true, ratios = values.true, used[0]
        elif autocast:
            with torch.autocast(device_type=self.device.type, enabled=False):
                loss, true, ratios = self._rates_loss(values, omega, lam)
        else:
            loss, true, ratios = self._rates_loss(values, omega, lam)
        if self.problem.loss is not None:
            extra = self.problem.loss(batch.scores, batch)
            if not isinstance(extra, torch.Tensor) or extra.dim() != 0:
                raise ValueError("the problem's loss must return a scalar tensor, got "
                                 f"{getattr(extra, 'shape', type(extra).__name__)}")
            loss = torch.addcmul(loss, omega, extra.float())       # loss + ω·extra
        if autocast:
            with torch.no_grad(), torch.autocast(device_type=self.device.type, enabled=False):
                rec = self._record(values, true, ratios, loss)
        else:
            with torch.no_grad():
                rec = self._record(values, true, ratios, loss)
        if self._pending is None:
            self._pending = rec
        else:
            self._pending.add(rec)
        return loss

    @torch.no_grad()
    def record_heldout(self, batch: Batch) -> None:
        """Record the true rates of a held-out batch: at the next :meth:`step` the multipliers,
        the slacks and the monitor play on these instead of :meth:`lagrangian`'s batches,
        while θ still descends the surrogate Lagrangian of its own data.

        This is Cotter et al. (2019)'s two-dataset game ("Training well-generalizing
        classifiers for fairness metrics and other data-dependent constraints", Algorithm 2):
        λ only ever sees constraint values on data θ is not fitted to, so it keeps raising the
        price of a constraint that θ satisfies on its training data but not beyond it. Several
        calls before one ``step`` average their records, like :meth:`lagrangian`'s. The batch's
        scores need no gradient (evaluate the model under ``torch.no_grad()``); the step's
        :class:`~fairgames.game.StepRecord` (violations, ``leaves_true``) is then on the
        held-out data.

        Example:
            >>> import torch
            >>> from fairgames.rates import Batch, error_rate, positive_prediction_rate
            >>> from fairgames.game import Problem
            >>> problem = Problem(error_rate(), [positive_prediction_rate() >= 0.9])
            >>> model = torch.nn.Linear(2, 1)
            >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), 0.1))
            >>> x, y = torch.randn(32, 2), (torch.rand(32) < 0.5).float()
            >>> xh, yh = torch.randn(16, 2), (torch.rand(16) < 0.5).float()
            >>> copt.zero_grad()
            >>> copt.lagrangian(Batch(scores=model(x)[:, 0], labels=y)).backward()
            >>> with torch.no_grad():
            ...     heldout_scores = model(xh)[:, 0]
            ...     copt.record_heldout(Batch(scores=heldout_scores, labels=yh))
            >>> copt.step()
            >>> held_ppr = (heldout_scores > 0).float().mean()
            >>> bool(torch.isclose(copt.last.constraints_true[0], 0.9 - held_ppr))
            True
        """
        if not isinstance(batch, Batch):
            raise TypeError(f"record_heldout() takes a fairgames.rates.Batch, got "
                            f"{type(batch).__name__}")
        if isinstance(self.theta, BestResponsePlayer):
            raise ValueError("record_heldout() needs a gradient θ-player: a best-response "
                             "θ-player computes the multipliers' step inside step_batch")
        if torch.is_autocast_enabled(self.device.type):
            with torch.autocast(device_type=self.device.type, enabled=False):
                rec = self._heldout_record(batch)
        else:
            rec = self._heldout_record(batch)
        if self._heldout is None:
            self._heldout = rec
        else:
            self._heldout.add(rec)

    def _heldout_record(self, batch: Batch) -> _Pending:
        # update=False: the running proportion estimates belong to θ's (mini)batches.
        values = self.evaluator(batch, update=False)
        t = self.terms
        ratios = t.ratio_values(values.true) if t.num_linear else None
        return self._record(values, values.true, ratios, self._empty.sum())

    def _leaf_costs(self, true: torch.Tensor, omega: torch.Tensor, lam: torch.Tensor
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """The leaf costs ``c(ω, λ)`` at this batch's true rates (the ratio slacks and the
        linearised ratios read them), with the linearised ratios used."""
        t = self.terms
        slacks = self._empty
        if t.num_bilinear:      # ratio rows put the ratio slacks into the leaf costs
            assert self.slacks is not None
            slacks = self.slacks.current(true)
        ratios = t.ratio_values(true) if t.num_linear else None
        return t.leaf_costs(omega, lam, slacks, ratios), ratios

    def _rates_loss(self, values: LeafValues, omega: torch.Tensor, lam: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor,
                               tuple[torch.Tensor, torch.Tensor] | None]:
        """``Σ c⁺·upper + c⁻·lower`` at the leaf costs of ``(ω, λ)`` (fp32, outside autocast)
        from precomputed leaf values, with the true leaf values and the linearised ratios."""
        t = self.terms
        true = values.true.detach() if values.true.requires_grad else values.true
        costs, ratios = self._leaf_costs(true, omega, lam)
        if values.flat_bounds is not None:
            loss = t.surrogate_flat(costs, values.flat_bounds)
        else:
            loss = t.surrogate(costs, values.upper, values.lower)
        return loss, true, ratios

    def _record(self, values: LeafValues, true: torch.Tensor,
                ratios: tuple[torch.Tensor, torch.Tensor] | None, loss: torch.Tensor
                ) -> _Pending:
        """What :meth:`step` needs of this call (device tensors, no graph)."""
        t = self.terms
        affine_sur = bilinear_sur = None
        if self.preset.multiplier_payoff == "surrogate":
            upper, lower = values.upper.detach(), values.lower.detach()
            affine_sur = t.affine_rows_bound(upper, lower)
            if t.num_bilinear:
                bilinear_sur = t.bilinear_values_bound(upper, lower)
        return _Pending(
            count=1, leaves=true, affine_true=t.affine_rows(true),
            bilinear_true=t.bilinear_values(true) if t.num_bilinear else self._empty,
            affine_surrogate=affine_sur, bilinear_surrogate=bilinear_sur,
            ratios=ratios[0] if ratios is not None else None,
            objective_surrogate=loss.detach())

    def step(self, scaler: torch.amp.GradScaler | None = None) -> None:
        """Step θ (the wrapped optimizer, through ``scaler`` if given), then the other players
        from the values recorded by :meth:`lagrangian` since the last step."""
        if self._pending is None:
            raise RuntimeError("step() needs the values of a lagrangian() call: call "
                               "copt.lagrangian(batch) and backward() first")
        ok = None
        if scaler is not None and scaler.is_enabled():
            scaler.step(self.model_optimizer)
            ok = _scaler_ok(scaler, self.model_optimizer, self.device)
        else:
            self.model_optimizer.step()
        self._play(ok)

    def step_batch(self, model: torch.nn.Module, inputs: torch.Tensor, **fields: Any
                   ) -> torch.Tensor:
        """One whole game step on a batch: scores = ``model(inputs)``, ``fields`` are the
        other :class:`Batch` arguments (``labels``, ``groups``, ``group_values``, ...).
        Returns the θ-player's loss (detached). A best-response θ-player runs here."""
        if isinstance(self.theta, BestResponsePlayer):
            return self._best_response_step(model, inputs, fields)
        self.zero_grad()
        loss = self.lagrangian(_batch(model, inputs, fields))
        loss.backward()
        self.step()
        return loss.detach()

    # ------------------------------------------------------------------ the game's step
    def _play(self, ok: torch.Tensor | None) -> None:
        assert self._pending is not None
        pend = self._pending.mean()
        self._pending = None
        if self._heldout is not None:
            # The two-dataset game: every player but θ sees the held-out rates (see
            # record_heldout); the θ-player's surrogate Lagrangian is still reported.
            objective_surrogate = pend.objective_surrogate
            pend = self._heldout.mean()
            pend.objective_surrogate = objective_surrogate
            self._heldout = None
        omega, lam = self.multipliers.weights_snapshot()
        if torch.is_autocast_enabled(self.device.type):
            with torch.no_grad(), torch.autocast(device_type=self.device.type, enabled=False):
                record = self._play_players(pend, omega, lam, ok)
        else:
            with torch.no_grad():
                record = self._play_players(pend, omega, lam, ok)
        self.last = record
        self.steps += 1
        for hook in self._hooks:
            hook(record)

    def _play_players(self, pend: _Pending, omega: torch.Tensor, lam: torch.Tensor,
                      ok: torch.Tensor | None) -> StepRecord:
        """Slacks, multipliers and the monitor from one step's records (see :meth:`step`)."""
        t = self.terms
        leaves = pend.leaves
        fixed = t.fixed_values(leaves) if t.num_fixed else self._empty
        slacks = self._empty
        if self.slacks is not None:
            slacks = self.slacks.play(omega, lam, fixed, leaves, pend.bilinear_true, ok)
        rows_true = t.row_values(pend.affine_true, pend.bilinear_true, slacks, fixed,
                                 pend.ratios)
        affine, gain, rows_sur = pend.affine_true, rows_true, rows_true
        if pend.affine_surrogate is not None:      # a surrogate-payoff λ-player
            bil = (pend.bilinear_surrogate if pend.bilinear_surrogate is not None
                   else self._empty)
            rows_sur = t.row_values(pend.affine_surrogate, bil, slacks, fixed, pend.ratios)
            affine, gain = pend.affine_surrogate, rows_sur
        context = None
        if self.multipliers.name == "follow_the_leader":
            context = DualContext(affine, fixed, self._gain_at(slacks), t.has_psi,
                                  t.psi_leader)
        self.multipliers.update(gain, ok=ok, context=context)
        if t.affine_only:
            objective_true, constraints_true = t.truth_from_rows(leaves, rows_true)
            viol = t.max_violation_from_rows(rows_true)
        else:
            objective_true, constraints_true = t.truth(leaves)
            if constraints_true.numel():
                # max(g, 0) for g <= 0 rows and |g| for g == 0 rows, in three ops.
                viol = torch.maximum(constraints_true,
                                     -constraints_true * self._equality).max()
            else:
                viol = self._empty.sum()
        self.monitor.update(viol, self.multipliers.saturation(), ok)
        return StepRecord(
            step=self.steps, objective_true=objective_true,
            objective_surrogate=pend.objective_surrogate, constraints_true=constraints_true,
            rows_true=rows_true, rows_surrogate=rows_sur, objective_weight=omega,
            multipliers=lam, slacks=slacks, leaves_true=leaves)

    def _gain_at(self, slacks: torch.Tensor
                 ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        t, steps = self.terms, (self.slacks.psi_steps if self.slacks is not None else 100)
        one, empty = torch.ones((), device=self.device), self._empty

        def gain_at(lam: torch.Tensor, affine: torch.Tensor, fixed: torch.Tensor
                    ) -> torch.Tensor:
            s = t.psi_best_response(one, lam, slacks, fixed, steps=steps)
            return t.row_values(affine, empty, s, fixed)

        return gain_at

    def _best_response_step(self, model: torch.nn.Module, inputs: torch.Tensor,
                            fields: Mapping[str, Any]) -> torch.Tensor:
        theta = self.theta
        assert isinstance(theta, BestResponsePlayer)
        omega, lam = (w.detach().clone() for w in self.multipliers.weights())
        costs = self.terms.leaf_costs(omega, lam, *self._ratio_state_now(model, inputs, fields))
        if theta.oracle is not None:
            theta.oracle(costs, omega)
        else:
            for _ in range(theta.steps):
                self.zero_grad()
                batch = _batch(model, inputs, fields)
                values = self.evaluator(batch, update=False)
                loss = self.terms.surrogate(costs, values.upper, values.lower)
                if self.problem.loss is not None:
                    loss = loss + omega * self.problem.loss(batch.scores, batch).float()
                loss.backward()
                self.model_optimizer.step()
        self.zero_grad()
        with torch.no_grad():
            loss = self.lagrangian(_batch(model, inputs, fields))
        self._play(None)
        return loss.detach()

    def _ratio_state_now(self, model: torch.nn.Module, inputs: torch.Tensor,
                         fields: Mapping[str, Any]
                         ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Ratio slacks and linearised ratios at the current model (best-response θ-player)."""
        t = self.terms
        if not (t.num_bilinear or t.num_linear):
            return self._empty, None
        with torch.no_grad():
            leaves = self.evaluator(_batch(model, inputs, fields), update=False).true
        slacks = self.slacks.current(leaves) if self.slacks is not None else self._empty
        return slacks, (t.ratio_values(leaves) if t.num_linear else None)

    # ------------------------------------------------------------------ logging
    def register_history_hook(self, hook: Callable[[StepRecord], None]) -> Callable[[], None]:
        """Call ``hook(record)`` after every step with device tensors (no sync is made; the
        hook decides when to read them). Returns a function that removes the hook."""
        self._hooks.append(hook)
        return lambda: self._hooks.remove(hook)

    def multipliers_by_name(self) -> dict[str, float]:
        """``{row name: λ}`` plus ``"objective_weight"`` (syncs; for logging)."""
        omega, lam = self.multipliers.weights()
        out = {"objective_weight": float(omega)}
        out.update(zip(self.terms.row_names, lam.tolist(), strict=True))
        return out

    def likely_infeasible(self) -> bool:
        """True when multipliers sit at their bound while violations do not shrink (syncs;
        read at logging time). See :class:`~fairgames.game.history.InfeasibilityMonitor`."""
        return self.monitor.likely_infeasible()

    def infeasibility_report(self) -> dict[str, float]:
        """The monitor's averages (syncs)."""
        return self.monitor.summary()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the game exactly (the model's own parameters are the
        caller's to save)."""
        if self._pending is not None or self._heldout is not None:
            raise RuntimeError("state_dict() between lagrangian() (or record_heldout()) and "
                               "step(): the recorded values would be lost; save after step()")
        return {
            "format": CHECKPOINT_FORMAT,
            "preset": self.preset.name,
            "rows": list(self.terms.row_names),
            "slack_names": list(self.terms.slack_names),
            "steps": self.steps,
            "model_optimizer": self.model_optimizer.state_dict(),
            "multipliers": {"strategy": self.multipliers.name,
                            "state": self.multipliers.state_dict()},
            "slacks": self.slacks.state_dict() if self.slacks is not None else None,
            "evaluator": self.evaluator.state_dict(),
            "monitor": self.monitor.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (checks that the problem and strategy match)."""
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"unknown checkpoint format {state.get('format')!r}")
        if list(state["rows"]) != self.terms.row_names:
            raise ValueError(f"the checkpoint's multiplier rows {state['rows']} do not match "
                             f"this problem's {self.terms.row_names}")
        if state["multipliers"]["strategy"] != self.multipliers.name:
            raise ValueError(f"the checkpoint was played by {state['multipliers']['strategy']}"
                             f", this optimizer uses {self.multipliers.name}")
        self.model_optimizer.load_state_dict(state["model_optimizer"])
        self.multipliers.load_state_dict(state["multipliers"]["state"])
        if self.slacks is not None:
            self.slacks.load_state_dict(state["slacks"])
        self.evaluator.load_state_dict(state["evaluator"])
        self.monitor.load_state_dict(state["monitor"])
        self.steps = int(state["steps"])
        self._pending = None
        self._heldout = None

    def __repr__(self) -> str:
        return (f"ConstrainedOptimizer(preset={self.preset.name}, multipliers="
                f"{self.multipliers.name}, rows={self.terms.num_rows}, "
                f"slacks={self.terms.num_slacks}, theta={self.theta.name})")


def _parameter_device(opt: torch.optim.Optimizer) -> torch.device:
    for group in opt.param_groups:
        for p in group["params"]:
            return p.device
    raise ValueError("the model optimizer has no parameters")


def _batch(model: torch.nn.Module, inputs: torch.Tensor, fields: Mapping[str, Any]) -> Batch:
    if "scores" in fields:
        raise TypeError("step_batch computes the scores from the model; do not pass scores=")
    scores = model(inputs)
    if scores.dim() == 2 and scores.shape[1] == 1:
        scores = scores[:, 0]
    return Batch(scores=scores, **fields)


def _scaler_ok(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
               device: torch.device) -> torch.Tensor | None:
    """``True`` on the device when the scaler did not skip ``optimizer``'s step (no sync)."""
    state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
    found = state.get("found_inf_per_device", {})
    if not found:
        return None
    total = sum(v.to(device, torch.float32) for v in found.values())
    return total == 0
