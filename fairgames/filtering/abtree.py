"""Algorithm 4 of paper 002: the (α, β)-proxy, a greedy tree of randomised splits whose leaves
are the proxy's cells (soft memberships), each split learned by Algorithm 3 (:mod:`.alpha_beta`).

The loop (§4.3, with the decisions the paper leaves open, docs/filtering.md):

1. the posterior table ``A`` of the leaves (soft weights, Def 10) and the hull point ``U′``
   nearest the target ``U`` (Algorithm 1's QP, :func:`.qp.sampling_probabilities`); stop when
   ``‖U − U′‖ ≤ beta_stop`` (A.1.2: 0.1);
2. for EVERY leaf of depth < ``max_height``, Algorithm 3 at level ``α − ε`` (``ε = min(eps,
   α/2)``) with Lemma 4's objective (corrected sign; by default without its ``f(γ)`` term,
   see :func:`fit_alpha_beta`); a candidate is **rejected** if a child's
   mass ``Σw`` is below ``min_leaf`` (Theorem 3 needs a minimum per leaf:
   :func:`theorem3_min_leaf` gives the paper's number), if a child's row is more than α from
   the base rates (every leaf α-disclosive), or if it does not shrink the hull distance by a
   factor ``1 − γ`` (Lemma 3's progress, as the paper's Remark applies it empirically);
3. the accepted candidate of the smallest new distance is made; none: stop.

Each accepted split shrinks the distance by ``1 − γ`` from at most √2, so there are at most
``⌈(ln β − ln √2) / ln(1 − γ)⌉`` of them (Theorem 2; 26 at γ = β = 0.1).

Children (Def 10): the leaf ``V`` splits into ``V + "0"`` of weights ``w·h̄`` (the h = 1 side,
Lemma 3's progress child) and ``V + "1"`` of weights ``w·(1 − h̄)``.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.choice(2, size=800, p=[0.8, 0.2]); X = rng.normal(size=(800, 2)) + 2 * z[:, None]
    >>> p = fit_alpha_beta(X, z, 2, alpha=0.6, T=100)
    >>> p.n_cells >= 2, p.distances[-1] < p.distances[0]
    (True, True)
    >>> bool(np.allclose(p.memberships(X).sum(1), 1.0))
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import nnls

from .alpha_beta import (
    DEFAULT_LAMBDA_MAX,
    DEFAULT_T,
    Split,
    child_rows,
    learn_split,
    lemma4_costs,
    paired_regression,
    standardise,
)
from .intersect import members
from .metrics import posterior_table
from .qp import sampling_for_total

MIN_LEAF = 50.0  # a child's least mass Σw (rows), as the baseline tree's min_samples_leaf


def theorem3_min_leaf(d: int, k: int, *, delta: float = 0.05, eps: float = 0.05,
                      beta: float = 0.1, gamma: float = 0.1) -> float:
    """Theorem 3's least number of samples per proxy group,
    ``(1/(2ε²)) ln(8dk(ln β − ln √2) / (δ ln(1 − γ)))``.

    >>> round(theorem3_min_leaf(10, 5))
    2442
    """
    rounds = (math.log(beta) - math.log(math.sqrt(2))) / math.log(1 - gamma)
    return math.log(8 * d * k * rounds / delta) / (2 * eps ** 2)


def theorem2_rounds(beta: float, gamma: float) -> int:
    """Theorem 2's bound on the accepted splits, ``⌈(ln β − ln √2) / ln(1 − γ)⌉``.

    >>> theorem2_rounds(0.1, 0.1)
    26
    """
    return math.ceil((math.log(beta) - math.log(math.sqrt(2))) / math.log(1 - gamma))


@dataclass(frozen=True)
class AlphaBetaProxy:
    """The fitted tree: ``paths`` the leaves (the cells, in order), ``splits`` the splits made,
    in order, each ``(path of the leaf split, Split)``; ``distances`` the hull distance before
    each round (the last: the final tree's). A row's membership of each leaf is its expected
    weight over the randomised splits (Def 10)."""

    paths: tuple[str, ...]
    splits: tuple[tuple[str, Split], ...]
    distances: tuple[float, ...] = field(default=())
    relaxed: bool = False

    @property
    def n_cells(self) -> int:
        return len(self.paths)

    def memberships(self, X: np.ndarray) -> np.ndarray:
        """``W`` (n × leaves): replay the splits in order; each row sums to 1."""
        X = np.asarray(X, dtype=np.float64)
        cols, paths = [np.ones(len(X))], [""]
        for path, split in self.splits:
            i = paths.index(path)
            h = split(X)
            cols[i:i + 1], paths[i:i + 1] = [cols[i] * h, cols[i] * (1 - h)], [path + "0",
                                                                               path + "1"]
        return np.stack(cols, axis=1)

    def cells(self, X: np.ndarray) -> np.ndarray:
        """The most likely leaf of each row (the report's hard counts)."""
        return self.memberships(X).argmax(1)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "alpha_beta", "n_cells": self.n_cells, "paths": list(self.paths),
                "splits": [{"leaf": p, **s.to_dict()} for p, s in self.splits],
                "distances": list(self.distances), "relaxed": self.relaxed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlphaBetaProxy:
        return cls(tuple(d["paths"]), tuple((s["leaf"], Split.from_dict(s))
                                            for s in d["splits"]),
                   tuple(float(x) for x in d.get("distances", ())),
                   bool(d.get("relaxed", False)))


def _hull(W: np.ndarray, z: np.ndarray, K: int, target: np.ndarray, relaxed: bool = False
          ) -> tuple[np.ndarray, float]:
    """``U′``, the hull point of the leaves' rows nearest the target, and its distance; with
    ``relaxed`` the point of the rows' CONE nearest it (:func:`cone_projection`, §5)."""
    A, mass = posterior_table(W, z, K)
    if relaxed:
        return cone_projection(A[mass > 0], target)
    s = sampling_for_total(A, mass, target)
    return s.distribution, s.distance


def cone_projection(A: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """The relaxed variant's ``U′`` (paper 002 §5: Algorithm 1 without ``Σq = 1``): ``qA`` for
    ``q = argmin_{q ≥ 0} ‖qA − U‖₂`` (NNLS), a point of the cone of the rows, generally off
    the simplex, and its distance ``‖U − U′‖``. For a uniform ``U`` it is the hull projection
    scaled, and the distance is ``d_hull / √(1 + K d_hull²)`` (notes §2.9).

    >>> p, d = cone_projection(np.array([[1.0, 0.0]]), np.array([0.5, 0.5]))
    >>> p.tolist(), round(d, 4)
    ([0.5, 0.0], 0.5)
    """
    q = nnls(np.asarray(A, dtype=np.float64).T, np.asarray(target, dtype=np.float64))[0]
    point = q @ A
    return point, float(np.linalg.norm(point - target))


@dataclass
class _Grow:
    """The state of Algorithm 4's loop (the sample, the settings, the leaves so far)."""

    X: np.ndarray
    z: np.ndarray
    K: int
    target: np.ndarray
    alpha: float
    gamma: float
    min_leaf: float
    T: int
    lambda_max: float
    eps: float
    lemma3: bool
    relaxed: bool = False
    judge_relaxed: bool = False  # progress and stop tests on the relaxed distance

    def __post_init__(self) -> None:
        self.onehot = members(self.z, self.K)  # one-hot, or multi-hot (A.2)
        self.r = self.onehot.mean(0)  # the global base rates (A.4)
        self.scaling = standardise(self.X)
        self.oracle = paired_regression((self.X - self.scaling[0]) / self.scaling[1])

    def candidate(self, W: np.ndarray, i: int, closest: np.ndarray, d_old: float
                  ) -> tuple[float, Split, np.ndarray] | None:
        """Algorithm 3 on leaf ``i``; the split, its new distance and W, or None (rejected)."""
        w = W[:, i]
        b = lemma4_costs(self.onehot, w, self.target, closest,
                         self.gamma if self.lemma3 else None)
        level = self.alpha - min(self.eps, self.alpha / 2)
        split, game = learn_split(self.X, self.onehot, w, self.r, b, level, T=self.T,
                                  lambda_max=self.lambda_max, scaling=self.scaling,
                                  oracle=self.oracle)
        h = game.h
        if min((w * h).sum(), (w * (1 - h)).sum()) < self.min_leaf:
            return None
        if np.abs(child_rows(self.onehot, w, h) - self.r).max() > self.alpha + 1e-12:
            return None
        W_new = np.concatenate([W[:, :i], (w * h)[:, None], (w * (1 - h))[:, None],
                                W[:, i + 1:]], axis=1)
        d_new = _hull(W_new, self.z, self.K, self.target, self.judge_relaxed)[1]
        return (d_new, split, W_new) if d_new <= (1 - self.gamma) * d_old else None


def fit_alpha_beta(X: np.ndarray, z: np.ndarray, n_groups: int, alpha: float, *,
                   target: np.ndarray | None = None, gamma: float = 0.1,
                   beta_stop: float = 0.1, max_height: int = 20, min_leaf: float = MIN_LEAF,
                   T: int = DEFAULT_T, lambda_max: float = DEFAULT_LAMBDA_MAX,
                   eps: float = 0.02, lemma3: bool = False,
                   relaxed: bool = False, relaxed_tests: bool = True) -> AlphaBetaProxy:
    """Algorithm 4 on features ``X`` and group codes ``z`` (0..K−1), or a multi-hot matrix
    ``z`` (n × K, intersecting groups, A.2: give ``target=U_intersect``): the (α, β)-proxy.

    ``lemma3=True`` gives Algorithm 3 Lemma 4's objective with its ``f(γ)`` term (the split
    game then looks for a split meeting Lemma 3's sufficient condition (1)); the default drops
    that term (``Q = c̄_V``: the most mass-weighted progress towards U) and judges progress by
    the hull distance alone, as the paper's Remark does — on the tests' synthetic data the
    ``f(γ)`` objective's only α-feasible optimum was ``h ≡ 0`` (no split at α ≤ 0.6).

    ``relaxed=True`` is §5's relaxed (α, β)-proxy: ``U′`` and the distance ``‖U − U′‖`` come
    from the CONE of the leaves' rows (:func:`cone_projection`, Algorithm 1 without
    ``Σq = 1``) wherever the tree uses them — Lemma 4's costs ``c_j = U′_{z_j} − U_{z_j}``,
    the ``1 − γ`` progress test and the ``beta_stop`` test — so ``distances`` are relaxed
    distances. The filter's ρ is then the normalised NNLS solution; its imbalance is measured
    on the normalised kept distribution, as for every proxy. ``relaxed_tests=False`` keeps the
    cone's ``U′`` in the costs but judges progress and stopping by the hull distance (the
    kept distribution's imbalance; ``distances`` are then hull distances): for a uniform
    target the relaxed distance ``d/√(1 + K d²)`` shrinks by less than the hull's, so the
    relaxed ``1 − γ`` test is the harder one (docs/filtering.md, measured on Adult)."""
    X = np.asarray(X, dtype=np.float64)
    U = np.full(n_groups, 1.0 / n_groups) if target is None else np.asarray(target, float)
    g = _Grow(X, np.asarray(z), n_groups, U, float(alpha), gamma, min_leaf, T, lambda_max,
              eps, lemma3, relaxed, relaxed and relaxed_tests)
    W, paths, splits, dists = np.ones((len(X), 1)), [""], [], []
    while True:
        closest, d_old = _hull(W, g.z, n_groups, U, relaxed)
        if relaxed and not relaxed_tests:
            d_old = _hull(W, g.z, n_groups, U)[1]
        dists.append(d_old)
        if d_old <= beta_stop:
            break
        best = None
        for i, path in enumerate(paths):
            if len(path) >= max_height:
                continue
            c = g.candidate(W, i, closest, d_old)
            if c is not None and (best is None or c[0] < best[0][0]):
                best = (c, i)
        if best is None:
            break
        (_, split, W), i = best
        splits.append((paths[i], split))
        paths[i:i + 1] = [paths[i] + "0", paths[i] + "1"]
    return AlphaBetaProxy(tuple(paths), tuple(splits), tuple(dists), relaxed)
