"""Choosing a solution among candidate iterates: best iterate and LP shrinking.

Given, for ``R`` candidates (snapshots) evaluated on a chosen split, the objective ``f_r`` and
constraint values ``g_{r,j}`` (``g ≤ 0`` is satisfied), two deterministic-ish outputs:

* :func:`best_iterate` — one candidate. Rule ``"feasible_first"`` (default): among candidates
  with ``max_j g_{r,j} ≤ tolerance`` the lowest objective; if none is feasible, the rank
  heuristic of Cotter, Jiang, Gupta, Wang, Narayan, You & Sridharan (JMLR 2019; TFCO's
  ``find_best_candidate_index`` with its defaults): rank the objectives and the maximum
  violations ``max(0, max_j g_{r,j})`` (``rankdata(method="min")``, so ties share the lower
  rank), take the candidate whose larger rank is smallest, break ties by the objective and
  then by the earlier index. Rule ``"rank"`` applies that heuristic to every candidate even
  when some are feasible (it can then prefer a slightly infeasible candidate with a much
  better objective — TFCO's exact behaviour).
* :func:`shrink_lp` — a mixture over at most ``m + 1`` candidates (Cotter, Jiang & Sridharan,
  ALT 2019, Lemma 3): ``min Σ w_r f_r`` s.t. ``Σ w_r g_{r,j} ≤ tolerance``, ``w`` in the
  simplex, solved by ``scipy.optimize.linprog(method="highs")``. A basic optimal solution has at
  most ``m + 1`` non-zero weights; the support is also reduced explicitly (Carathéodory steps
  along null directions of the active rows, which keep every constraint value and never raise
  the objective), so the bound holds whatever the solver returns. When no mixture is
  feasible, the smallest achievable maximum violation ``s*`` is found first, and the objective
  is minimised subject to ``Σ w_r g_{r,j} ≤ s*`` (flagged and warned about). A candidate
  with a ``+inf`` objective or constraint value (a KLD at ``p̂ ∈ {0, 1}``, say: the zero
  model's snapshot) gets weight 0; NaN is an error.

For rates affine in the leaves, a mixture's constraint value is exactly ``Σ w_r g_r``. For a
convex ψ of rates it is at most that (Jensen), so the LP is conservative; for ratios it is only
an approximation.

Example:
    >>> best_iterate([0.30, 0.10, 0.20], [[-0.1], [0.05], [0.0]])
    2
    >>> w = shrink_lp([1.0, 0.0, 0.5], [[-1.0], [1.0], [0.5]])
    >>> [round(float(v), 3) for v in w]
    [0.5, 0.5, 0.0]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import linprog
from scipy.stats import rankdata

RULES = ("feasible_first", "rank")


def _as_problem(objectives: Any, constraints: Any) -> tuple[np.ndarray, np.ndarray]:
    f = np.asarray(torch.as_tensor(objectives).detach().cpu().double().numpy()
                   if isinstance(objectives, torch.Tensor) else objectives, dtype=np.float64)
    if f.ndim != 1 or f.size == 0:
        raise ValueError(f"objectives must be a non-empty vector [R], got shape {f.shape}")
    g = np.asarray(constraints.detach().cpu().double().numpy()
                   if isinstance(constraints, torch.Tensor) else constraints, dtype=np.float64)
    if g.ndim == 1 and g.size == f.size:
        g = g[:, None]
    if g.size == 0:
        g = np.zeros((f.size, 0))
    if g.ndim != 2 or g.shape[0] != f.size:
        raise ValueError(f"constraints must have shape [R, m] with R = {f.size}, got {g.shape}")
    return f, g


# --------------------------------------------------------------------------- best iterate
def best_iterate(objectives: Sequence[float] | np.ndarray | torch.Tensor,
                 violations: Sequence[Sequence[float]] | np.ndarray | torch.Tensor, *,
                 tolerance: float = 0.0, rule: str = "feasible_first") -> int:
    """Index of the best candidate (see the module docstring for the rules).

    Args:
        objectives: ``[R]`` objective values (lower is better).
        violations: ``[R, m]`` constraint values ``g`` (``g ≤ 0`` satisfied; an equality
            constraint contributes ``|g|``, or the rows ``g`` and ``−g``).
        tolerance: a candidate is feasible when ``max_j g ≤ tolerance``.
        rule: ``"feasible_first"`` or ``"rank"``.

    NaN objectives count as ``+inf``; NaN constraint values as infinitely violated.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    f, g = _as_problem(objectives, violations)
    f = np.where(np.isnan(f), np.inf, f)
    g = np.where(np.isnan(g), np.inf, g)
    worst = g.max(axis=1) if g.shape[1] else np.full(f.size, -np.inf)
    feasible = worst <= tolerance
    if rule == "feasible_first" and feasible.any():
        idx = np.flatnonzero(feasible)
        return int(idx[np.argmin(f[idx])])       # argmin returns the first of ties
    violation = np.where(feasible, 0.0, np.maximum(worst, 0.0))
    rank = np.maximum(rankdata(f, method="min"), rankdata(violation, method="min"))
    order = np.lexsort((np.arange(f.size), f, rank))
    return int(order[0])


