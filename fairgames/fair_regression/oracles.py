"""The best responses of paper 003's reductions as reweighted / relabelled losses (§4.4,
App. D and F.3). SP oracles take the Lagrangian costs ``c_λ`` ``[n, N]`` (Eq. 12) and return
a module; the BGL oracle takes per-example weights ``[n]``.

* :class:`LeastSquaresOracle` (``ls``, a heuristic): least squares to the targets
  ``U_i = argmin_u g_λ(Y_i, A_i, u)``; unweighted as in the paper, or weighted by the range
  of ``g_λ`` over the cells (how much row i stands to lose, notes §5 #8).
* :class:`RiskOracle` (``lr``): two weighted copies of each row with labels 0 and 1 whose
  weights make ``U_i`` the pointwise minimiser of ``W_{i,0} ℓ(0, u) + W_{i,1} ℓ(1, u)``:
  stationarity gives ``W_{i,1} = ∂ℓ(0, U)/(∂ℓ(0, U) − ∂ℓ(1, U))`` (App. F.3). For the paper's
  logistic loss that is ``σ(C(2U − 1))``, not the ``U`` the paper prints (notes §5 #9: the
  printed weight makes the fit miss ``U``; we follow the maths). For the squared loss it is
  ``U`` and the oracle is exactly ``ls``.
* :class:`CostSensitiveOracle` (``cs``): weighted classification of the pairs
  ``(x_i, z)`` with label ``1{C ≤ 0}`` and weight ``|C|``, ``h(x, z) = 1{f(x) ≥ z}``. For a
  linear model, exactly the paper's weighted hinge LP (App. G) solved by HiGHS, with the
  weights and thresholds the printed LP drops restored (notes §5 #10) and an intercept; else
  the same hinge minimised by the inner loop over ``[n, N]`` margins — the ``n·N`` feature
  rows are never built.
* :class:`WeightedLossOracle` (BGL's ``Best_f``): one weighted ERM,
  ``W_i = 1/n + λ_{A_i}/n_{A_i}``.

Example:
    >>> import torch
    >>> x = torch.tensor([[0.0], [1.0]])
    >>> ls = LeastSquaresOracle(Fitter(lambda: torch.nn.Linear(1, 1), x))
    >>> c_lam = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)  # U = 0.25, 1
    >>> [round(v, 4) for v in ls(c_lam)(x).flatten().tolist()]
    [0.25, 1.0]
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import linprog
from torch import nn

from fairgames.rates.losses import SQUARED, Loss
from fairgames.rates.thresholds import threshold_grid

from .discretize import prefix_sums, targets
from .fitting import Fitter


class LeastSquaresOracle:
    """``ls``: (weighted) least squares to the argmin targets ``U_i``."""

    name = "ls"

    def __init__(self, fitter: Fitter, *, weighted: bool = False) -> None:
        self.fitter, self.weighted = fitter, weighted

    def __call__(self, c_lam: torch.Tensor) -> nn.Module:
        weights = None
        if self.weighted:
            g = prefix_sums(c_lam)
            weights = g.amax(1) - g.amin(1)
        return self.fitter.squared(targets(c_lam), weights)


def stationary_weight(loss: Loss, u: torch.Tensor) -> torch.Tensor:
    """``W₁(U)`` with ``(1 − W₁)∂ℓ(0, U) + W₁∂ℓ(1, U) = 0`` (App. F.3, by autograd).

    Example:
        >>> import torch
        >>> from fairgames.rates.losses import BOUNDED_LOGISTIC
        >>> round(float(stationary_weight(BOUNDED_LOGISTIC, torch.tensor([0.6]))[0]), 3)
        0.731
    """
    u = u.detach().to(torch.float64).clone().requires_grad_(True)
    d0, = torch.autograd.grad(loss(u, torch.zeros_like(u)).sum(), u)
    d1, = torch.autograd.grad(loss(u, torch.ones_like(u)).sum(), u)
    if bool(((d0 < 0) | (d1 > 0) | (d0 - d1 <= 0)).any()):
        raise ValueError(f"the lr oracle needs ∂ℓ(0, u) ≥ 0 ≥ ∂ℓ(1, u) on [0, 1] (a convex "
                         f"loss minimised at the labels); {loss.name!r} is not")
    return d0 / (d0 - d1)


class RiskOracle:
    """``lr``: the loss ℓ itself on two weighted copies of each row, labels 0 and 1."""

    name = "lr"

    def __init__(self, fitter: Fitter, loss: Loss) -> None:
        self.fitter, self.loss = fitter, loss

    def __call__(self, c_lam: torch.Tensor) -> nn.Module:
        w1 = stationary_weight(self.loss, targets(c_lam))
        if self.loss.name == SQUARED.name:   # (1 − W)ℓ(0, f) + Wℓ(1, f) = ½(f − W)² + const
            return self.fitter.squared(w1)
        zeros, ones = torch.zeros_like(w1), torch.ones_like(w1)
        return self.fitter.per_row(
            lambda f: (1 - w1) * self.loss(f, zeros) + w1 * self.loss(f, ones))


def pair_labels(c_lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs' signs ``s = +1`` where ``C ≤ 0`` (predict ``f ≥ z``), else −1, and weights
    ``|C|`` ``[n, N]`` (App. F (a))."""
    return torch.where(c_lam <= 0, 1.0, -1.0).to(c_lam.dtype), c_lam.abs()


