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
2. ``step(closure=None)`` plays every player in turn (:mod:`fairgames.game.players.base`):
   θ steps the wrapped optimizer (evaluating ``closure`` first, as torch optimizers do; a
   best-response θ calls it for its inner loop), then the slacks (best response to λ_t, or
   OGD), then the multipliers from their gain ``∂L/∂λ = A·R + d + B·s + h(s)`` — the TRUE
   violations (no second autograd pass), or their surrogate bound for a surrogate-payoff
   λ-player — then the monitor. Extra players (``players=``) join the same list.

It is a ``torch.optim.Optimizer``: :attr:`~ConstrainedOptimizer.param_groups` holds θ's groups
(the wrapped optimizer's own dicts) and one group per other player with a step size, tagged
``"player": name``, so ``torch.optim.lr_scheduler`` drives the dual as well as θ.

With :meth:`~ConstrainedOptimizer.record_heldout` between ``lagrangian`` and ``step``, every
player but θ steps on a held-out batch's true rates instead (Cotter et al. 2019's two-dataset
game, for constraints that must hold beyond θ's training data).

With AMP pass the ``GradScaler`` to ``step(scaler=scaler)`` (then call ``scaler.update()``):
when the scaler skips θ's step the game's step is skipped too, through the scaler's
``found_inf`` tensor in ``torch.where`` (no sync). The scaler itself reads ``found_inf`` on the
host unless the wrapped optimizer is fused (``fused=True``), which takes it on the device.
Nothing in the game's
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
    >>> [(group.get("player"), len(group["params"])) for group in copt.param_groups]
    [('theta', 2), ('multipliers', 0)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.optim import optimizer as _torch_optimizer

from fairgames.rates import Batch, LeafValues, RatesError

from .capture import CapturedStep
from .distributed import refuse_local_state, resolve_process_group, scale_gradient
from .finite import FiniteGuard
from .history import StepRecord
from .players.base import GameContext, Player
from .players.multipliers import MultiplierPlayer
from .players.roster import Roster
from .players.theta import ThetaPlayer
from .presets import PlayerOptions, Preset, resolve_game_preset
from .problem import Problem
from .round import RecordBuffer, Round
from .theta_loss import ThetaLoss

# torch's global optimizer step hooks (torch.optim.optimizer.register_optimizer_step_*_hook)
_GLOBAL_PRE_HOOKS: Mapping[int, Callable[..., Any]] = getattr(
    _torch_optimizer, "_global_optimizer_pre_hooks", {})
_GLOBAL_POST_HOOKS: Mapping[int, Callable[..., Any]] = getattr(
    _torch_optimizer, "_global_optimizer_post_hooks", {})

CHECKPOINT_FORMAT = 2
"""Version of :meth:`ConstrainedOptimizer.state_dict`'s layout. 2: one entry per player
(``players``, by name); 1 (before the plug-in players) is refused by name."""


class ConstrainedOptimizer(torch.optim.Optimizer):
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
        players: extra :class:`~fairgames.game.players.base.Player` s (plug-ins: a
            reweighting adversary, a soft group assignment, ...), played with the preset's.
        strict: check every batch's values (labels, group codes, weights, finite scores) and
            every step's finiteness with a host sync, raising at the first bad one — for
            debugging. Off, a non-finite step is skipped on the device and reported by
            :meth:`check` (:mod:`fairgames.game.finite`).
        process_group: a data-parallel game (:mod:`fairgames.game.distributed`): ``None``
            (one process), ``"default"`` (torch.distributed's default group) or a
            ``ProcessGroup``. Each rank passes its shard of the global batch; every
            :meth:`lagrangian` (and :meth:`record_heldout`) call all-reduces the fused pass's
            per-cell sums in one collective, so all ranks play the global game, and scales
            θ's gradient so that ``DistributedDataParallel``'s average is the gradient of the
            global batch.
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
                 monitor_options: Mapping[str, Any] | None = None,
                 players: Sequence[Player] = (), strict: bool = False,
                 process_group: Any = None) -> None:
        if not isinstance(problem, Problem):
            raise TypeError(f"problem must be a fairgames.game.Problem, got "
                            f"{type(problem).__name__}")
        if not isinstance(model_optimizer, torch.optim.Optimizer):
            raise TypeError("model_optimizer must be a torch.optim.Optimizer over the model's "
                            f"parameters, got {type(model_optimizer).__name__}")
        self.problem = problem
        self.model_optimizer = model_optimizer
        choice = dict(multipliers=multipliers if isinstance(multipliers, str) else None,
                      theta=theta, psi_slacks=psi_slacks, ratio_slacks=ratio_slacks,
                      payoffs=payoffs)
        # preset_note: why the default preset was replaced (None: it was not)
        self.preset, self.preset_note = resolve_game_preset(
            preset, rows=problem.num_multipliers, named_multipliers=multipliers is not None,
            **choice)
        self.device = torch.device(device if device is not None
                                   else _parameter_device(model_optimizer))
        self.terms = problem.compile(self.preset.ratio_slacks).on(self.device)
        self.evaluator = problem.make_evaluator().to(self.device).train()
        bound = problem.make_objective_bound()
        options = PlayerOptions(
            multipliers=multipliers if isinstance(multipliers, MultiplierPlayer) else None,
            multiplier_lr=multiplier_lr, radius=radius,
            multiplier_options=dict(multiplier_options or {}),
            theta=theta if isinstance(theta, ThetaPlayer) else None, slack_lr=slack_lr,
            psi_steps=psi_steps, monitor_options=dict(monitor_options or {}))
        self.strict = bool(strict)
        self._guard = FiniteGuard(self.device, self.evaluator)
        self._bind([*self.preset.build_players(problem, self.terms, self.device, options),
                    *players])
        # the Lagrangian's algebra at a batch: the θ-player's loss and the step's record
        self.theta_loss = ThetaLoss(problem, self.terms, self.evaluator,
                                    bound.to(self.device) if bound is not None else None,
                                    self.players, self._views, self.device)
        self._reduction = resolve_process_group(process_group)
        if self._reduction is not None:
            refuse_local_state(self.players, problem)
        oracles = [p.name for p in self.players if getattr(p, "oracle", None) is not None]
        if oracles and bound is not None:
            raise ValueError(f"the θ-player {oracles[0]!r} fits θ with an oracle of the leaf "
                             "costs, which cannot see the objective's own surrogate: drop "
                             "Problem(objective_surrogate=...) or the oracle")
        self._equality = torch.tensor(
            [1.0 if c.sense == "==" else 0.0 for c in problem.constraints.values()],
            device=self.device)
        self._empty = self.theta_loss.empty
        self.steps = 0
        self.last: StepRecord | None = None
        self._hooks: list[Callable[[StepRecord], None]] = []
        self._records = RecordBuffer()
        # a device step counter while a step is captured (fairgames.game.capture)
        self._step_counter: torch.Tensor | None = None

    def _bind(self, players: list[Player]) -> None:
        """Bind every player (:class:`~fairgames.game.players.roster.Roster`) and make the
        parameter groups."""
        game = GameContext(
            self.problem, self.terms, self.device, self.model_optimizer,
            lambda: self.theta_loss.fixed_costs(self._weights.weights()),
            weights=lambda: self._weights.weights())
        self.roster = roster = Roster(players, game)
        self.players: list[Player] = roster.players
        self._grad_players, self._other_players = roster.grad_players, roster.other_players
        self._views, self._weights = roster.views, roster.weights
        self._transformers = roster.transformers
        # torch.optim.Optimizer's own set-up (hooks, state); the groups are the players'.
        super().__init__([{"params": []}], {})
        self.param_groups = roster.param_groups()
        self._groups_ready = True

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of model parameters: it joins θ's wrapped optimizer (as with any torch
        optimizer, e.g. when unfreezing layers) and so :attr:`param_groups`."""
        if not getattr(self, "_groups_ready", False):   # torch.optim.Optimizer.__init__'s call
            super().add_param_group(param_group)
            return
        self.model_optimizer.add_param_group(param_group)
        self.param_groups = self.roster.param_groups()

    # ------------------------------------------------------------------ the players
    def player(self, name: str) -> Player:
        """The player called ``name`` (``"theta"``, ``"multipliers"``, ``"slacks"``, ...)."""
        return self.roster.player(name)

    @property
    def multipliers(self) -> MultiplierPlayer:
        """The player that provides the weights ``(ω, λ)``."""
        return self._weights

    @property
    def slacks(self) -> Any:
        """The slack player, or ``None`` when the problem has no slacks."""
        return self._views.get("slacks")

    @property
    def theta(self) -> ThetaPlayer:
        return self.player("theta")  # type: ignore[return-value]

    @property
    def monitor(self) -> Any:
        return self.player("monitor")

    @property
    def world_size(self) -> int:
        """The number of processes of a data-parallel game (1 without a process group)."""
        return 1 if self._reduction is None else self._reduction.world_size

    def _reduce_sums(self, sums: torch.Tensor) -> torch.Tensor:
        """The game's one collective per pass: this rank's per-cell sums and finiteness notes
        → the sums over every rank (so a NaN score or negative weight on one rank skips the
        step on all of them)."""
        assert self._reduction is not None
        notes = self._guard.notes().to(sums.dtype)
        sums, notes = self._reduction([sums, notes])
        self._guard.share(notes)
        return sums

    # ------------------------------------------------------------------ torch-optimizer API
    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model_optimizer.zero_grad(set_to_none=set_to_none)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ω, λ)``: the objective's weight and the multipliers (device tensors)."""
        return self._weights.weights()

    def lagrangian(self, batch: Batch, values: LeafValues | None = None) -> torch.Tensor:
        """The θ-player's loss on a batch (differentiable in the scores); records the batch's
        true rates for :meth:`step`. ``values`` may pass a precomputed evaluator result."""
        if not isinstance(batch, Batch):
            raise TypeError(f"lagrangian() takes a fairgames.rates.Batch, got "
                            f"{type(batch).__name__}")
        if self.strict:
            batch.check_values()
        for player in self._transformers:
            batch = player.transform(batch)
        self._guard.note(batch)
        algebra = self.theta_loss
        if algebra.frozen is not None:
            return _differentiable(algebra.frozen_loss(batch), batch)
        reduce = self._reduce_sums if self._reduction is not None else None
        if reduce is not None and values is not None:
            raise ValueError("lagrangian(batch, values) under a process group: the game "
                             "reduces the rates' sums in its own pass; pass the batch alone")
        loss, rec = algebra.loss_and_record(batch, values, *self._weights.weights(),
                                            reduce=reduce)
        self._records.add(rec)
        if reduce is not None:
            loss = scale_gradient(loss, self._reduction.world_size)  # type: ignore[union-attr]
        return _differentiable(loss, batch)

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
        inside = [p.name for p in self.players if p.plays_inside_step]
        if inside:
            raise ValueError(f"record_heldout() needs players that step on records made before "
                             f"step(): {inside} evaluate(s) the model inside step() (a "
                             "best-response θ-player); use a gradient θ-player")
        if self.strict:
            batch.check_values()
        self._guard.note(batch)
        reduce = self._reduce_sums if self._reduction is not None else None
        if torch.is_autocast_enabled(self.device.type):
            with torch.autocast(device_type=self.device.type, enabled=False):
                rec = self.theta_loss.heldout_record(batch, reduce)
        else:
            rec = self.theta_loss.heldout_record(batch, reduce)
        self._records.add_heldout(rec)

    def step(self, closure: Callable[[], Any] | None = None, *,
             scaler: torch.amp.GradScaler | None = None) -> Any:
        """Play one round: θ (the wrapped optimizer through ``scaler`` if given; ``closure``
        re-evaluates the batch as in ``torch.optim``), then every other player, from the values
        recorded by :meth:`lagrangian` since the last step. Returns the closure's loss."""
        if isinstance(closure, torch.amp.GradScaler):
            raise TypeError("step()'s first argument is torch's closure; pass the GradScaler "
                            "by keyword: copt.step(scaler=scaler)")
        if _GLOBAL_PRE_HOOKS or self._optimizer_step_pre_hooks:
            closure, scaler = self._pre_hooks(closure, scaler)
        if closure is None and self._records.pending is None:
            raise RuntimeError("step() needs the values of a lagrangian() call: call "
                               "copt.lagrangian(batch) and backward() first, or pass a closure")
        omega, lam = self._weights.weights_snapshot()
        round = Round(self.terms, omega=omega, lam=lam, take_record=self._records.take,
                      views=self._views, equality=self._equality, empty=self._empty,
                      closure=closure, scaler=scaler)
        self._guard.save(self.model_optimizer)
        for player in self._grad_players:      # θ: its closure runs with autograd and autocast
            player.play(round)
        # A non-finite score, weight, loss or gradient: θ is put back and every other player
        # skips this step through round.ok (a device boolean, as for a step AMP skipped).
        with torch.no_grad():       # one context for the guard and the other players
            ok = self._guard.verdict(
                self.model_optimizer, round.record.objective_surrogate,
                step=self.steps if self._step_counter is None else self._step_counter,
                gradients=scaler is None or not scaler.is_enabled())   # AMP: the scaler's part
            round.ok = ok if round.ok is None else round.ok & ok
            if torch.is_autocast_enabled(self.device.type):
                with torch.autocast(device_type=self.device.type, enabled=False):
                    record = self._play_others(round)
            else:
                record = self._play_others(round)
        self.last = record
        self.steps += 1
        for hook in self._hooks:
            hook(record)
        if self._optimizer_step_post_hooks or _GLOBAL_POST_HOOKS:
            for post_hook in (*self._optimizer_step_post_hooks.values(),
                              *_GLOBAL_POST_HOOKS.values()):
                post_hook(self, (closure,), {"scaler": scaler})
        if self.strict:
            self.check()
        return round.loss

    def _pre_hooks(self, closure: Callable[[], Any] | None, scaler: Any
                   ) -> tuple[Callable[[], Any] | None, Any]:
        """torch's step pre-hooks: each may return new ``(args, kwargs)``."""
        for pre_hook in (*_GLOBAL_PRE_HOOKS.values(), *self._optimizer_step_pre_hooks.values()):
            changed = pre_hook(self, (closure,), {"scaler": scaler})
            if changed is not None:
                (closure,), kwargs = changed
                scaler = kwargs.get("scaler", scaler)
        return closure, scaler

    # The step is not wrapped by torch.optim.Optimizer's profiling wrapper (a record_function
    # per call, two ops): it calls the step pre- and post-hooks itself, and the wrapped
    # optimizer's own step is profiled as usual.
    step.hooked = True  # type: ignore[attr-defined]

    def _play_others(self, round: Round) -> StepRecord:
        """The players that need no autograd, in order, then the step's record (no grad, fp32)."""
        for player in self._other_players:
            player.play(round)
        return round.step_record(self.steps)

    def batch(self, scores: torch.Tensor | None = None, labels: torch.Tensor | None = None,
              **fields: Any) -> Batch:
        """A :class:`Batch` whose ``group_values`` are the problem's
        (``Problem(group_values=...)``, declared once), updated by any given here.

        Example:
            >>> import torch
            >>> from fairgames.rates import error_rate, true_positive_rate as tpr, group
            >>> problem = Problem(error_rate(), [tpr(group("g", "b")) >= tpr() - 0.1],
            ...                   group_values={"g": ["a", "b"]})
            >>> model = torch.nn.Linear(2, 1)
            >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
            >>> codes = torch.tensor([0, 1, 1, 0])
            >>> b = copt.batch(torch.zeros(4), torch.ones(4), groups={"g": codes})
            >>> b.group_values
            {'g': ['a', 'b']}
        """
        names = {**self.problem.group_values, **dict(fields.pop("group_values", None) or {})}
        return Batch(scores=scores, labels=labels, group_values=names, **fields)

    def step_batch(self, model: torch.nn.Module, inputs: torch.Tensor, **fields: Any
                   ) -> torch.Tensor:
        """One whole game step on a batch: scores = ``model(inputs)``, ``fields`` are the
        other :class:`Batch` arguments (``labels``, ``groups``, ...; ``group_values``
        defaults to the problem's). Returns the θ-player's loss (detached)."""
        if "scores" in fields:
            raise TypeError("step_batch computes the scores from the model; do not pass scores=")

        def closure() -> torch.Tensor:
            self.zero_grad()
            loss = self.lagrangian(self.batch(_scores(model, inputs), **fields))
            loss.backward()
            return loss

        return self.step(closure).detach()

    def capture(self, step: Callable[[], Any], *, compile: bool | None = None
                ) -> CapturedStep:
        """Record ``step`` — one whole training step: ``zero_grad``, :meth:`lagrangian`,
        ``backward``, :meth:`step` — as one graph of device ops (it is played once while
        recorded, after one eager step if the game has not stepped yet) and return a
        :class:`~fairgames.game.capture.CapturedStep` that replays it.
        ``compile``: compile the graph (inductor on CPU, CUDA graphs on CUDA); default: yes,
        unless no C++ compiler is found on CPU (then a ``CaptureWarning``). The step reads
        the tensors it read when recorded: ``copy_`` new batches into them. See
        :mod:`fairgames.game.capture`.

        Example:
            >>> import torch
            >>> from fairgames.rates import Batch, error_rate
            >>> from fairgames.game import Problem
            >>> x, y = torch.randn(16, 2), (torch.rand(16) < 0.5).float()
            >>> model = torch.nn.Linear(2, 1)
            >>> copt = ConstrainedOptimizer(Problem(error_rate()),
            ...                             torch.optim.SGD(model.parameters(), lr=0.1))
            >>> def step():
            ...     copt.zero_grad()
            ...     copt.lagrangian(Batch(scores=model(x)[:, 0], labels=y)).backward()
            ...     copt.step()
            >>> captured = copt.capture(step, compile=False)
            >>> _ = captured(); copt.steps
            3
        """
        return CapturedStep(self, step, compile=compile)

    # ------------------------------------------------------------------ logging
    def check(self) -> None:
        """Raise :class:`~fairgames.game.finite.NonFiniteStepError` naming the first step
        since the last check that met a NaN/inf score, weight, loss or gradient (skipped on
        the device: nothing moved). One sync: call it at log intervals.

        Example:
            >>> import torch
            >>> from fairgames.rates import error_rate
            >>> from fairgames.game import Problem
            >>> model = torch.nn.Linear(2, 1)
            >>> copt = ConstrainedOptimizer(Problem(error_rate()),
            ...                             torch.optim.SGD(model.parameters(), lr=0.1))
            >>> copt.check()            # nothing went wrong: returns None
        """
        self._guard.check()

    def register_history_hook(self, hook: Callable[[StepRecord], None]) -> Callable[[], None]:
        """Call ``hook(record)`` after every step with device tensors (no sync is made; the
        hook decides when to read them). Returns a function that removes the hook."""
        self._hooks.append(hook)
        return lambda: self._hooks.remove(hook)

    def multipliers_by_name(self) -> dict[str, float]:
        """``{row name: λ}`` plus ``"objective_weight"`` (syncs; for logging)."""
        omega, lam = self._weights.weights()
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
        """Everything needed to resume the game exactly: every player's state (θ's is the
        wrapped optimizer's), the evaluator's running estimates (the model's own parameters
        are the caller's to save)."""
        if not self._records.empty:
            raise RuntimeError("state_dict() between lagrangian() (or record_heldout()) and "
                               "step(): the recorded values would be lost; save after step()")
        return {
            "format": CHECKPOINT_FORMAT,
            "preset": self.preset.name,
            "rows": list(self.terms.row_names),
            "slack_names": list(self.terms.slack_names),
            "steps": self.steps,
            "strategies": {p.name: _strategy(p) for p in self.players},
            "players": {p.name: p.state_dict() for p in self.players},
            "evaluator": self.evaluator.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (checks the format, the problem and the players)."""
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"this game state has checkpoint format {state.get('format')!r}; "
                             f"this version of fairgames reads format {CHECKPOINT_FORMAT} "
                             "only (format 1 predates the plug-in players): retrain, or "
                             "resume with the fairgames version that wrote it")
        if list(state["rows"]) != self.terms.row_names:
            raise ValueError(f"the checkpoint's multiplier rows {state['rows']} do not match "
                             f"this problem's {self.terms.row_names}")
        mine = {p.name: _strategy(p) for p in self.players}
        if dict(state["strategies"]) != mine:
            raise ValueError(f"the checkpoint was played by {dict(state['strategies'])}, "
                             f"this optimizer's players are {mine}")
        for p in self.players:
            p.load_state_dict(state["players"][p.name])
        self.evaluator.load_state_dict(state["evaluator"])
        self.steps = int(state["steps"])
        self._records.clear()
        self._guard.forget(buffers=True)

    def __repr__(self) -> str:
        players = ", ".join(f"{p.name}={_strategy(p)}" for p in self.players)
        return (f"ConstrainedOptimizer(preset={self.preset.name}, rows={self.terms.num_rows}, "
                f"slacks={self.terms.num_slacks}, players=[{players}])")


def _strategy(player: Player) -> str:
    return getattr(player, "strategy", type(player).__name__)


def _parameter_device(opt: torch.optim.Optimizer) -> torch.device:
    for group in opt.param_groups:
        for p in group["params"]:
            return p.device
    raise ValueError("the model optimizer has no parameters")


def _scores(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    scores = model(inputs)
    if scores.dim() == 2 and scores.shape[1] == 1:
        scores = scores[:, 0]
    return scores


def _differentiable(loss: torch.Tensor, batch: Batch) -> torch.Tensor:
    """``loss``, or a clear error when grad mode is on but neither the loss nor the batch's
    scores carry a gradient: ``backward()`` would fail in torch's words. ``requires_grad``
    is a Python attribute: the check reads no value (no host-device sync)."""
    if loss.requires_grad or not torch.is_grad_enabled():
        return loss      # under no_grad the caller asked for no gradient (a record only)
    s = batch.scores if batch.scores is not None else batch.probabilities
    if s is None or s.requires_grad:
        return loss
    raise RatesError(
        "lagrangian(): the batch's scores carry no gradient (scores.requires_grad is False), "
        "so backward() cannot train the model: compute the scores from the model with "
        "gradients enabled, in the training step itself, not under torch.no_grad() or "
        "torch.inference_mode() and not .detach()-ed (scores without gradient belong to "
        "copt.record_heldout())")
