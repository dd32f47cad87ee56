"""The paper's metrics (paper 002 §5, Defs 2 and 5) on a sample with known z.

* ``posterior_table(W, z, K)``: ``A[j, k] = Pr[z = k | ẑ = j]`` and ``r̂_j = Pr[ẑ = j]``
  from soft memberships ``W`` (n × L; one-hot for a hard proxy): ``A = WᵀZ / Σ W``.
* ``disclosivity(A, prior, mass)``: ``max_{j, k} |A_jk − prior_k|`` over the cells with mass
  (Def 5; an empty cell discloses nothing about anyone).
* ``imbalance(p, target)``: ``‖p − target‖₂`` (Def 2).

Example:
    >>> import numpy as np
    >>> W = np.eye(2)[[0, 0, 1, 1]]; z = np.array([0, 1, 1, 1])
    >>> A, r = posterior_table(W, z, 2)
    >>> A.tolist(), r.tolist()
    ([[0.5, 0.5], [0.0, 1.0]], [0.5, 0.5])
    >>> disclosivity(A, np.array([0.25, 0.75]), r)
    0.25
    >>> round(imbalance(np.array([0.25, 0.75]), np.array([0.5, 0.5])), 4)
    0.3536
"""

from __future__ import annotations

import numpy as np

from .intersect import members


def posterior_table(W: np.ndarray, z: np.ndarray, n_groups: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(A, r̂)``; a row of zero mass is left at zeros (Algorithm 1 drops it). ``z``: group
    codes, or a multi-hot membership matrix (intersecting groups, A.2: A holds marginals)."""
    onehot = members(z, n_groups)
    mass = W.sum(0)
    A = np.divide(W.T @ onehot, mass[:, None], out=np.zeros((W.shape[1], n_groups)),
                  where=mass[:, None] > 0)
    return A, mass / mass.sum()


def group_counts(z: np.ndarray, n_groups: int) -> np.ndarray:
    """The rows of each group (codes, or a multi-hot matrix's column sums)."""
    if np.ndim(z) == 2:
        return np.asarray(z).sum(0).astype(np.int64)
    return np.bincount(z, minlength=n_groups)


def disclosivity(A: np.ndarray, prior: np.ndarray, mass: np.ndarray) -> float:
    """``max |Pr[z = k | ẑ = j] − Pr[z = k]|`` over the cells of positive mass."""
    return float(np.abs(A[mass > 0] - prior).max())


def imbalance(p: np.ndarray, target: np.ndarray) -> float:
    """``‖p − target‖₂``."""
    return float(np.linalg.norm(np.asarray(p) - np.asarray(target)))


def group_shares(z: np.ndarray, n_groups: int, weights: np.ndarray | None = None) -> np.ndarray:
    """The (weighted) distribution of ``z`` over its ``n_groups`` codes; for a multi-hot
    matrix ``z`` (intersecting groups), every group's weighted marginal share (Def 16)."""
    if np.ndim(z) == 2:
        w = np.ones(len(z)) if weights is None else np.asarray(weights, dtype=np.float64)
        return w @ z / w.sum() if w.sum() > 0 else np.zeros(n_groups)
    c = np.bincount(z, weights=weights, minlength=n_groups).astype(np.float64)
    return c / c.sum() if c.sum() > 0 else c