class CostSensitiveOracle:
    """``cs``: weighted hinge ``Σ_{i,z} |C_{iz}| max(0, α/2 − s_{iz}(f(x_i) − z))``; an exact
    LP for a linear model (``‖w‖∞ ≤ 1``, intercept in [−1, 1], as App. G's box)."""

    name = "cs"

    def __init__(self, fitter: Fitter, *, exact: bool | None = None) -> None:
        self.fitter = fitter
        self.exact = fitter.linear if exact is None else exact
        if self.exact and not fitter.linear:
            raise ValueError("the exact cs oracle solves an LP over linear models; the model "
                             "is not one nn.Linear with one output (use exact=False)")

    def __call__(self, c_lam: torch.Tensor) -> nn.Module:
        if self.exact:
            return self._linear_program(c_lam)
        n = c_lam.shape[1]
        z = threshold_grid(n, dtype=torch.float64, device=c_lam.device)
        sign, weight = pair_labels(c_lam)
        scale = weight.sum().clamp_min(1e-12)
        return self.fitter.minimize(lambda f: (weight * torch.relu(
            0.5 / n - sign * (f[:, None] - z[None, :]))).sum() / scale)

    def _linear_program(self, c_lam: torch.Tensor) -> nn.Module:
        beta, _ = hinge_linear_program(self.fitter.x, c_lam)
        return self.fitter.set_linear(beta[:-1], beta[-1])


