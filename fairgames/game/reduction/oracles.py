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
        return self.fitter.minimize(
            lambda f: ((1 - w1) * self.loss(f, zeros) + w1 * self.loss(f, ones)).mean())


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
        n = c_lam.shape[1]
        sign, weight = pair_labels(c_lam.cpu())
        rows, cols = torch.nonzero(weight > 0, as_tuple=True)   # weightless pairs drop out
        m = rows.numel()
        x = torch.cat([self.fitter.x.detach().cpu().to(torch.float64),
                       torch.ones(c_lam.shape[0], 1, dtype=torch.float64)], 1)
        d = x.shape[1]
        s = sign[rows, cols].numpy()
        zs = threshold_grid(n)[cols].numpy()
        # t_p ≥ α/2 − s_p(⟨β, x̃_i⟩ − z)  ⇔  −s_p⟨β, x̃_i⟩ − t_p ≤ −α/2 − s_p z
        a_ub = sp.hstack([sp.csr_matrix(-s[:, None] * x[rows].numpy()),
                          -sp.identity(m, format="csr")], format="csr")
        b_ub = -0.5 / n - s * zs
        cost = np.r_[np.zeros(d), weight[rows, cols].numpy() / max(m, 1)]
        bounds = [(-1.0, 1.0)] * d + [(0.0, None)] * m
        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"the cs oracle's LP failed: {res.message}")
        beta = torch.as_tensor(res.x[:d])
        return self.fitter.set_linear(beta[:-1], beta[-1])


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
