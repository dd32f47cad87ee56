"""Algorithms 1 (SP) and 2 (BGL) of paper 003: exponentiated gradient on λ against a
best-responding model, the duality-gap stop and the run-time certificates of Theorem 4.

λ lives in ``{λ ≥ 0, ‖λ‖₁ ≤ B}`` through :class:`~fairgames.game.ExponentiatedGradient`'s
slack coordinate (``λ = B·softmax([θ, 0])[:M]``, θ₁ = 0, so λ₁ = B/(M + 1) each: the paper's
start) and steps ``θ ← θ + η·g(h_t)`` on the true constraint values. At iteration t:

* ``Q̂_t`` is the uniform mixture of ``h_1..h_t`` and ``λ̂_t`` the mean of ``λ_1..λ_t``;
* ``ν̄ = L(Q̂, Best_λ(Q̂)) − L(Q̂, λ̂)`` with the closed-form ``Best_λ`` (App. F: all of B on
  the most violated row, or 0), so ``L(Q̂, Best_λ(Q̂)) = obj(Q̂) + B·max(0, max g(Q̂))``;
* every ``check_every`` iterations (and at the last) ``ν̲ = L(Q̂, λ̂) − L(Best_h(λ̂), λ̂)``
  (a second oracle call) and the stop at ``max(ν̄, ν̲) ≤ ν`` — the only host reads of the loop.
  ``lower="oracle"`` reads ``Best_h(λ̂)`` as the oracle's response (Algorithm 1 as written);
  ``lower="found"`` as the best, by the true Lagrangian, of that response and every iterate
  so far — exact over the finite set ``H`` of hypotheses found, whatever the oracle.

On return the certificates are checked: ``max g(Q̂) ≤ (ρ + 2ν)/B`` (SP: ``|γ̂| ≤ ε̂ +
(2 + 2ν)/B``; BGL: ``γ̂_a ≤ ζ̂_a + (1 + 2ν)/B``), ``obj(Q̂) ≤ L(Best_h(λ̂), λ̂) + 2ν`` (a lower
bound on every feasible Q's objective when the oracle is exact — the LS and LR heuristics are
not: ``lower="found"`` makes it a bound over the mixtures of ``H``, :attr:`Certificate.scope`) and
the iteration count against Theorem 4's bound (which assumes the default η; the other
certificates follow from the gap alone and hold at any η). A run that stops on the gap but
misses the violation bound is ``infeasible`` (Algorithm 2's null; for SP it means the oracle
found no fair mixture), with its evidence.

Example:
    >>> import torch
    >>> from .fitting import Fitter
    >>> from .games import GroupLossGame
    >>> from .oracles import WeightedLossOracle
    >>> from .sample import Sample
    >>> from fairgames.rates.losses import SQUARED
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.rand(200, 2, generator=g); codes = (x[:, 0] > 0.5).long()
    >>> s = Sample.of(x, (x.sum(1) / 2).clamp(0, 1), codes)
    >>> game = GroupLossGame(s, SQUARED, 0.1, WeightedLossOracle(
    ...     Fitter(lambda: torch.nn.Linear(2, 1), x), s.y, SQUARED))
    >>> r = play(game, bound=2.0, gap=0.01, step_size=1.0)
    >>> r.outcome, r.certificate.violation_ok, r.certificate.gap <= 0.01
    ('converged', True, True)
    >>> len(r.lp_model()) <= game.num_multipliers + 1     # the LP over the iterates
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from fairgames.game.players.multipliers import ExponentiatedGradient
from fairgames.game.solutions.stochastic import StochasticModel

from .heap import release_freed_heap

OUTCOMES = ("converged", "infeasible", "max_iterations")


class Game(Protocol):
    kind: str
    rho: float
    num_multipliers: int

    def best_response(self, lam: torch.Tensor) -> nn.Module: ...

    def evaluate(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]: ...

    def report(self, objective: torch.Tensor, g: torch.Tensor) -> tuple[float, float]: ...

    def iteration_bound(self, bound: float, gap: float) -> float: ...


@dataclass(frozen=True)
class Certificate:
    """Theorem 4 (SP) / Eqs. 29–30 (BGL) as checked on the returned mixture."""

    iterations: int
    iteration_bound: float
    max_violation: float        # max_j g_j(Q̂): how far Q̂ exceeds its slacks (≤ 0: within)
    violation_bound: float      # (ρ + 2ν)/B
    objective: float            # obj(Q̂): cost^ (SP) or loss^ (BGL)
    dual_bound: float           # L(Best_h(λ̂), λ̂)
    gap: float                  # max(ν̄, ν̲) at the last check
    gap_target: float           # ν
    # what ν̲ and dual_bound were read against: "oracle" (the oracle's response — the bounds
    # hold over the whole class only if the oracle is an exact Best_h) or "found" (the best of
    # it and the iterates: the bounds hold against every mixture of the hypotheses found)
    scope: str = "oracle"

    @property
    def violation_ok(self) -> bool:
        return self.max_violation <= self.violation_bound

    @property
    def objective_ok(self) -> bool:
        return self.objective <= self.dual_bound + 2 * self.gap_target + 1e-12

    @property
    def within_iteration_bound(self) -> bool:
        return self.iterations <= self.iteration_bound


@dataclass
class History:
    """Per iteration: ``λ̂`` ``[T, M]``; ν̄, ν̲ and the gap (NaN where not checked); the
    mixture's loss (SP: ``loss_α``) and worst constraint value (SP: ``max |γ̂|``, BGL: the
    worst group loss)."""

    lambda_hat: list[torch.Tensor] = field(default_factory=list)
    nu_over: list[float] = field(default_factory=list)
    nu_under: list[float] = field(default_factory=list)
    gap: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    worst: list[float] = field(default_factory=list)


@dataclass
class ReductionResult:
    """The mixture Q̂ (distinct iterates, weights = their share of the T iterations), the
    outcome (:data:`OUTCOMES`), the certificate, the history, ``λ̂`` and the oracle calls.

    ``model`` holds the raw iterates f. SP's guarantee is for the randomised, rounded
    predictor: draw a member per example and deploy
    :func:`~fairgames.fair_regression.discretize.rounded` of its output (notes §2.4); its
    threshold rates on the grid are the raw members' (the cells are the same)."""

    model: StochasticModel
    outcome: str
    certificate: Certificate
    history: History
    lambda_hat: torch.Tensor
    oracle_calls: int
    oracle_seconds: list[float]
    evidence: dict[str, object] = field(default_factory=dict)
    first_iterations: list[int] = field(default_factory=list)   # per member, from 1
    last_member: int = 0        # the member h_T is (the last iterate)
    # per member: obj(h) [K] and g(h) [K, M], the values the LP over the iterates reads
    member_objectives: torch.Tensor | None = None
    member_constraints: torch.Tensor | None = None

    @property
    def iterations(self) -> int:
        return self.certificate.iterations

    @property
    def seconds_per_call(self) -> float:
        return sum(self.oracle_seconds) / max(len(self.oracle_seconds), 1)

    def lp_model(self) -> StochasticModel:
        """The best mixture of the iterates on the training values: ``min Σ w_k obj(h_k)``
        s.t. ``Σ w_k g(h_k) ≤ 0`` over the simplex (at most M + 1 members;
        :func:`~fairgames.game.solutions.lp.shrink_lp`, which minimises the worst violation
        first where no mixture is feasible). This is the authors' code's LP over the convex
        hull of the classifiers found so far (notes §2.5): Q̂'s uniform weights carry the
        certificate, but at a finite gap they spend up to 2ν of objective that the same
        iterates, reweighted, need not.

        Example: the module's (``r.lp_model()`` after ``play``).
        """
        from fairgames.game.solutions.lp import shrink_lp

        if self.member_objectives is None or self.member_constraints is None:
            raise ValueError("lp_model needs the members' values: this result was built "
                             "without member_objectives / member_constraints")
        weights = shrink_lp(self.member_objectives, self.member_constraints)
        return self.model.subset(torch.as_tensor(weights, dtype=torch.float64))


