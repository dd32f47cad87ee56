"""Algorithm 3 of paper 002: learn one randomised split of a soft leaf by a Lagrangian game.

The split problem is Program (3) with Lemma 4's objective (sign corrected, see below) and the
two-sided ratio constraints of Appendix A.4, on the leaf's soft weights ``w`` normalised by
``Σw`` (the paper's unnormalised scale makes its λ_max ≈ 2.6e6 and T ≈ 1e28 on Adult)::

    min_h  Σ_j w_j h_j b_j                              (b_j = c_j − Q, Lemma 4, corrected)
    s.t.   |Σ_j w_j h_j (1[z_j = k] − r_k)|     ≤ α Σ_j w_j h_j        for every group k
           |Σ_j w_j (1−h_j) (1[z_j = k] − r_k)| ≤ α Σ_j w_j (1 − h_j)

i.e. ``|Pr[z = k | h = 1, leaf] − r_k| ≤ α`` (and for h = 0), multiplied through by the
denominator — the exact, scale-consistent linearisation (``α·Σw·h``); the printed Program (3)
has a bare ``α``, which compares a mass with a share. ``r`` is the global base rate (A.4).

The game (Algorithm 3): ``λ ∈ R^{4K}_{≥0}``, ``‖λ‖₂ ≤ λ_max``, blocks ``(1+, 1−, 0+, 0−)``.
The Lagrangian is affine in h, so the cost of labelling example j as 1 is ``∂L/∂h_j``::

    LC_j = w_j [b_j + Σ_k (λ1+ − λ1− − λ0+ + λ0−)_k G_jk − α Σ_k (λ1+ + λ1−)_k
                + α Σ_k (λ0+ + λ0−)_k],          G_jk = 1[z_j = k] − r_k,

and labelling it 0 costs 0. Each round θ best-responds through a cost-sensitive oracle
(Definition 14, :func:`paired_regression`), then λ takes a projected gradient-ascent step
``λ ← Π(λ + t^{-1/2} g(h_t))`` — clip at 0, then rescale into the ℓ2 ball, the exact
projection onto that set. The output is the **uniform mixture** of the T best responses: a
randomised split, ``h̄(x) = mean_t h_t(x) ∈ [0, 1]``.

**T and λ_max** (the paper's schedule is unusable): defaults ``T = 300`` and ``λ_max = 10``
(:data:`DEFAULT_T`, :data:`DEFAULT_LAMBDA_MAX`), chosen by measurement on normalised weights
(docs/filtering.md, "The (α, β)-proxy"); both are arguments.

**The library's game players** (:mod:`fairgames.game`) do not fit here, so this is a
standalone numpy loop: their λ-players project on an ℓ1 ball (this game needs the ℓ2 ball
and the ``t^{-1/2}`` step), they run on torch tensors of a training step, and the
best-response θ here is an oracle fed per-example costs ``LC_j`` built from per-leaf
quantities (``b``, ``w``, ``r``), not a model taking gradient steps on a rate. What does fit
is the shape of the game: the costs ARE ``∂L/∂h``, which autograd would give on a leaf tensor.

**Lemma 4, corrected** (notes §2.5): condition (1) of Lemma 3,
``⟨R(V1) − R(V), U − U′⟩ ≥ ‖U − U′‖ f(γ)``, is equivalent to ``Σ w h (c_j − Q) ≤ 0`` with
``c_j = U′_{z_j} − U_{z_j}`` and ``Q = c̄_V − ‖U − U′‖ f(γ)`` (the paper prints ``+``).

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.integers(0, 2, 300); X = rng.normal(size=(300, 2)) + z[:, None]
    >>> onehot = np.eye(2)[z]; r = onehot.mean(0)
    >>> b = np.where(z == 1, -1.0, 1.0)                  # the objective wants h = 1 on z = 1
    >>> split, game = learn_split(X, onehot, np.ones(300), r, b, alpha=0.1)
    >>> bool(np.allclose(split(X), game.h)), game.violation < 0.01   # ≤ ε, normalised
    (True, True)
    >>> rows = child_rows(onehot, np.ones(300), game.h)
    >>> bool(np.abs(rows - r).max() <= 0.1 + 0.02)       # α-disclosive, up to the game's ε
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_T = 300
DEFAULT_LAMBDA_MAX = 10.0

Oracle = Callable[[np.ndarray], tuple[np.ndarray, Any]]


def lemma3_f(gamma: float, d: float) -> float:
    """Lemma 3's ``f(γ)`` at ``d = ‖R(V) − U′‖``.

    >>> round(lemma3_f(0.1, 0.0), 3), round(lemma3_f(0.1, 1.0), 3)
    (0.616, 0.806)
    """
    s = np.sqrt(2 * gamma - gamma ** 2)
    inner = (gamma ** 2 - 2 * gamma) * d ** 2 + 2
    return float(s * np.sqrt(2 - d ** 2 + 2 * d * (1 - gamma) * np.sqrt(inner)))


def lemma4_costs(onehot: np.ndarray, w: np.ndarray, target: np.ndarray, closest: np.ndarray,
                 gamma: float | None) -> np.ndarray:
    """Lemma 4's per-example objective ``b_j = c_j − Q`` with the CORRECTED sign
    ``Q = c̄_V − ‖U − U′‖ f(γ)``; ``closest`` is ``U′``, the hull's point nearest ``target``.
    ``gamma=None`` drops the ``f(γ)`` term (``Q = c̄_V``): the objective is then the child's
    mass times its progress ``⟨R(V1) − R(V), U − U′⟩`` (negated), which the tree uses by default
    (:mod:`.abtree`: Lemma 3's sufficient condition leaves ``h ≡ 0`` as the only feasible
    point on most data)."""
    c = onehot @ (closest - target)
    q = float(w @ c / w.sum())
    if gamma is not None:
        row = w @ onehot / w.sum()
        q -= float(np.linalg.norm(target - closest)) * lemma3_f(
            gamma, float(np.linalg.norm(row - closest)))
    return c - q


def project_l2_orthant(lam: np.ndarray, radius: float) -> np.ndarray:
    """The Euclidean projection onto ``{λ ≥ 0, ‖λ‖₂ ≤ radius}``: clip, then rescale (exact for
    this set: the ball is centred at 0, so rescaling keeps the orthant).

    >>> np.round(project_l2_orthant(np.array([3.0, -1.0, 4.0]), 1.0), 6).tolist()
    [0.6, 0.0, 0.8]
    """
    lam = np.clip(lam, 0.0, None)
    norm = float(np.linalg.norm(lam))
    return lam * (radius / norm) if norm > radius else lam


def paired_regression(Xs: np.ndarray) -> Oracle:
    """Definition 14's cost-sensitive oracle on standardised features ``Xs`` (n × d).

    Given the costs ``LC`` of labelling each example 1 (0 costs 0), the CSC problem is a
    weighted classification with label ``y_j = 1[LC_j < 0]`` and weight ``|LC_j|``: the cost of
    label 1 is ``(1 − y)·|LC|``, of label 0 ``y·|LC|`` (correct → 0, wrong → the weight). Two
    least-squares regressions (with intercept, no penalty) predict those two costs; the split
    is ``h(x) = 1[pred₁(x) < pred₀(x)]``. Returns ``(h on the sample, (coef, intercept))``,
    ``h(x) = 1[x·coef + intercept < 0]`` (the difference of the two linear fits)."""
    design = np.hstack([Xs, np.ones((len(Xs), 1))])
    pinv = np.linalg.pinv(design)  # the same design every round: factor once

    def oracle(cost: np.ndarray) -> tuple[np.ndarray, Any]:
        y = (cost < 0).astype(np.float64)
        weight = np.abs(cost)
        beta = pinv @ np.stack([(1 - y) * weight, y * weight], axis=1)
        diff = beta[:, 0] - beta[:, 1]
        return (design @ diff < 0).astype(np.float64), (diff[:-1], float(diff[-1]))

    return oracle


@dataclass(frozen=True)
class GameResult:
    """Algorithm 3's output: ``h`` (n,) the mixture on the sample, ``params`` the T best
    responses' parameters, ``lam`` the last multipliers (4 × K), ``violation`` the largest
    ratio-constraint violation of the mixture (normalised), ``objective`` ``Σ w̃ h̄ b``."""

    h: np.ndarray
    params: list[Any]
    lam: np.ndarray
    violation: float
    objective: float


def constraint_values(h: np.ndarray, wn: np.ndarray, G: np.ndarray, alpha: float) -> np.ndarray:
    """``g(h)`` (4 × K, each ≤ 0 when met) on normalised weights ``wn``."""
    s1, s0 = float(wn @ h), float(wn @ (1 - h))
    m1, m0 = (wn * h) @ G, (wn * (1 - h)) @ G
    return np.stack([m1 - alpha * s1, -m1 - alpha * s1, m0 - alpha * s0, -m0 - alpha * s0])


def play(oracle: Oracle, onehot: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray,
         alpha: float, *, T: int = DEFAULT_T,
         lambda_max: float = DEFAULT_LAMBDA_MAX) -> GameResult:
    """Algorithm 3's loop with any oracle (``cost -> (h on the sample, params)``)."""
    wn = w / w.sum()
    G = onehot - r
    lam = np.zeros((4, onehot.shape[1]))
    total, params = np.zeros(len(w)), []
    for t in range(1, T + 1):
        coef = (lam[0] - lam[1] - lam[2] + lam[3]) @ G.T
        shift = -alpha * (lam[0] + lam[1]).sum() + alpha * (lam[2] + lam[3]).sum()
        h, p = oracle(wn * (b + coef + shift))          # θ best-responds to λ_{t−1}
        total += h
        params.append(p)
        lam = project_l2_orthant(lam + t ** -0.5 * constraint_values(h, wn, G, alpha),
                                 lambda_max)
    hbar = total / T
    return GameResult(hbar, params, lam,
                      float(max(constraint_values(hbar, wn, G, alpha).max(), 0.0)),
                      float(wn @ (hbar * b)))