# --------------------------------------------------------------------------- LP shrinking
@dataclass
class LPMixture:
    """Result of :func:`shrink_lp`."""

    weights: np.ndarray          # [R], non-negative, sums to 1, at most m + 1 non-zero
    objective: float             # Σ w_r f_r
    constraints: np.ndarray      # [m], Σ w_r g_{r,j}
    feasible: bool               # max_j constraints ≤ tolerance (+1e-9)
    max_violation: float         # max(0, max_j constraints)
    message: str

    @property
    def support(self) -> list[int]:
        return [int(i) for i in np.flatnonzero(self.weights > 0)]


def shrink_lp(objectives: Sequence[float] | np.ndarray | torch.Tensor,
              constraints: Sequence[Sequence[float]] | np.ndarray | torch.Tensor, *,
              tolerance: float = 0.0, return_result: bool = False) -> np.ndarray | LPMixture:
    """Weights ``[R]`` of the best mixture of at most ``m + 1`` candidates (module docstring).

    Returns the weights, or the full :class:`LPMixture` when ``return_result`` is true.
    Emits a ``RuntimeWarning`` (and sets ``feasible=False``) when no mixture is feasible.
    """
    f_all, g_all = _as_problem(objectives, constraints)
    if np.isnan(f_all).any() or np.isnan(g_all).any() or (f_all == -np.inf).any() or (
            g_all == -np.inf).any():
        raise ValueError("shrink_lp needs finite objectives and constraint values (+inf "
                         "excludes a candidate); got NaN or -inf")
    # A candidate whose objective or a constraint is +inf (e.g. a KLD at p̂ ∈ {0, 1}) is in no
    # mixture worth having: it gets weight 0 and the LP runs on the others.
    usable = np.isfinite(f_all) & np.isfinite(g_all).all(axis=1)
    if not usable.any():
        raise ValueError("shrink_lp: every candidate has an infinite objective or constraint")
    f, g = f_all[usable], g_all[usable]
    r, m = g.shape
    ones = np.ones((1, r))
    a_ub = g.T if m else None
    b_ub = np.full(m, float(tolerance)) if m else None
    res = linprog(f, A_ub=a_ub, b_ub=b_ub, A_eq=ones, b_eq=[1.0], bounds=(0, None),
                  method="highs")
    message = "optimal"
    if res.status == 2:
        # No feasible mixture: smallest achievable max violation s*, then the best objective
        # among mixtures reaching it (a TFCO-style fallback, solved exactly instead of by
        # bisection). Variables (w, s): min s s.t. Gᵀw − s ≤ 0.
        phase = linprog(np.r_[np.zeros(r), 1.0], A_ub=np.c_[g.T, -np.ones(m)], b_ub=np.zeros(m),
                        A_eq=np.c_[ones, 0.0], b_eq=[1.0],
                        bounds=[(0, None)] * r + [(None, None)], method="highs")
        if phase.status != 0:
            raise RuntimeError(f"shrink_lp: the max-violation LP failed: {phase.message}")
        s_star = float(phase.x[-1])
        slack = 1e-9 * max(1.0, abs(s_star))
        res = linprog(f, A_ub=g.T, b_ub=np.full(m, s_star + slack), A_eq=ones, b_eq=[1.0],
                      bounds=(0, None), method="highs")
        message = (f"no mixture satisfies the constraints (tolerance {tolerance}); minimised "
                   f"the maximum violation instead: {s_star:.6g}")
        warnings.warn("shrink_lp: " + message, RuntimeWarning, stacklevel=2)
    if res.status != 0:
        raise RuntimeError(f"shrink_lp: linprog failed (status {res.status}): {res.message}")
    w = _reduce_support(np.clip(res.x, 0.0, None), f, g)
    values = g.T @ w if m else np.zeros(0)
    worst = float(values.max()) if m else -np.inf
    weights = np.zeros(f_all.shape[0])
    weights[usable] = w
    result = LPMixture(weights, float(f @ w), values, worst <= tolerance + 1e-9,
                       max(0.0, worst), message)
    return result if return_result else result.weights


def _reduce_support(w: np.ndarray, f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Carathéodory reduction to at most ``m + 1`` non-zero weights without changing any
    ``Σ w g_j`` or the sum, and without raising ``Σ w f``."""
    w = w / w.sum()
    w[w < 1e-15] = 0.0
    m = g.shape[1]
    while True:
        support = np.flatnonzero(w > 0)
        if support.size <= m + 1:
            break
        rows = np.vstack([g[support].T, np.ones(support.size)])     # (m + 1) × |S|
        d = np.linalg.svd(rows)[2][-1]                               # a null direction
        if f[support] @ d > 0:
            d = -d
        neg = d < 0
        ratios = np.where(neg, w[support] / np.where(neg, -d, 1.0), np.inf)
        k = int(np.argmin(ratios))
        w[support] = np.clip(w[support] + ratios[k] * d, 0.0, None)
        w[support[k]] = 0.0
    return w / w.sum()
