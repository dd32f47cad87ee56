"""Algorithm 1 of paper 002: per-cell acceptance probabilities ρ from a proxy's posterior
table, and the equal-count rule of the naive baselines.

A proxy ``ẑ`` with cells ``j = 1..L`` has a posterior table ``A[j, k] = Pr[z = k | ẑ = j]`` and
cell masses ``r̂_j = Pr[ẑ = j]``. Accepting an example of cell ``j`` with probability ``ρ_j``
gives ``Pr[accept, z = k] = Σ_j r̂_j ρ_j A_jk``; with ``q_j ∝ r̂_j ρ_j`` on the simplex the kept
distribution is ``qA`` and the acceptance rate is ``1 / C``, ``C = max_j q_j / r̂_j`` (the
paper's ``ρ = (q / r̂) / C``). Algorithm 1 picks ``q = argmin ‖qA − U‖₂`` on the simplex.

How it is solved here, in this order (why: an LP is exact to the solver's tolerance and HiGHS
is in scipy; scipy has no QP solver, so the QP runs only when no exact q exists):

1. **exact LP** (HiGHS): if some ``q`` has ``qA = U`` (``U ∈ C(A)``, Lemma 1), take, among them,
   the one with the LARGEST acceptance rate (minimise ``t`` with ``q_j ≤ t r̂_j``). Lemma 2 then
   holds to the LP's tolerance (~1e-9). The paper leaves the choice among such ``q`` open; any
   one balances, ours keeps the most examples.
2. otherwise the **QP** ``min ‖qA − U‖²`` on the simplex, as bounded least squares (scipy's
   BVLS, an active-set method; ``Σq = 1`` as a heavily weighted row: SLSQP reached the same
   optimum up to 100× slower, 30 s at 260 cells), then the same LP at the QP's point
   ``p* = q*A`` (within 1e-7 per coordinate) to pick the q with the largest acceptance rate:
   the kept distribution ``p*`` is unique, ``q`` is not.

A floor ``a`` on the acceptance rate is ``1/C ≥ a ⇔ q_j ≤ r̂_j / a`` for all ``j``: an upper
bound on each ``q_j`` in both programs. ``a ≤ 1`` is always feasible (``q = r̂`` accepts all).

The **relaxed** variant (§5) drops ``Σ q = 1`` (non-negative least squares) and normalises.
Cells with ``r̂_j = 0`` are dropped before solving (their row is undefined) and listed in
``dropped``; they get ``ρ_j = 0`` and ``q_j = 0``.

Example:
    >>> import numpy as np
    >>> A = np.array([[0.8, 0.2], [0.3, 0.7]]); rhat = np.array([0.6, 0.4])
    >>> s = sampling_probabilities(A, rhat)
    >>> s.exact, np.round(s.distribution, 6).tolist()
    (True, [0.5, 0.5])
    >>> round(s.acceptance, 4), np.round(s.rho, 4).tolist()
    (0.6667, [0.4444, 1.0])
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import linprog, lsq_linear, nnls

from .errors import FilterError

_REFINE = 1e-7  # the LP's slack around the QP's kept distribution, per coordinate
_WEIGHT = 1e4  # the weight of the row Σq = 1 in the bounded least squares


@dataclass(frozen=True)
class Sampling:
    """Algorithm 1's output. ``rho``, ``q``: one entry per cell (0 for dropped cells);
    ``acceptance``: the expected acceptance rate ``Σ_j r̂_j ρ_j = 1/C``; ``distribution``: the
    kept distribution over z in expectation, ``qA``; ``distance``: ``‖qA − U‖₂``; ``exact``:
    ``U`` was reached (Lemma 2); ``dropped``: the zero-mass cells removed before solving;
    ``method``: ``"lp"``, ``"qp+lp"`` (BVLS then LP), ``"nnls"`` or ``"equal-count"``."""

    rho: np.ndarray
    q: np.ndarray
    acceptance: float
    distribution: np.ndarray
    distance: float
    exact: bool
    dropped: tuple[int, ...]
    method: str


def check_distribution(target: np.ndarray | None, k: int) -> np.ndarray:
    """``target`` as a float array over ``k`` groups (``None``: uniform), or a FilterError.

    >>> check_distribution(None, 4).tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    if target is None:
        return np.full(k, 1.0 / k)
    u = np.asarray(target, dtype=np.float64).reshape(-1)
    if u.shape != (k,) or not np.all(np.isfinite(u)) or np.any(u < 0) \
            or abs(u.sum() - 1.0) > 1e-6:
        raise FilterError(
            f"target must be a distribution over the {k} groups (non-negative, summing to 1); "
            f"got {np.asarray(target).tolist()}: give {k} shares that sum to 1, in the order "
            "of the groups, or None for the uniform target")
    return u