@dataclass(frozen=True)
class Split:
    """A randomised linear split: ``h̄(x) = mean_t 1[((x − mean)/scale)·coef_t + icpt_t < 0]``."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray       # T × d
    intercept: np.ndarray  # T

    def __call__(self, X: np.ndarray) -> np.ndarray:
        s = ((X - self.mean) / self.scale) @ self.coef.T + self.intercept
        return (s < 0).mean(1)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k).tolist() for k in ("mean", "scale", "coef", "intercept")}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Split:
        return cls(*(np.asarray(d[k], dtype=np.float64)
                     for k in ("mean", "scale", "coef", "intercept")))


def child_rows(onehot: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The two children's rows ``Pr[z | h = 1, leaf]``, ``Pr[z | h = 0, leaf]`` (2 × K; a child
    of no mass gets a row of zeros)."""
    out = np.zeros((2, onehot.shape[1]))
    for i, wc in enumerate((w * h, w * (1 - h))):
        if wc.sum() > 0:
            out[i] = wc @ onehot / wc.sum()
    return out


def standardise(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale of the columns (a constant column gets scale 1, as StandardScaler)."""
    scale = X.std(0)
    return X.mean(0), np.where(scale > 0, scale, 1.0)


def learn_split(X: np.ndarray, onehot: np.ndarray, w: np.ndarray, r: np.ndarray,
                b: np.ndarray, alpha: float, *, T: int = DEFAULT_T,
                lambda_max: float = DEFAULT_LAMBDA_MAX,
                scaling: tuple[np.ndarray, np.ndarray] | None = None,
                oracle: Oracle | None = None) -> tuple[Split, GameResult]:
    """Algorithm 3 with the paired-regression oracle: the randomised split of a leaf of
    weights ``w`` (n,), for objective coefficients ``b`` (n,) and disclosure level ``alpha``.
    ``scaling``: the (mean, scale) of the features (default: ``X``'s own); ``oracle``: a
    :func:`paired_regression` built on those standardised features, to reuse across leaves
    (its design does not depend on ``w``). Returns the split and the game's record
    (``game.h`` is the mixture on ``X``, equal to ``split(X)``)."""
    mean, scale = scaling if scaling is not None else standardise(X)
    if oracle is None:
        oracle = paired_regression((X - mean) / scale)
    res = play(oracle, onehot, w, r, b, alpha, T=T, lambda_max=lambda_max)
    coef = np.stack([p[0] for p in res.params])
    return Split(mean, scale, coef, np.array([p[1] for p in res.params])), res
