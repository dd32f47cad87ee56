"""The unconstrained linear SVM and the authors' pseudo-example SVM (``svmc.jl``).

Both minimise LIBLINEAR's L1-loss SVM objective without a bias (the paper's Figure 2:
LIBLINEAR defaults, ``λ = 1/n``, which is ``C = 1`` on the summed hinge):

    ½‖w‖² + C Σ_i s_i max(0, 1 − y_i wᵀx_i),   y_i = ±1, s_i the sample weights.

The authors' baseline (``experimentfairness.jl::fairness_zvrg``) adds one hinge constraint on
the pseudo-example ``x_f = (N_F Σ_M x − N_M Σ_F x)/(N_M + N_F)`` with weight ``1/(1+c)``:
``max(0, 1 + wᵀx_f)/(1 + c) ≤ 1``, i.e. ``wᵀx_f ≤ c`` — the male-minus-female mean score
scaled by ``N_M N_F/(N_M + N_F)``. (Their code negates the labels first, ``y = −y``, and gives
``x_f`` the label +1; in the package's orientation, 1 = the positive class, that is the label
−1 here.) It is solved as theirs (``svmc_bisect``): the Lagrangian puts ``x_f`` in the
training set with weight ``t/(1+c)``, and the multiplier ``t`` is found by root-finding on
``wᵀx_f − c`` (Brent's method here, bisection theirs). LIBLINEAR is reached through
scikit-learn's ``LinearSVC`` (imported when a fit runs).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import brentq

from .model import LinearClassifier, signed_labels


def svm_objective(w: np.ndarray, x: np.ndarray, y: np.ndarray, C: float = 1.0,
                  sample_weight: np.ndarray | None = None) -> float:
    """LIBLINEAR's objective ``½‖w‖² + C Σ s_i max(0, 1 − y_i wᵀx_i)`` (y 0/1).

    Example:
        >>> svm_objective(np.zeros(2), np.ones((3, 2)), np.array([0, 1, 1]))
        3.0
    """
    ys = signed_labels(y)
    s = np.ones(len(ys)) if sample_weight is None else np.asarray(sample_weight, float)
    hinge = np.maximum(0.0, 1.0 - ys * (np.asarray(x, dtype=np.float64) @ w))
    return float(0.5 * w @ w + C * s @ hinge)


def _liblinear(x: np.ndarray, ys: np.ndarray, weights: np.ndarray, C: float, tol: float,
               max_iter: int) -> tuple[np.ndarray, bool]:
    """LIBLINEAR's weights and whether it converged (stopped before ``max_iter`` passes)."""
    from sklearn.svm import LinearSVC  # lazily: the package does not need sklearn to import

    # random_state: LIBLINEAR's coordinate order is shuffled; fixed, a fit is reproducible
    model = LinearSVC(loss="hinge", dual=True, fit_intercept=False, C=C, tol=tol,
                      max_iter=max_iter, random_state=0)
    with warnings.catch_warnings():      # non-convergence is returned, not warned
        warnings.simplefilter("ignore")
        model.fit(x, ys, sample_weight=weights)
    return np.asarray(model.coef_[0], dtype=np.float64), int(model.n_iter_) < max_iter


def svm_fit(x: np.ndarray, y: np.ndarray, *, C: float = 1.0,
            sample_weight: np.ndarray | None = None, tol: float = 1e-6,
            max_iter: int = 100000) -> LinearClassifier:
    """The unconstrained linear SVM without bias, LIBLINEAR's dual coordinate descent.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(100, 2)); y = (x[:, 1] > 0).astype(int)
        >>> float(svm_fit(x, y).w[1]) > 0
        True
    """
    ys = signed_labels(y)
    x = np.asarray(x, dtype=np.float64)
    s = np.ones(len(ys)) if sample_weight is None else np.asarray(sample_weight, float)
    w, converged = _liblinear(x, ys, s, C, tol, max_iter)
    return LinearClassifier(w, 0.0, {"objective": svm_objective(w, x, y, C, s), "C": C,
                                     "converged": converged})


def pseudo_example(x: np.ndarray, mask_m: np.ndarray) -> np.ndarray:
    """``x_f = (N_F Σ_M x − N_M Σ_F x)/(N_M + N_F)`` (``svmc.jl``), M the rows in ``mask_m``.

    Example:
        >>> pseudo_example(np.array([[2.0], [0.0], [1.0]]), np.array([True, False, False]))
        array([1.])
    """
    x = np.asarray(x, dtype=np.float64)
    mask_m = np.asarray(mask_m, dtype=bool)
    n_m, n_f = int(mask_m.sum()), int((~mask_m).sum())
    if n_m == 0 or n_f == 0:
        raise ValueError("the pseudo-example needs rows of both groups (M and F); "
                         f"got {n_m} and {n_f}")
    return (n_f * x[mask_m].sum(axis=0) - n_m * x[~mask_m].sum(axis=0)) / (n_m + n_f)