class _Mixture:
    """The iterates h_1..h_t, stored once per distinct state, with their counts, the
    iteration each first appeared at, the last one's index, and the running sums of ``obj``
    and ``g`` (Q̂'s values, linear in Q)."""

    def __init__(self) -> None:
        self.modules: list[nn.Module] = []
        self.counts: list[int] = []
        self.first: list[int] = []
        self.last = 0
        self.index: dict[bytes, int] = {}
        self.objective = torch.zeros((), dtype=torch.float64)
        self.g: torch.Tensor | None = None
        self.member_objectives: list[torch.Tensor] = []
        self.member_g: list[torch.Tensor] = []
        # the members' (obj, g) copied into buffers that double when full, for best_value
        self._buffer: tuple[torch.Tensor, torch.Tensor] | None = None
        self._buffered = 0

    def best_value(self, lam: torch.Tensor) -> torch.Tensor:
        """``min_k L(h_k, λ)`` over the distinct iterates (their stored ``obj`` and ``g``:
        no model is evaluated again)."""
        count = len(self.member_objectives)
        if self._buffer is None or len(self._buffer[0]) < count:
            size = max(2 * count, 64)
            g0 = self.member_g[0]
            grown = (torch.empty(size, dtype=torch.float64),
                     torch.empty(size, g0.numel(), dtype=torch.float64))
            if self._buffer is not None:
                grown[0][:self._buffered] = self._buffer[0][:self._buffered]
                grown[1][:self._buffered] = self._buffer[1][:self._buffered]
            self._buffer = grown
        objectives, g = self._buffer
        for k in range(self._buffered, count):
            objectives[k], g[k] = self.member_objectives[k], self.member_g[k]
        self._buffered = count
        return (objectives[:count] + g[:count] @ lam.to(g)).min()

    def add(self, model: nn.Module, objective: torch.Tensor, g: torch.Tensor) -> None:
        key = b"".join(t.detach().cpu().numpy().tobytes() for t in model.state_dict().values())
        if key in self.index:
            self.counts[self.index[key]] += 1
        else:
            self.index[key] = len(self.modules)
            self.modules.append(model)
            self.counts.append(1)
            self.first.append(sum(self.counts))
            self.member_objectives.append(objective.detach().cpu().to(torch.float64))
            self.member_g.append(g.detach().cpu().to(torch.float64))
        self.last = self.index[key]
        self.objective = self.objective + objective.cpu()
        self.g = g.cpu() if self.g is None else self.g + g.cpu()

    def model(self) -> StochasticModel:
        total = sum(self.counts)
        weights = torch.tensor(self.counts, dtype=torch.float64) / total
        return StochasticModel.from_modules(self.modules, weights, steps=self.first)


