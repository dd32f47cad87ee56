"""The exact worst case of a problem's constraints over soft group assignments ``W ∈ 𝒲``.

For evaluation (log time, whole splits; never in a step): paper 004's robust constraint
``max_{w ∈ 𝒲(θ)} g_j(θ, w)`` (Eq. (6)) at the model's cell counts. A constraint row is
``d + Σ_k A_k·R_k(W)`` with each rate a ratio of linear functions of ``W``
(:mod:`fairgames.noisy_groups.soft_rates`); a row with ONE rate that depends on ``W`` (a group's TPR
or FPR against the overall rate: equal opportunity, equalized odds) is a linear-fractional
program, solved exactly as an LP by the Charnes–Cooper transformation (``y = t·W``,
``t = 1/denominator``: maximise ``±⟨a, y⟩`` s.t. ``⟨d, y⟩ = 1``, ``A_eq·y = b_eq·t``,
``y, t ≥ 0``) with scipy's HiGHS. A row with several such rates gets the sum of their
separate extremes, an upper bound, flagged ``exact = False``. The authors' code reported the
current ``W`` instead (a lower bound).

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, group, true_positive_rate
    >>> from fairgames.game import Problem
    >>> tpr = lambda v: true_positive_rate(group("g", v))
    >>> problem = Problem(error_rate(), [(tpr(v) >= true_positive_rate() - 0.05).named(v)
    ...                                  for v in ("0", "1")])
    >>> b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])                 # no noise: 𝒲 = {identity}
    >>> counts = torch.tensor([[5.0, 2.0, 1.0, 6.0], [3.0, 4.0, 0.0, 2.0]])
    >>> worst = soft_worst_case(problem, counts, b, "g")
    >>> [round(float(v), 4) for v in worst.values]   # TPR − 0.05 − TPR_j, true groups
    [-0.2286, 0.1881]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linprog

from fairgames.game.problem import Problem

from .soft_groups import CELLS, check_noise_model, initial_assignments
from .soft_rates import CellRates


@dataclass
class SoftWorstCase:
    """Each constraint row's maximum over 𝒲.

    Attributes:
        rows: the rows' names.
        values: ``[M]`` the maxima (``nan`` where a rate's denominator is 0 on all of 𝒲).
        exact: ``[M]`` False where a row has several ``W``-dependent rates (an upper bound).
        assignments: per row, a maximising ``W [m̂, 4, m]`` (``None`` when not exact or when
            the supremum is only approached as a denominator goes to 0).
    """

    rows: list[str]
    values: np.ndarray
    exact: np.ndarray
    assignments: list[np.ndarray | None]


def soft_worst_case(problem: Problem, counts: torch.Tensor, p_true_given_noisy: torch.Tensor,
                    attribute: str, true_values: Sequence[str] | None = None, *,
                    cells: CellRates | None = None) -> SoftWorstCase:
    """``max_{W ∈ 𝒲} g_r(W)`` for every constraint row ``r`` of an affine ``problem`` whose
    rates read ``attribute`` as soft true groups, at cell counts ``[m̂, 4]``
    (:func:`~fairgames.noisy_groups.soft_groups.cell_counts` of a whole split) and the noise model
    ``[m, m̂]``. Host-side (scipy); see the module docstring. ``cells``: the problem's
    :class:`CellRates` on the host when the caller solves many (built here otherwise)."""
    b = check_noise_model(p_true_given_noisy)
    m, m_hat = b.shape
    names = list(true_values) if true_values is not None else [str(j) for j in range(m)]
    terms = problem.compile()
    if not terms.affine_only:
        raise ValueError("the exact soft worst case covers problems linear in the rates")
    if cells is None:
        cells = CellRates(problem, attribute, names, m_hat)
    n = torch.as_tensor(counts, dtype=torch.float64).reshape(m_hat, CELLS)
    num, den = cells.num.double(), cells.den.double()
    a, d = terms.a.double().cpu(), terms.d.double().cpu()
    base, _ = cells.leaves(n, initial_assignments(b))                # W-free leaves at any W
    a_eq, b_eq = _feasible_set(n, b)
    scale = n[:, :, None].expand(m_hat, CELLS, m).reshape(-1)
    values, exact, argmax = [], [], []
    for r in range(a.shape[0]):
        value, found, moving = float(d[r]), None, 0
        for k in range(a.shape[1]):
            coef = float(a[r, k])
            if coef == 0.0:
                continue
            if not bool(cells.depends[k]):
                value += coef * float(base[k])
                continue
            moving += 1
            best, found = _extreme((num[k] * scale).numpy(), (den[k] * scale).numpy(),
                                   a_eq, b_eq, np.sign(coef))
            value += coef * best
        values.append(value)
        exact.append(moving <= 1)
        argmax.append(found.reshape(m_hat, CELLS, m) if moving == 1 and found is not None
                      else None)
    return SoftWorstCase(list(terms.row_names), np.array(values), np.array(exact), argmax)


def _feasible_set(n: torch.Tensor, b: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``A_eq·W = b_eq`` over ``W`` flattened as ``[m̂, 4, m]``: the total-probability rows of
    the noisy groups with examples, and every simplex row."""
    m, m_hat = b.shape
    total = n.sum(1)
    v = (n / total.clamp_min(1e-300)[:, None]).numpy()
    size = m_hat * CELLS * m
    rows, rhs = [], []
    for k in range(m_hat):
        if float(total[k]) <= 0:          # absent noisy group: no total-probability row
            continue
        for j in range(m):
            row = np.zeros(size)
            row[[(k * CELLS + c) * m + j for c in range(CELLS)]] = v[k]
            rows.append(row)
            rhs.append(float(b[j, k]))
    for k in range(m_hat):
        for c in range(CELLS):
            row = np.zeros(size)
            row[(k * CELLS + c) * m: (k * CELLS + c + 1) * m] = 1.0
            rows.append(row)
            rhs.append(1.0)
    return np.array(rows), np.array(rhs)


def _extreme(num: np.ndarray, den: np.ndarray, a_eq: np.ndarray, b_eq: np.ndarray,
             sign: float) -> tuple[float, np.ndarray | None]:
    """``sign·max_W sign·⟨num, W⟩/⟨den, W⟩`` over ``{A_eq W = b_eq, W ≥ 0}`` by
    Charnes–Cooper: variables ``(y, t)``, ``⟨den, y⟩ = 1``, ``A_eq y − b_eq t = 0``."""
    size = num.shape[0]
    cost = np.concatenate([-sign * num, [0.0]])
    eq = np.vstack([np.concatenate([den, [0.0]]),
                    np.hstack([a_eq, -b_eq[:, None]])])
    rhs = np.concatenate([[1.0], np.zeros(len(b_eq))])
    out = linprog(cost, A_eq=eq, b_eq=rhs, bounds=[(0, None)] * (size + 1), method="highs")
    if out.status != 0:
        return float("nan"), None      # the denominator is 0 on all of 𝒲 (infeasible)
    y, t = out.x[:size], out.x[size]
    w = y / t if t > 1e-12 else None
    return float(num @ y), w