def pseudo_example_svm_fit(x: np.ndarray, y: np.ndarray, x_f: np.ndarray, c: float, *,
                           C: float = 1.0, tol: float = 1e-6, max_iter: int = 100000,
                           xtol: float = 1e-10, rtol: float = 1e-12) -> LinearClassifier:
    """The SVM s.t. ``max(0, 1 + wᵀx_f)/(1 + c) ≤ 1`` (``⇔ wᵀx_f ≤ c``), ``c ≥ 0``.

    ``tol`` is LIBLINEAR's stopping tolerance (its own default is 0.1), ``xtol``/``rtol``
    Brent's on the multiplier.

    Returns:
        a :class:`LinearClassifier`; ``info``: ``multiplier`` (the pseudo-example's weight
        ``t``), ``constraint`` (``wᵀx_f − c`` at the solution), ``objective``, ``fits``.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(200, 2)); m = x[:, 0] > 0; y = (x.sum(1) > 0).astype(int)
        >>> fit = pseudo_example_svm_fit(x, y, pseudo_example(x, m), c=0.0)
        >>> abs(fit.info["constraint"]) < 1e-4
        True
    """
    if not c >= 0:
        raise ValueError(f"the pseudo-example's hinge bound c must be >= 0, got {c}")
    ys = signed_labels(y)
    x = np.asarray(x, dtype=np.float64)
    x_f = np.asarray(x_f, dtype=np.float64)
    xa = np.concatenate([x, x_f[None, :]])
    ya = np.append(ys, -1.0)
    fits: dict[float, np.ndarray] = {}

    def solve(t: float) -> np.ndarray:
        if t not in fits:
            weights = np.append(np.ones(len(ys)), t / (1.0 + c))
            fits[t] = _liblinear(xa, ya, weights, C, tol, max_iter)[0]
        return fits[t]

    def gap(t: float) -> float:
        return float(solve(t) @ x_f - c)

    t = 0.0
    if gap(0.0) > 0:                       # the constraint binds: find its multiplier
        hi = 1.0
        while gap(hi) > 0:
            hi *= 4.0
        t = brentq(gap, 0.0 if hi == 1.0 else hi / 4.0, hi, xtol=xtol, rtol=rtol)
    w = solve(t)
    info = {"multiplier": t, "constraint": float(w @ x_f - c), "c": c, "fits": len(fits),
            "objective": svm_objective(w, x, y, C)}
    return LinearClassifier(w, 0.0, info)


def pseudo_example_svm_path(x: np.ndarray, y: np.ndarray, x_f: np.ndarray,
                            weights: np.ndarray, *, C: float = 1.0, tol: float = 0.1,
                            max_iter: int = 100000) -> list[LinearClassifier]:
    """The pseudo-example SVM's solutions along its multiplier: one LIBLINEAR fit per weight.

    With the pseudo-example in the training set at weight ``s`` (``s = t/(1+c)`` above), the
    fit is, by the KKT conditions, the solution of the constrained problem whose bound is
    the value it reaches, ``c = wᵀx_f`` (while ``wᵀx_f > −1``: the hinge is active). So a grid
    of weights traces the baseline's frontier with one fit per point instead of a root-finding
    per bound; each ``info`` names the ``c`` it solves.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(200, 2)); m = x[:, 0] > 0; y = (x.sum(1) > 0).astype(int)
        >>> x_f = pseudo_example(x, m)
        >>> path = pseudo_example_svm_path(x, y, x_f, [0.0, 1.0, 10.0], tol=1e-8)
        >>> cs = [fit.info["c"] for fit in path]; cs[0] > cs[1] > cs[2]
        True
    """
    ys = signed_labels(y)
    x = np.asarray(x, dtype=np.float64)
    x_f = np.asarray(x_f, dtype=np.float64)
    # x_f is ~N_M N_F/N times a mean difference: LIBLINEAR's coordinate descent stalls on so
    # long a row. Scaled to a typical row's norm, with its weight scaled up alike, the
    # Lagrangian term s·x_f is the same while the hinge is active (wᵀx_f > −scale).
    scale = max(float(np.linalg.norm(x_f)) / float(np.median(np.linalg.norm(x, axis=1))), 1.0)
    xa, ya = np.concatenate([x, x_f[None, :] / scale]), np.append(ys, -1.0)
    out = []
    for s in weights:
        w, converged = _liblinear(xa, ya, np.append(np.ones(len(ys)), float(s) * scale), C,
                                  tol, max_iter)
        out.append(LinearClassifier(w, 0.0, {"weight": float(s), "c": float(w @ x_f),
                                             "converged": converged,
                                             "objective": svm_objective(w, x, y, C)}))
    return out