def _check_table(A: np.ndarray, rhat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A, dtype=np.float64)
    rhat = np.asarray(rhat, dtype=np.float64).reshape(-1)
    if A.ndim != 2 or A.shape[0] != rhat.shape[0]:
        raise FilterError(f"the posterior table has shape {A.shape} but there are "
                          f"{rhat.shape[0]} cell masses: give one row of A per cell")
    if np.any(rhat < 0) or not np.isfinite(rhat).all() or abs(rhat.sum() - 1) > 1e-6:
        raise FilterError("the cell masses r̂ must be non-negative and sum to 1 "
                          f"(got sum {rhat.sum():.6g}): normalise the proxy's cell counts")
    return A, rhat


def _best_acceptance_lp(A: np.ndarray, rhat: np.ndarray, point: np.ndarray, slack: float,
                        cap: np.ndarray | None) -> np.ndarray | None:
    """Among q on the simplex with ``|qA − point| ≤ slack`` (and ``q ≤ cap``), the q of the
    largest acceptance rate: minimise ``t`` s.t. ``q_j − t r̂_j ≤ 0``. ``None``: infeasible."""
    L, K = A.shape
    c = np.zeros(L + 1)
    c[-1] = 1.0
    ratio = np.hstack([np.eye(L), -rhat[:, None]])
    a_ub, b_ub = [ratio], [np.zeros(L)]
    if slack > 0:
        band = np.hstack([A.T, np.zeros((K, 1))])
        a_ub += [band, -band]
        b_ub += [point + slack, slack - point]
        a_eq, b_eq = np.hstack([np.ones((1, L)), [[0.0]]]), [1.0]
    else:
        a_eq = np.vstack([np.hstack([A.T, np.zeros((K, 1))]), np.hstack([np.ones(L), [0.0]])])
        b_eq = np.append(point, 1.0)
    upper = cap if cap is not None else np.full(L, None)
    bounds = [(0.0, u) for u in upper] + [(0.0, None)]
    res = linprog(c, A_ub=np.vstack(a_ub), b_ub=np.concatenate(b_ub), A_eq=a_eq, b_eq=b_eq,
                  bounds=bounds, method="highs")
    return np.clip(res.x[:L], 0.0, None) if res.status == 0 else None


def _simplex_qp(A: np.ndarray, target: np.ndarray, cap: np.ndarray | None) -> np.ndarray:
    """``argmin ‖qA − U‖²`` on the simplex (and ``q ≤ cap``): bounded least squares by BVLS
    (an active-set method, exact for its bounds), the equality ``Σq = 1`` as one row of weight
    ``_WEIGHT`` (it then holds to ~1e-8). 100× faster than SLSQP at a few hundred cells, and
    as close to the optimum (tests/filtering/test_qp.py checks it against trust-constr)."""
    L = A.shape[0]
    rows = np.vstack([A.T, np.full((1, L), _WEIGHT)])
    upper = np.ones(L) if cap is None else np.minimum(cap, 1.0)
    res = lsq_linear(rows, np.append(target, _WEIGHT), bounds=(np.zeros(L), upper),
                     method="bvls", tol=1e-15)
    q = np.clip(res.x, 0.0, upper)
    return q / q.sum()


def sampling_probabilities(A: np.ndarray, rhat: np.ndarray, target: np.ndarray | None = None,
                           *, min_acceptance: float | None = None,
                           relaxed: bool = False) -> Sampling:
    """Algorithm 1: acceptance probabilities ρ per cell for the kept distribution closest to
    ``target`` (uniform if ``None``), optionally with a floor on the acceptance rate.

    Raises:
        FilterError: a table and masses that do not match, masses that are not a
            distribution, a target that is not one, a floor outside (0, 1], or a floor with
            ``relaxed``.
    """
    A, rhat = _check_table(A, rhat)
    u = check_distribution(target, A.shape[1])
    if min_acceptance is not None and not 0.0 < min_acceptance <= 1.0:
        raise FilterError(f"min_acceptance must lie in (0, 1] (got {min_acceptance}): it is "
                          "the smallest share of the stream the filter may keep")
    if relaxed and min_acceptance is not None:
        raise FilterError("min_acceptance is not defined for the relaxed variant (its q does "
                          "not sum to 1): drop one of the two")
    keep = np.flatnonzero(rhat > 0)
    Ak, rk = A[keep], rhat[keep]
    cap = None if min_acceptance is None else rk / min_acceptance
    if relaxed:
        qk, method = nnls(Ak.T, u)[0], "nnls"
        qk = qk / qk.sum()
    else:
        qk, method = _best_acceptance_lp(Ak, rk, u, 0.0, cap), "lp"
        if qk is None:
            point = _simplex_qp(Ak, u, cap) @ Ak
            qk, method = _best_acceptance_lp(Ak, rk, point, _REFINE, cap), "qp+lp"
            if qk is None:  # the LP's tolerance refused the band: keep the QP's own q
                qk = _simplex_qp(Ak, u, cap)
        qk = qk / qk.sum()
        if min_acceptance is not None:
            qk = _honour_floor(qk, rk, min_acceptance)
    return _result(A, rhat, keep, qk, u, method)