def best_lambda(g: torch.Tensor, bound: float) -> torch.Tensor:
    """``Best_λ(Q) = argmax_{λ ≥ 0, ‖λ‖₁ ≤ B} ⟨λ, g(Q)⟩`` in closed form (App. F): ``B·e_j``
    on the most violated row ``j`` if ``g_j > 0``, else 0 (the Lagrangian is linear in λ, so
    a vertex of the ball is optimal). For SP's stacked ``[γ̂ − ε̂; −γ̂ − ε̂]`` rows this is
    ``B·e⁺`` or ``B·e⁻`` at ``argmax |γ̂| − ε̂``.

    Example:
        >>> import torch
        >>> best_lambda(torch.tensor([-0.1, 0.3, 0.2]), 2.0).tolist()
        [0.0, 2.0, 0.0]
    """
    j = torch.argmax(g)
    vertex = torch.zeros_like(g).scatter(0, j.reshape(1), bound)
    return torch.where(g[j] > 0, vertex, torch.zeros_like(g))


def _timed(fn: Callable[[torch.Tensor], nn.Module], lam: torch.Tensor,
           seconds: list[float]) -> nn.Module:
    start = time.perf_counter()
    out = fn(lam)
    seconds.append(time.perf_counter() - start)
    return out


LOWER_SIDES = ("oracle", "found")
RELEASE_EVERY = 50   # iterations between returning freed heap to the system (heap.py)


