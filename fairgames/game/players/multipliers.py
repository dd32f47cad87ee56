"""Strategies of the multiplier (λ) player: gradient ascent, exponentiated gradient,
follow-the-leader and the proxy-Lagrangian swap-regret player.

Every player is a :class:`~fairgames.game.players.base.Player` (``provides = ("weights",)``)
that holds its state as tensors on one device and exposes

* :meth:`MultiplierPlayer.weights` → ``(ω, λ)``: the objective's weight and the multipliers
  (``ω = 1`` for Lagrangian players; the proxy-Lagrangian player puts ``(ω, λ)`` on a simplex);
* :meth:`MultiplierPlayer.play` ``(round)``: one step from the round's gain ``∂L/∂λ`` — the
  rows' values under the player's ``payoff`` (``"true"``: the true violations, or
  ``"surrogate"``) — masked by the round's device boolean ``ok`` (``False`` leaves the state
  untouched: an AMP step the GradScaler skipped); gradient-type players do it through
  :meth:`~GradientAscent.update` ``(gain, ok=)``, follow-the-leader through
  :meth:`~FollowTheLeader.follow` ``(context, ok=)``;
* ``param_groups()``: the step size ``lr`` as a 0-dim tensor in a ``torch.optim`` parameter
  group, so LR schedulers of the :class:`~fairgames.game.ConstrainedOptimizer` move it;
* :meth:`MultiplierPlayer.saturation` → a device scalar in [0, 1], 1 when the player is at
  the edge of its set (``‖λ‖₁ = κ``, or no weight left on the objective), read by the
  infeasibility monitor;
* ``state_dict`` / ``load_state_dict``.

No update reads a tensor value on the host: projections are sort-based and every choice is a
``torch.where``.

Example:
    >>> import torch
    >>> p = GradientAscent(2, lr=1.0, radius=1.0)
    >>> p.update(torch.tensor([0.3, -0.2])); p.weights()[1].tolist()
    [0.30000001192092896, 0.0]
    >>> p.update(torch.tensor([2.0, 0.0])); p.weights()[1].tolist()
    [1.0, 0.0]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..projections import project_l1_ball_nonnegative
from .base import Player, lr_group, step_size
from .keys import ConfigKey, one_of, positive, register_in, strategies_changed

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..round import Round

PAYOFFS = ("true", "surrogate")

DEFAULT_RADIUS = 10.0
"""Default κ, the bound ‖λ‖₁ ≤ κ of the Lagrangian players (paper 000's Λ). Rates and the usual
objectives are O(1), so a constraint rarely needs a multiplier above a few units; κ = 10 leaves
room and keeps the θ-player's step bounded. Multipliers that sit at κ while violations persist
make :meth:`ConstrainedOptimizer.likely_infeasible` fire; raise κ if the problem is feasible."""

MULTIPLIER_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}
"""The torch optimizers a :class:`GradientAscent` player can step with, by config name."""

# The settings of the λ-players (``algorithm.<name>`` of a run config). ``None``: the preset's
# value, else the strategy's own default.
MULTIPLIER_LR = ConfigKey("multiplier_lr", float, None, "the λ-player's step size",
                          positive(), argument="lr")
RADIUS = ConfigKey("radius", float, None, "κ of Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}", positive())
MULTIPLIER_OPTIMIZER = ConfigKey(
    "multiplier_optimizer", str, None,
    "a torch optimizer (sgd, adam, adagrad) stepping the gradient-ascent λ-player, projected "
    "on Λ (TFCO's constraint_optimizer); null: plain projected OGD",
    one_of(MULTIPLIER_OPTIMIZERS), argument="optimizer", convert=MULTIPLIER_OPTIMIZERS.get)


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


def _commit(target: torch.Tensor, new: torch.Tensor, ok: torch.Tensor | None) -> None:
    with torch.no_grad():
        if ok is None:
            target.copy_(new)
        else:     # in place: no temporary the size of the state (a K × K matrix)
            torch.where(ok, new, target, out=target)


class MultiplierPlayer(Player):
    """Base class; see the module docstring. ``strategy`` names the class's strategy (the
    player's ``name`` is ``"multipliers"``, its role in the game)."""

    strategy = "multipliers"
    name = "multipliers"
    order = 20
    provides = ("weights",)
    lagrangian = True   # False: the objective weight ω moves too (proxy-Lagrangian)
    has_lr = True       # takes a step size ``lr``
    has_radius = True   # takes κ (``radius``) of Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}
    no_radius_reason = ""

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


class GradientAscent(MultiplierPlayer):
    """Projected gradient ascent ``λ ← Π_Λ(λ + η·gain)`` with ``Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}``.

    ``optimizer`` may be any ``torch.optim.Optimizer`` class (built with ``lr`` and
    ``maximize=True``) or a factory ``params -> optimizer`` that sets ``maximize=True``; the
    default is plain OGD ``λ + η·gain`` (paper 000 Algorithms 1–3), done in place. The
    projection is the exact Euclidean one (sort-based, no sync). Note: torch's Adam/Adagrad
    read their step counter on the host (a CPU tensor, so no device wait on a GPU, but the
    CPU guard flags it).
    """

    strategy = "gradient_ascent"
    config_keys = (MULTIPLIER_OPTIMIZER, MULTIPLIER_LR, RADIUS)

    def __init__(self, num_rows: int, *, lr: float = 0.5, radius: float = DEFAULT_RADIUS,
                 optimizer: type[torch.optim.Optimizer] | Callable[..., torch.optim.Optimizer]
                 | None = None, initial: float = 0.0, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        if not radius > 0:
            raise ValueError(f"radius must be positive, got {radius}")
        self.radius = float(radius)
        self.lr = step_size(lr, self.device, "lr", self.dtype)
        self.lam = torch.nn.Parameter(project_l1_ball_nonnegative(
            torch.full((num_rows,), float(initial), device=self.device, dtype=self.dtype),
            self.radius), requires_grad=False)
        self._lam = self.lam.data      # the same storage, without a detach per access
        self.optimizer: torch.optim.Optimizer | None = None
        if optimizer is None:
            pass      # plain OGD λ + η·gain, without torch.optim's per-step overhead
        elif isinstance(optimizer, type):
            self.optimizer = optimizer([self.lam], lr=lr, maximize=True)
        else:
            self.optimizer = optimizer([self.lam])
        if self.optimizer is not None and not all(
                g.get("maximize", False) for g in self.optimizer.param_groups):
            raise ValueError("the multiplier optimizer must ascend: build it with maximize=True")

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self._lam

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self._lam.clone()     # ω is the constant 1

    def param_groups(self) -> list[dict[str, Any]]:
        if self.optimizer is None:
            return [lr_group(self, self.lr)]
        for group in self.optimizer.param_groups:   # the inner optimizer's own groups
            group["player"] = self.name
        return list(self.optimizer.param_groups)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        if self.num_rows == 0:
            return
        if self.optimizer is None:
            # λ + η·g (one fused multiply-add, as torch.add(λ, g, alpha=η))
            new = project_l1_ball_nonnegative(torch.addcmul(self._lam, g, self.lr),
                                              self.radius)
            _commit(self._lam, new, ok)
            return
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        if ok is not None:
            saved = [(t, t.detach().clone()) for t in self._optimizer_tensors()]
        self.lam.grad = g.clone()
        self.optimizer.step()
        self.lam.grad = None
        with torch.no_grad():
            self.lam.copy_(project_l1_ball_nonnegative(self.lam, self.radius))
            for t, old in saved:
                torch.where(ok, t, old, out=t)   # the skipped step leaves no trace

    def _optimizer_tensors(self) -> list[torch.Tensor]:
        out = [self.lam.data]
        assert self.optimizer is not None
        for v in self.optimizer.state.get(self.lam, {}).values():
            if isinstance(v, torch.Tensor):
                out.append(v)
        return out

    def saturation(self) -> torch.Tensor:
        return self._lam.sum() / self.radius

    def _tensors(self) -> dict[str, torch.Tensor]:
        # With a torch optimizer the step size lives in its parameter group (its state).
        return {"lam": self._lam} if self.optimizer is not None else {
            "lam": self._lam, "lr": self.lr}

    def state_dict(self) -> dict[str, Any]:
        # A deep copy: torch's optimizer state_dict aliases the live state tensors.
        opt = copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None
        return {**super().state_dict(), "optimizer": opt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict({k: state[k] for k in self._tensors()})
        if self.optimizer is not None:
            if state.get("optimizer") is None:
                raise ValueError("the checkpoint has no multiplier optimizer state")
            self.optimizer.load_state_dict(state["optimizer"])


class ExponentiatedGradient(MultiplierPlayer):
    """Exponentiated gradient on ``Λ``: ``λ = κ·softmax([θ, 0])[:M]``, ``θ ← θ + η·gain``.

    The implicit last coordinate holds the mass ``κ − ‖λ‖₁`` (as in the reductions of
    Agarwal et al., paper 003). ``initial`` is every multiplier's starting value.
    """

    strategy = "exponentiated_gradient"
    config_keys = (MULTIPLIER_LR, RADIUS)

    def __init__(self, num_rows: int, *, lr: float = 1.0, radius: float = DEFAULT_RADIUS,
                 initial: float = 0.01, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        if not radius > 0:
            raise ValueError(f"radius must be positive, got {radius}")
        if not 0 < initial * max(num_rows, 1) < radius:
            raise ValueError(f"initial multipliers must be positive with a sum below the radius "
                             f"{radius}, got {num_rows} × {initial}")
        self.radius = float(radius)
        self.lr = step_size(lr, self.device, "lr", self.dtype)
        start = math.log(initial / (radius - num_rows * initial))
        self.theta = torch.full((num_rows,), start, device=self.device, dtype=self.dtype)

    def _lam(self, theta: torch.Tensor) -> torch.Tensor:
        z = torch.cat([theta, torch.zeros(1, device=theta.device, dtype=theta.dtype)])
        return self.radius * torch.softmax(z, 0)[:-1]

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self._lam(self.theta)

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weights()      # computed afresh from θ (updated in place) at every call

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        _commit(self.theta, self.theta + self.lr * g, ok)

    def saturation(self) -> torch.Tensor:
        return self._lam(self.theta).sum() / self.radius

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {"theta": self.theta, "lr": self.lr}


class FollowTheLeader(MultiplierPlayer):
    """Follow-the-leader: ``λ_{t+1} = argmax_{λ∈Λ} Σ_{s≤t} min_ξ L(θ_s, ξ, λ)``.

    The payoff is linear in the rates, so the leader is the best response to the running mean
    of the rows' R-parts. Without slacks that is the vertex ``κ·e_j`` of the most violated row
    (or 0 when none is violated). With ψ slacks ``min_ξ L`` is concave in λ and the argmax is
    found by ``inner_steps`` projected subgradient ascent steps of length ``inner_lr/√k``,
    warm-started at the current λ, whose iterates are averaged — unless the context gives the
    leader in closed form: for (P1) it is ``∇(cψ)`` at the mean rates, i.e. Frank-Wolfe's
    linearisation point (paper 000 Remark 1, the Frank-Wolfe / NEMSIS λ-player of Table 2).
    """

    strategy = "follow_the_leader"
    has_lr = False
    config_keys = (RADIUS,)

    def __init__(self, num_rows: int, *, radius: float = DEFAULT_RADIUS, inner_steps: int = 100,
                 inner_lr: float = 1.0, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        if not radius > 0:
            raise ValueError(f"radius must be positive, got {radius}")
        self.radius = float(radius)
        self.inner_steps = int(inner_steps)
        self.inner_lr = float(inner_lr)
        self.lam = torch.zeros(num_rows, device=self.device, dtype=self.dtype)
        self.total = torch.zeros(num_rows, device=self.device, dtype=self.dtype)
        self.fixed_total: torch.Tensor | None = None
        self.count = torch.zeros((), device=self.device, dtype=self.dtype)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._one, self.lam

    def bind(self, game: Any) -> None:
        super().bind(game)
        if game.terms.has_ratios or game.terms.num_linear:
            raise ValueError("follow-the-leader λ plays the best response to the running mean "
                             "of the rows, which ratio terms do not have (they are not linear "
                             "in the rates); use gradient_ascent or swap_regret for ratio terms")

    def play(self, round: Round) -> None:
        """The leader of the running means of the round's rows (its payoff's) and ``φ``."""
        self.follow(round.dual_context(self.payoff), ok=round.ok)

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        raise TypeError("follow-the-leader plays from the rows' rate parts, not a gain: call "
                        "follow(context, ok=) (the optimizer does, through play(round))")

    def follow(self, context: DualContext, *, ok: torch.Tensor | None = None) -> None:
        """Add this step's rows to the running means and move to their leader."""
        u = context.affine.detach().to(self.device, self.dtype)
        phi = context.fixed.detach().to(self.device, self.dtype)
        if self.fixed_total is None or self.fixed_total.shape != phi.shape:
            self.fixed_total = torch.zeros_like(phi)
        _commit(self.total, self.total + u, ok)
        _commit(self.fixed_total, self.fixed_total + phi, ok)
        _commit(self.count, self.count + 1.0, ok)
        if self.num_rows == 0:
            return
        mean_u = self.total / self.count.clamp_min(1.0)
        mean_phi = self.fixed_total / self.count.clamp_min(1.0)
        if not context.has_slacks:
            best, j = mean_u.max(0)
            vertex = torch.zeros_like(mean_u).scatter(0, j.reshape(1), self.radius)
            new = torch.where(best > 0, vertex, torch.zeros_like(mean_u))
        else:
            exact = (context.leader(mean_u, mean_phi) if context.leader is not None else None)
            if exact is not None:
                _commit(self.lam, project_l1_ball_nonnegative(exact, self.radius), ok)
                return
            # Projected subgradient ascent on the concave dual min_ξ L(·, λ); the average of
            # its iterates converges (the last one need not).
            lam = self.lam.clone()
            new = torch.zeros_like(lam)
            for k in range(1, self.inner_steps + 1):
                step = context.gain_at(lam, mean_u, mean_phi)
                lam = project_l1_ball_nonnegative(lam + self.inner_lr / math.sqrt(k) * step,
                                                  self.radius)
                new = new + (lam - new) / k
        _commit(self.lam, new, ok)

    def saturation(self) -> torch.Tensor:
        return self.lam.sum() / self.radius

    def _tensors(self) -> dict[str, torch.Tensor]:
        out = {"lam": self.lam, "total": self.total, "count": self.count}
        if self.fixed_total is not None:
            out["fixed_total"] = self.fixed_total
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "fixed_total" in state and self.fixed_total is None:
            self.fixed_total = torch.zeros_like(state["fixed_total"], device=self.device,
                                                dtype=self.dtype)
        super().load_state_dict(state)


class SwapRegret(MultiplierPlayer):
    """The proxy-Lagrangian player of Cotter, Jiang & Sridharan (ALT 2019, Algorithm 2).

    State: a left-stochastic ``(M+1)×(M+1)`` matrix ``Q``, updated multiplicatively by
    ``Q ← Q ⊙ exp(η·Δ·vᵀ)`` and re-normalised column by column, with ``Δ = (0, gain)`` (the
    objective earns nothing) and every entry floored at ``minimum/(M+1)`` (as TFCO does). The
    weights are the stationary distribution ``v = Qv``: ``(ω, λ) = (v_0, v_1..v_M)`` — the
    θ-player minimises ``v_0·f + Σ v_j g̃_j``, so the ratio ``λ_j/ω`` is unbounded and no
    radius κ is needed. The start puts all but ``minimum`` of the mass on the objective.

    ``v`` is computed without a sync (``linalg.solve`` would sync inside its LU solve):
    ``method="tree"`` (the default up to 2 rows, i.e. ``M + 1 <= 3``) uses the Markov chain
    tree theorem, ``v_i ∝ Σ_{trees into i} Π q``: for 3 states
    ``v_i ∝ q_ij·q_ik + q_kj·q_ik + q_jk·q_ij``, a sum of positive products, so exact to float
    precision (no cancellation) in five ops; ``method="squaring"`` takes ``Q^(2^16)·v`` by
    repeated squaring (exact to float precision for any spectral gap above 1e-4; O(M³), the
    default up to 32 rows), ``"power"`` runs a FIXED number of power iterations warm-started at
    the previous ``v`` (O(M²) each; the default beyond 32 rows, where ``v`` is tracked across
    steps as ``Q`` drifts slowly). All three give the same ``v`` to float precision (the
    tests compare them with an eigenvector solve at 1e-7).

    An update writes ``q`` and ``v`` in place (``torch.where`` against the old ones when a step
    is masked), so their storage never moves (a CUDA graph can capture the step); the weights a
    step played are a snapshot (:meth:`weights_snapshot`, one copy of ``v``).
    """

    strategy = "swap_regret"
    lagrangian = False
    has_radius = False
    no_radius_reason = ": its weights live on the simplex (ω, λ), so λ/ω is unbounded"
    config_keys = (MULTIPLIER_LR,)

    def __init__(self, num_rows: int, *, lr: float = 1.0, minimum: float = 1e-3,
                 method: str = "auto", power_iterations: int = 8, **kw: Any) -> None:
        super().__init__(num_rows, **kw)
        self.lr = step_size(lr, self.device, "lr", self.dtype)
        if not 0 < minimum < 1:
            raise ValueError(f"minimum must lie in (0, 1), got {minimum}")
        if method not in ("auto", "tree", "power", "squaring"):
            raise ValueError(f"method must be 'auto', 'tree', 'power' or 'squaring', got "
                             f"{method!r}")
        if power_iterations < 1:
            raise ValueError(f"power_iterations must be at least 1, got {power_iterations}")
        n = num_rows + 1
        if method == "tree" and n > 3:
            raise ValueError(f"method='tree' is for at most 2 rows, got {num_rows}")
        self.minimum = float(minimum)
        self.method = method if method != "auto" else (
            "tree" if n <= 3 else "squaring" if n <= 32 else "power")
        # Flat indices of the tree theorem's factors: v_i ∝ Σ_t idx[0, t, i]·idx[1, t, i].
        tree = {2: [[[1, 2]], [[1, 2]]],
                3: [[[1, 3, 6], [7, 6, 3], [5, 2, 1]],     # q_ij, q_kj, q_jk
                    [[2, 5, 7], [2, 5, 7], [1, 3, 6]]]}.get(n)  # q_ik, q_ik, q_ij
        self._tree = (torch.tensor(tree, device=self.device) if tree is not None else None)
        self.power_iterations = int(power_iterations)
        self.floor = minimum / n
        one = 1.0 - minimum * (n - 1) / n
        self.q = torch.full((n, n), self.floor, device=self.device, dtype=self.dtype)
        self.q[0, :] = one
        self.v = torch.full((n,), self.floor, device=self.device, dtype=self.dtype)
        self.v[0] = one
        self.v.copy_(self._stationary(self.q, self.v))
        self._zero = torch.zeros(1, device=self.device, dtype=self.dtype)
        self._split()

    def _split(self) -> None:
        """Views ``(ω, λ)`` of ``v`` (made once: ``v`` is updated in place)."""
        self._weights = (self.v[0], self.v[1:])

    def _stationary(self, q: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        if q.shape[0] == 1:
            return torch.ones_like(start)
        if self.method == "tree":
            assert self._tree is not None
            if self._tree.shape[1] == 1:         # 2 states: v ∝ (q_01, q_10)
                v = torch.take(q, self._tree[0, 0])
            else:
                v = torch.take(q, self._tree).prod(0).sum(0)
        elif self.method == "squaring":
            v = torch.linalg.matrix_power(q, 1 << 16) @ start
        else:
            v = start
            for _ in range(self.power_iterations):
                v = q @ v
        return v / v.sum()

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._weights

    def weights_snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        v = self.v.clone()          # update() writes v in place
        return v[0], v[1:]

    def param_groups(self) -> list[dict[str, Any]]:
        return [lr_group(self, self.lr)]

    def update(self, gain: torch.Tensor, *, ok: torch.Tensor | None = None) -> None:
        g = self._check_gain(gain)
        delta = torch.cat([self._zero, g])
        # η·Δ·vᵀ, with a clamped exponent: a huge gain (a ψ row far off) must not overflow.
        q = torch.addr(self.q, delta * self.lr, self.v, beta=0.0)
        q = q.clamp_(-50.0, 50.0).exp_().mul_(self.q)
        q = q.div_(q.sum(0, keepdim=True)).clamp_min_(self.floor)
        q = q.div_(q.sum(0, keepdim=True))
        v = self._stationary(q, self.v)
        if ok is None:
            self.q.copy_(q)
            self.v.copy_(v)
        else:
            torch.where(ok, q, self.q, out=self.q)      # in place: q is (M + 1) × (M + 1)
            torch.where(ok, v, self.v, out=self.v)

    def saturation(self) -> torch.Tensor:
        return 1.0 - self._weights[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._split()

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {"q": self.q, "v": self.v, "lr": self.lr}


MULTIPLIER_PLAYERS: dict[str, type[MultiplierPlayer]] = {
    cls.strategy: cls
    for cls in (GradientAscent, ExponentiatedGradient, FollowTheLeader, SwapRegret)}


def register_multiplier_strategy(cls: type[MultiplierPlayer]) -> type[MultiplierPlayer]:
    """Make a :class:`MultiplierPlayer` subclass playable by its ``strategy`` name (presets,
    ``algorithm.multipliers``, with its ``config_keys`` as ``algorithm.<key>``); usable as a
    class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, MultiplierPlayer)):
        raise TypeError(f"a multiplier strategy is a MultiplierPlayer subclass, got {cls!r}")
    register_in(MULTIPLIER_PLAYERS, cls.strategy, cls)
    return cls


def unregister_multiplier_strategy(strategy: str) -> None:
    """Forget a strategy added by :func:`register_multiplier_strategy`."""
    if MULTIPLIER_PLAYERS.pop(strategy, None) is not None:
        strategies_changed()


def make_multiplier_player(strategy: str | MultiplierPlayer, num_rows: int, *,
                           lr: float | None = None, radius: float | None = None,
                           device: torch.device | str | None = None,
                           **options: Any) -> MultiplierPlayer:
    """Build a multiplier player by strategy name (``"swap_regret"``, ``"gradient_ascent"``,
    ``"exponentiated_gradient"``, ``"follow_the_leader"``, or one registered with
    :func:`register_multiplier_strategy`), or check a given one."""
    if isinstance(strategy, MultiplierPlayer):
        if strategy.num_rows != num_rows:
            raise ValueError(f"the multiplier player has {strategy.num_rows} rows, the problem "
                             f"{num_rows}")
        return strategy
    if strategy not in MULTIPLIER_PLAYERS:
        raise ValueError(f"unknown multiplier strategy {strategy!r}; choose one of "
                         f"{sorted(MULTIPLIER_PLAYERS)} or pass a MultiplierPlayer")
    cls = MULTIPLIER_PLAYERS[strategy]
    kw: dict[str, Any] = dict(options)
    if lr is not None and cls.has_lr:
        kw["lr"] = lr
    if radius is not None:
        if not cls.has_radius:
            raise ValueError(f"the {strategy} player has no radius{cls.no_radius_reason}; "
                             "drop radius=")
        kw["radius"] = radius
    return cls(num_rows, device=device, **kw)