def sampling_for_total(A: np.ndarray, rhat: np.ndarray, target: np.ndarray,
                       **options: Any) -> Sampling:
    """Algorithm 1 for a target of any total ``s`` (intersecting groups, paper 002 A.2:
    ``U_intersect`` and every row of A sum to the number of attributes G): solved on ``A/s``
    and ``U/s`` (a distribution; the same minimiser ``q``, the hull scaled by ``1/s``), then
    the kept distribution and the distance scaled back. ``s = 1``: Algorithm 1 unchanged.
    ``options``: :func:`sampling_probabilities`'s.

    >>> A = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])   # two attributes
    >>> s = sampling_for_total(A, np.array([0.8, 0.2]), np.full(4, 0.5))
    >>> np.round(s.distribution, 6).tolist(), round(s.acceptance, 4)
    ([0.5, 0.5, 0.5, 0.5], 0.4)
    """
    total = float(np.sum(target))
    if total == 1.0:
        return sampling_probabilities(A, rhat, target, **options)
    s = sampling_probabilities(np.asarray(A) / total, rhat, np.asarray(target) / total,
                               **options)
    return replace(s, distribution=s.distribution * total, distance=s.distance * total,
                   exact=bool(np.abs(s.distribution * total - target).max() <= 1e-8))


def _honour_floor(q: np.ndarray, rhat: np.ndarray, floor: float) -> np.ndarray:
    """Make ``1/C ≥ floor`` hold exactly, not only within the solvers' tolerance (~1e-7):
    mixing ``q`` with ``r̂`` (ratio 1 everywhere) moves ``C`` linearly towards 1."""
    c, bound = float((q / rhat).max()), (1.0 - 1e-12) / floor  # a hair inside: no rounding
    if c <= bound:
        return q
    if bound <= 1.0:  # a floor of 1: keep every row (q = r̂ is the only such q)
        return rhat.copy()
    lam = (c - bound) / (c - 1.0)
    return (1.0 - lam) * q + lam * rhat


def equal_count_probabilities(A: np.ndarray, rhat: np.ndarray,
                              target: np.ndarray | None = None) -> Sampling:
    """The naive baselines' rule (paper 002 §5): keep the same expected number of examples of
    every predicted group, ``ρ_j = min r̂ / r̂_j`` — ``q`` uniform over the non-empty cells.
    With a non-uniform target and one cell per group (the predicted group), the kept count of
    predicted group ``j`` is proportional to ``target_j`` instead (``q_j ∝ target_j``).

    >>> s = equal_count_probabilities(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0.8, 0.2]))
    >>> np.round(s.rho, 4).tolist(), round(s.acceptance, 4), np.round(s.distribution, 4).tolist()
    ([0.25, 1.0], 0.4, [0.55, 0.45])
    """
    A, rhat = _check_table(A, rhat)
    u = check_distribution(target, A.shape[1])
    keep = np.flatnonzero(rhat > 0)
    share = u[keep] if A.shape[0] == A.shape[1] else np.ones(keep.size)
    if share.sum() <= 0:
        raise FilterError("the target gives no share to any predicted group that occurs: "
                          "give a target with mass on the groups the proxy predicts")
    return _result(A, rhat, keep, share / share.sum(), u, "equal-count")


def _result(A: np.ndarray, rhat: np.ndarray, keep: np.ndarray, qk: np.ndarray,
            u: np.ndarray, method: str) -> Sampling:
    ratio = qk / rhat[keep]
    rho = np.zeros(A.shape[0])
    q = np.zeros(A.shape[0])
    rho[keep] = ratio / ratio.max()            # ρ_j = (q_j / r̂_j) / C, Algorithm 1
    q[keep] = qk
    dist = qk @ A[keep]
    return Sampling(rho=rho, q=q, acceptance=float(rhat @ rho), distribution=dist,
                    distance=float(np.linalg.norm(dist - u)),
                    exact=bool(np.abs(dist - u).max() <= 1e-8),
                    dropped=tuple(int(j) for j in np.flatnonzero(rhat <= 0)), method=method)