def play(game: Game, *, bound: float, gap: float,
         max_iterations: int = 1000, check_every: int = 1,
         step_size: float | None = None, lower: str = "oracle") -> ReductionResult:
    """Run Algorithm 1 / 2 on ``game``; ``step_size`` η defaults to ``ν/(2ρ²B)`` (SP:
    ``ν/(8B)``, BGL: ``ν/(2B)``); ``lower`` is how ν̲ reads ``Best_h(λ̂)`` (module
    docstring, :data:`LOWER_SIDES`)."""
    if lower not in LOWER_SIDES:
        raise ValueError(f"lower must be one of {LOWER_SIDES}, got {lower!r}")
    m = game.num_multipliers
    eta = gap / (2 * game.rho ** 2 * bound) if step_size is None else step_size
    player = ExponentiatedGradient(m, lr=eta, radius=bound, initial=bound / (m + 1),
                                   dtype=torch.float64)
    mix, hist, seconds = _Mixture(), History(), []
    lam_sum = torch.zeros(m, dtype=torch.float64)
    last_gap, dual = float("inf"), float("nan")
    t = 0
    for t in range(1, max_iterations + 1):
        lam = player.weights()[1].clone()
        h = _timed(game.best_response, lam, seconds)
        obj_t, g_t = game.evaluate(h)
        mix.add(h, obj_t, g_t)
        lam_sum += lam
        lam_hat, obj_q, g_q = lam_sum / t, mix.objective / t, mix.g / t
        lagrangian = obj_q + lam_hat @ g_q
        nu_over = obj_q + best_lambda(g_q, bound) @ g_q - lagrangian
        loss, worst = game.report(obj_q, g_q)
        hist.lambda_hat.append(lam_hat.clone())
        hist.nu_over.append(float(nu_over))
        hist.loss.append(loss)
        hist.worst.append(worst)
        nu_under = float("nan")
        if t % check_every == 0 or t == max_iterations:
            low_obj, low_g = game.evaluate(_timed(game.best_response, lam_hat, seconds))
            dual_t = low_obj.cpu() + lam_hat @ low_g.to(lam_hat)
            if lower == "found":     # a heuristic's response can lose to an earlier iterate
                dual_t = torch.minimum(dual_t, mix.best_value(lam_hat))
            dual = float(dual_t)
            nu_under = float(lagrangian) - dual
            last_gap = max(float(nu_over), nu_under)
        hist.nu_under.append(nu_under)
        hist.gap.append(last_gap if nu_under == nu_under else float("nan"))
        if last_gap <= gap:
            break
        player.update(g_t.to(torch.float64).cpu())
        if t % RELEASE_EVERY == 0:
            release_freed_heap()
    return _result(game, mix, hist, lam_sum / t, seconds,
                   t=t, bound=bound, gap=gap, last_gap=last_gap, dual=dual, scope=lower)


def _result(game: Game, mix: _Mixture, hist: History,
            lam_hat: torch.Tensor, seconds: list[float], *, t: int, bound: float, gap: float,
            last_gap: float, dual: float, scope: str) -> ReductionResult:
    assert mix.g is not None
    g_q = mix.g / t
    cert = Certificate(iterations=t, iteration_bound=game.iteration_bound(bound, gap),
                       max_violation=float(g_q.max()),
                       violation_bound=(game.rho + 2 * gap) / bound,
                       objective=float(mix.objective / t), dual_bound=dual, gap=last_gap,
                       gap_target=gap, scope=scope)
    evidence: dict[str, object] = {}
    if last_gap > gap:
        outcome = "max_iterations"
    elif cert.violation_ok:
        outcome = "converged"
    else:
        outcome = "infeasible"
        worst = int(g_q.argmax())
        evidence = {"gap": last_gap, "max_violation": cert.max_violation,
                    "violation_bound": cert.violation_bound, "worst_row": worst,
                    "lambda_hat_total": float(lam_hat.sum()), "bound": bound,
                    "constraint_values": g_q.clone()}
    return ReductionResult(mix.model(), outcome, cert, hist, lam_hat,
                           oracle_calls=len(seconds), oracle_seconds=seconds,
                           evidence=evidence, first_iterations=list(mix.first),
                           last_member=mix.last,
                           member_objectives=torch.stack(mix.member_objectives),
                           member_constraints=torch.stack(mix.member_g))
