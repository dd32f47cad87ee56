"""Zafar et al.'s disparate-impact baseline (AISTATS 2017), as their ``fair-classification``
code has it (``utils.train_model``, ``loss_funcs._logistic_loss``,
``get_constraint_list_cov``): the summed logistic loss ``Σ log(1 + exp(−y_i wᵀx_i))``
subject to ``|(1/N) Σ_i (z_i − z̄) wᵀx_i| ≤ c`` for the sensitive attribute ``z`` — one
constraint on ``z`` itself when it is 0/1, else one per one-hot column of ``z`` — solved with
scipy's SLSQP from ``x0 ~ U[0, 1)^D`` (theirs), an intercept column prepended (their
``add_intercept``).

Differences, each an equivalent reformulation or an option: the covariance is linear in
``w`` (``a_kᵀw`` with ``a_k = (1/N) Σ (z_ik − z̄_k) x_i``), so ``|a_kᵀw| ≤ c`` is passed as two
linear inequalities with their exact Jacobians (theirs: ``c − |cov|``, not differentiable at
0, with finite-difference gradients); the loss's gradient is passed too; ``l2`` adds
``(l2/2)‖w‖²`` (their ``_logistic_loss_l2_reg``; ``l2 = 1`` is sklearn's ``C = 1`` and the
paper's ``λ = 1/n`` on the mean loss).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from .model import LinearClassifier, signed_labels


def _columns(z: np.ndarray) -> np.ndarray:
    """``z`` as the columns their code constrains: itself if 0/1, else its one-hot."""
    z = np.asarray(z)
    values = np.unique(z)
    if len(values) < 2:
        raise ValueError("the sensitive attribute takes a single value on these rows: "
                         "its covariance is always 0; give rows of both groups")
    if len(values) == 2 and set(values.tolist()) == {0, 1}:
        return z.astype(np.float64)[:, None]
    return (z[:, None] == values[None, :]).astype(np.float64)


def zafar_covariances(w: np.ndarray, x: np.ndarray, z: np.ndarray,
                      intercept: float = 0.0) -> np.ndarray:
    """The empirical covariances ``(1/N) Σ_i (z_ik − z̄_k)(wᵀx_i + b)`` of the decision
    values with each constrained column of ``z`` (their ``test_sensitive_attr_constraint_cov``).

    Example:
        >>> x = np.array([[1.0], [2.0], [3.0], [4.0]]); z = np.array([0, 0, 1, 1])
        >>> zafar_covariances(np.array([1.0]), x, z).tolist()
        [0.5]
    """
    zc = _columns(z)
    d = np.asarray(x, dtype=np.float64) @ w + intercept
    return (zc - zc.mean(axis=0)).T @ d / len(d)


def _loss(w: np.ndarray, x: np.ndarray, ys: np.ndarray, l2: float
          ) -> tuple[float, np.ndarray]:
    m = ys * (x @ w)
    value = -float(np.sum(log_expit(m))) + 0.5 * l2 * float(w @ w)
    grad = -(x.T @ (ys * expit(-m))) + l2 * w
    return value, grad


def zafar_fit(x: np.ndarray, y: np.ndarray, z: np.ndarray, c: float | None, *,
              l2: float = 0.0, intercept: bool = True, seed: int = 0,
              maxiter: int = 100000, tol: float = 1e-10) -> LinearClassifier:
    """Zafar et al.'s covariance-constrained logistic regression (``c=None``: unconstrained).

    Args:
        x: ``[N, D]`` features; y: ``[N]`` 0/1 labels; z: ``[N]`` sensitive attribute codes.
        c: the covariance bound ``≥ 0`` (0: zero covariance), ``None`` for no constraint.
        l2: ``(l2/2)‖w‖²`` added to the summed loss (0 in their default).
        intercept: prepend a constant column (their ``add_intercept``); the bias is
            returned as ``b``.
        seed: seeds the start ``x0 ~ U[0, 1)^D`` (theirs).

    Returns:
        a :class:`LinearClassifier`; ``info`` holds ``success``, ``message``, ``nit``,
        ``covariances`` (train) and ``c``.

    Example:
        >>> rng = np.random.default_rng(1)
        >>> z = rng.integers(0, 2, 300); x = rng.normal(size=(300, 2)) + z[:, None]
        >>> y = (x[:, 0] + rng.normal(size=300) > 0.5).astype(int)
        >>> m = zafar_fit(x, y, z, c=0.0)
        >>> bool(np.abs(m.info["covariances"]).max() < 1e-6)
        True
    """
    if c is not None and not c >= 0:
        raise ValueError(f"the covariance bound c must be >= 0 (or None: unconstrained), "
                         f"got {c}")
    ys = signed_labels(y)
    x = np.asarray(x, dtype=np.float64)
    if intercept:
        x = np.concatenate([np.ones((len(x), 1)), x], axis=1)
    constraints = []
    if c is not None:
        zc = _columns(z)
        a = (zc - zc.mean(axis=0)).T @ x / len(x)      # [K, D]: cov_k = a_k · w
        constraints = [
            {"type": "ineq", "fun": lambda w: c - a @ w, "jac": lambda w: -a},
            {"type": "ineq", "fun": lambda w: c + a @ w, "jac": lambda w: a},
        ]
    x0 = np.random.default_rng(seed).random(x.shape[1])
    res = minimize(_loss, x0, args=(x, ys, l2), jac=True, method="SLSQP",
                   constraints=constraints, options={"maxiter": maxiter, "ftol": tol})
    w, b = (res.x[1:], float(res.x[0])) if intercept else (res.x, 0.0)
    info = {"success": bool(res.success), "message": str(res.message), "nit": int(res.nit),
            "objective": float(res.fun), "c": c,
            "covariances": zafar_covariances(w, x[:, 1:] if intercept else x, z, b).tolist()}
    return LinearClassifier(w, b, info)