def hinge_pieces(sign: np.ndarray, weight: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's hinge sum ``h_i(f) = Σ_z W_{iz} max(0, α/2 − s_{iz}(f − z))`` as a convex
    piecewise-linear function of its prediction ``f`` with kinks on the half grid
    ``b_j = (j + ½)/N``, ``j = 0..N``: a pair with ``s = +1`` (``max(0, z + α/2 − f)``) kinks
    at ``z + α/2``, one with ``s = −1`` at ``z − α/2``, both on that grid (``α = 1/N``).
    Returns per row ``h_i(b_0)``, the slope left of ``b_0``, the ``N`` slopes between the
    kinks (nondecreasing: the function is convex) and the slope right of ``b_N``.

    Example:
        >>> import numpy as np
        >>> at, left, mid, right = hinge_pieces(np.array([[1.0, -1.0]]), np.array([[1.0, 2.0]]))
        >>> at.tolist(), left.tolist(), mid.tolist(), right.tolist()
        ([0.5], [-1.0], [[-1.0, 2.0]], [2.0])
    """
    n_grid = sign.shape[1]
    up = np.where(sign > 0, weight, 0.0)            # kink at z_k + α/2 = b_k
    down = np.where(sign > 0, 0.0, weight)          # kink at z_k − α/2 = b_{k−1}
    kink = np.zeros((sign.shape[0], n_grid + 1))
    kink[:, 1:] += up
    kink[:, :-1] += down
    left = -up.sum(1)
    mid = left[:, None] + np.cumsum(kink, 1)[:, :-1]
    # at b_0 = α/2 only the s = +1 pairs are active, each at z_k + α/2 − b_0 = z_k
    at = up @ (np.arange(1, n_grid + 1) / n_grid)
    return at, left, mid, down.sum(1)


def hinge_linear_program(x: torch.Tensor, c_lam: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The CS oracle's LP (App. G, weights and thresholds restored, notes §5 #10): over
    ``β = (w, b) ∈ [−1, 1]^{d+1}`` minimise ``(1/m) Σ_{i,z} |C_{iz}| max(0, α/2 −
    s_{iz}(⟨w, x_i⟩ + b − z))`` (``m`` pairs of nonzero weight). Returns ``(β [d + 1],
    optimum)``.

    Written per row rather than per pair: ``f_i = ⟨β, x̃_i⟩ = b_0 − e_i + Σ_j δ_{ij} + r_i``
    with ``δ_{ij} ∈ [0, 1/N]`` on the segments of :func:`hinge_pieces` and ``e_i, r_i ≥ 0``
    beyond them, each priced at its slope. As the slopes increase, an optimal solution fills
    the segments in order, so the cost is ``h_i(f_i) − h_i(b_0)``: the same optimum and
    optimal β as one slack row per pair, with ``n`` rows of ``d + N + 3`` nonzeros instead of
    ``n·N`` rows of ``d + 2``. The costs are scaled to a largest of 1 before HiGHS sees them
    (its dual tolerance is absolute, and ``|C|/m`` is ~1e-6).

    Example:
        >>> import torch
        >>> x = torch.tensor([[0.0], [1.0]])
        >>> c_lam = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
        >>> beta, value = hinge_linear_program(x, c_lam)
        >>> [round(v, 6) for v in beta.tolist()], round(value, 6)   # f = 0.25, 1.25
        ([1.0, 0.25], 0.0)
    """
    n_rows, n_grid = c_lam.shape
    sign, weight = (t.numpy() for t in pair_labels(c_lam.detach().cpu().to(torch.float64)))
    at, left, mid, right = hinge_pieces(sign, weight)
    xt = np.c_[x.detach().cpu().to(torch.float64).numpy(), np.ones(n_rows)]
    d = xt.shape[1]
    eye = sp.identity(n_rows, format="csr")
    segments = sp.csr_matrix((np.ones(n_rows * n_grid), (np.repeat(np.arange(n_rows), n_grid),
                                                         np.arange(n_rows * n_grid))))
    # columns [β | e | δ | r]: ⟨β, x̃_i⟩ + e_i − Σ_j δ_ij − r_i = b_0
    a_eq = sp.hstack([sp.csr_matrix(xt), eye, -segments, -eye], format="csr")
    cost = np.r_[np.zeros(d), -left, mid.ravel(), right]
    scale = float(np.abs(cost).max()) or 1.0
    upper = np.r_[np.ones(d), np.full(n_rows, np.inf), np.full(n_rows * n_grid, 1.0 / n_grid),
                  np.full(n_rows, np.inf)]
    lower = np.r_[-np.ones(d), np.zeros(n_rows * (n_grid + 2))]
    res = linprog(cost / scale, A_eq=a_eq, b_eq=np.full(n_rows, 0.5 / n_grid),
                  bounds=np.c_[lower, upper], method="highs")
    if res.status != 0:
        raise RuntimeError(f"the cs oracle's LP failed: {res.message}")
    pairs = max(int((weight > 0).sum()), 1)
    return torch.as_tensor(res.x[:d]), float(res.fun * scale + at.sum()) / pairs


class WeightedLossOracle:
    """BGL's ``Best_f(λ)``: ``argmin_f Σ_i W_i ℓ(Y_i, f(X_i))`` for given weights ``W``."""

    name = "erm"

    def __init__(self, fitter: Fitter, y: torch.Tensor, loss: Loss) -> None:
        self.fitter, self.y, self.loss = fitter, y, loss

    def __call__(self, weights: torch.Tensor) -> nn.Module:
        if self.loss.name == SQUARED.name:
            return self.fitter.squared(self.y, weights)
        return self.fitter.minimize(
            lambda f: (weights * self.loss(f, self.y)).sum() / weights.sum())
