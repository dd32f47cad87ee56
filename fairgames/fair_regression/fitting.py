"""Weighted empirical-risk minimisation over a model class, the work inside every best
response of the reductions: closed-form (weighted) least squares when the model is one
``nn.Linear`` with one output, a warm-started damped Newton method for other smooth convex
per-row losses on that model, else a warm-started full-batch L-BFGS inner loop on any
``nn.Module``.

Example:
    >>> import torch
    >>> x = torch.tensor([[0.0], [1.0], [2.0]])
    >>> fit = Fitter(lambda: torch.nn.Linear(1, 1), x)
    >>> m = fit.squared(torch.tensor([0.1, 0.3, 0.5], dtype=torch.float64))
    >>> [round(v, 4) for v in m(x).flatten().tolist()]
    [0.1, 0.3, 0.5]
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import scipy.sparse as sps
import torch
from torch import nn

from fairgames.game.solutions.stochastic import as_scores


def affine_layer(model: nn.Module) -> nn.Linear | None:
    """The ``nn.Linear`` (one output, with a bias) that IS the model, else ``None``: the
    closed-form class. Either the layer itself, or a module whose only child is that layer
    and whose ``output`` is the raw ``"score"`` (``fairgames.models.LinearModel``).

    Example:
        >>> affine_layer(torch.nn.Linear(3, 1)) is not None, affine_layer(torch.nn.Linear(3, 2))
        (True, None)
    """
    layer: object = model
    if not isinstance(model, nn.Linear):
        children = list(model.children())
        if len(children) != 1 or getattr(model, "output", None) != "score":
            return None
        layer = children[0]
    if isinstance(layer, nn.Linear) and layer.out_features == 1 and layer.bias is not None:
        return layer
    return None


def is_linear(model: nn.Module) -> bool:
    """A model of the closed-form class (:func:`affine_layer`)."""
    return affine_layer(model) is not None


def outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's predictions ``[n]`` (``[n, 1]`` outputs are flattened)."""
    return as_scores(model(x))


def linear_least_squares(x: torch.Tensor, targets: torch.Tensor,
                         weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``argmin_{w, b} Σ_i W_i (U_i − ⟨w, x_i⟩ − b)²`` in float64 (``torch.linalg.lstsq`` on
    the features with an intercept column; on rank-deficient features, as one-hot columns
    with an intercept are, one of the solutions: the fitted values are unique). Returns
    ``(w [d], b)``.

    Example:
        >>> import torch
        >>> w, b = linear_least_squares(torch.tensor([[0.0], [1.0]]), torch.tensor([1.0, 3.0]))
        >>> round(float(w[0]), 6), round(float(b), 6)
        (2.0, 1.0)
    """
    a = with_intercept(x)
    u = targets.to(torch.float64)
    if weights is not None:
        root = weights.to(torch.float64).clamp_min(0).sqrt()
        a, u = a * root[:, None], u * root
    # gelsy (pivoted QR): ~10x faster than the SVD-based gelsd here; on rank-deficient
    # features (one-hot columns with an intercept) it picks another coefficient vector than
    # the minimum-norm one, with the same fitted values — and the values are all a best
    # response is used for.
    driver = "gelsy" if a.device.type == "cpu" else None
    sol = torch.linalg.lstsq(a, u[:, None], driver=driver).solution[:, 0]
    return sol[:-1], sol[-1]


def with_intercept(x: torch.Tensor) -> torch.Tensor:
    """``[x, 1]`` in float64: the design matrix of a linear model with an intercept."""
    return torch.cat([x.to(torch.float64), torch.ones(x.shape[0], 1, dtype=torch.float64,
                                                      device=x.device)], 1)


class Fitter:
    """Weighted ERM over the class of ``model_factory``'s modules on the features ``x``.

    Every call returns a new module (the iterate); the inner loop warm-starts from the last
    solution. ``steps`` bounds the L-BFGS iterations of one call.
    """

    def __init__(self, model_factory: Callable[[], nn.Module], x: torch.Tensor, *,
                 steps: int = 100) -> None:
        self.x = x
        self.model = model_factory()
        self.layer = affine_layer(self.model)      # None: no closed form
        self.linear = self.layer is not None
        self.steps = int(steps)
        self._pinv: torch.Tensor | None = None
        self._design: Design | None = None

    def set_linear(self, coef: torch.Tensor, intercept: torch.Tensor) -> nn.Module:
        """Set the linear model to ``(coef [d], intercept)``; returns a copy (the iterate)."""
        layer = self.layer
        assert layer is not None
        with torch.no_grad():
            layer.weight.copy_(coef.reshape(layer.weight.shape))
            layer.bias.copy_(intercept.reshape(layer.bias.shape))
        return copy.deepcopy(self.model)

    def squared(self, targets: torch.Tensor, weights: torch.Tensor | None = None) -> nn.Module:
        """``argmin_f Σ_i W_i (U_i − f(x_i))²`` (closed form for a linear model)."""
        if not self.linear:
            w = torch.ones_like(targets) if weights is None else weights
            return self.minimize(lambda f: (w * (targets - f) ** 2).sum() / w.sum())
        if weights is None:
            # Unweighted fits (the LS oracle, every round) share the design matrix: its
            # pseudo-inverse is computed once (the minimum-norm solution).
            if self._pinv is None:
                self._pinv = torch.linalg.pinv(with_intercept(self.x))
            sol = self._pinv @ targets.to(self._pinv)
            return self.set_linear(sol[:-1], sol[-1])
        return self.set_linear(*linear_least_squares(self.x, targets, weights))

    def per_row(self, loss: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
        """``argmin_f (1/n) Σ_i φ_i(f(x_i))`` for a separable loss (``loss`` maps the
        predictions ``[n]`` to the ``[n]`` values ``φ_i(f_i)``, each ``φ_i`` convex and twice
        differentiable): damped Newton for a linear model (:func:`newton`), else L-BFGS.

        Example:
            >>> import torch
            >>> fit = Fitter(lambda: torch.nn.Linear(1, 1).double(), torch.tensor([[0.0], [1.0]]))
            >>> m = fit.per_row(lambda f: (f - torch.tensor([0.2, 0.6])) ** 4)
            >>> [round(v, 2) for v in outputs(m, fit.x.double()).tolist()]
            [0.2, 0.6]
        """
        if not self.linear:
            return self.minimize(lambda f: loss(f).mean())
        layer = self.layer
        assert layer is not None
        start = torch.cat([layer.weight.detach().reshape(-1), layer.bias.detach()])
        if self._design is None:
            self._design = Design(with_intercept(self.x.detach()))
        beta = newton(self._design, loss, start.to(self._design.a), steps=self.steps)
        if beta is None:                                  # not a descent direction: not convex
            return self.minimize(lambda f: loss(f).mean())
        return self.set_linear(beta[:-1], beta[-1])

    def minimize(self, objective: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
        """``argmin_f objective(f(x))`` by full-batch L-BFGS, warm-started."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=self.steps,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-9,
                                tolerance_change=1e-12)

        def closure() -> torch.Tensor:
            opt.zero_grad()
            value = objective(outputs(self.model, self.x).to(torch.float64))
            value.backward()
            return value

        self.model.train()
        opt.step(closure)
        return copy.deepcopy(self.model)


def _derivatives(loss: Callable[[torch.Tensor], torch.Tensor], f: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mean φ, φ' [n], φ'' [n])`` at ``f`` by autograd (φ_i depends on f_i alone, so the
    gradient of the sum is φ' and that of Σφ' is φ'')."""
    f = f.detach().requires_grad_(True)
    with torch.enable_grad():
        values = loss(f)
        d1, = torch.autograd.grad(values.sum(), f, create_graph=True)
        d2, = torch.autograd.grad(d1.sum(), f)
    return values.detach().mean(), d1.detach(), d2.detach()


# The most row-pair products a Design keeps for its Gram (12 bytes each): ~0.2 GB. Adult's
# one-hot design (13 nonzeros a row) needs 2M for 22 612 rows.
PAIR_BUDGET = 20_000_000


class Design:
    """A design matrix ``a [n, d]`` (float64) for the products of Newton's method: on CPU,
    when at most half its entries are nonzero (one-hot columns), through a scipy CSR copy, so
    that ``aᵀ diag(w) a`` costs ``Σ_i nnz_i²`` rather than ``n·d²``; with the rows' pair
    products kept (:func:`pair_products`, within :data:`PAIR_BUDGET`) that Gram is one
    sparse matrix–vector product.

    Example:
        >>> import torch
        >>> a = Design(torch.tensor([[1.0, 0.0], [1.0, 2.0]], dtype=torch.float64))
        >>> a.gram(torch.tensor([1.0, 0.5], dtype=torch.float64)).tolist()
        [[1.5, 1.0], [1.0, 2.0]]
    """

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a
        sparse = a.device.type == "cpu" and float((a != 0).to(torch.float64).mean()) <= 0.5
        self.csr = sps.csr_matrix(a.numpy()) if sparse else None
        self.pairs = pair_products(self.csr) if self.csr is not None else None

    def __matmul__(self, beta: torch.Tensor) -> torch.Tensor:
        if self.csr is None:
            return self.a @ beta
        return torch.from_numpy(self.csr @ beta.numpy())

    def rmatvec(self, v: torch.Tensor) -> torch.Tensor:
        """``aᵀ v``."""
        if self.csr is None:
            return self.a.T @ v
        return torch.from_numpy(self.csr.T @ v.numpy())

    def gram(self, w: torch.Tensor) -> torch.Tensor:
        """``aᵀ diag(w) a``."""
        if self.csr is None:
            return (self.a * w[:, None]).T @ self.a
        if self.pairs is None:
            return torch.from_numpy((self.csr.T @ self.csr.multiply(w.numpy()[:, None]))
                                    .toarray())
        products, first, second = self.pairs
        upper = np.zeros((self.csr.shape[1],) * 2)
        upper[first, second] = products @ w.numpy()
        return torch.from_numpy(upper + np.triu(upper, 1).T)


def pair_products(csr: sps.csr_matrix, budget: int = PAIR_BUDGET
                  ) -> tuple[sps.csr_matrix, np.ndarray, np.ndarray] | None:
    """The Gram ``aᵀ diag(w) a`` as a linear map of ``w``: a CSR matrix ``P`` whose row for
    the column pair ``(j, k)``, ``j ≤ k``, holds ``a_ij a_ik`` over the rows ``i`` where
    both are nonzero, and the pairs' ``j`` and ``k``, so that ``G[j, k] = (P w)`` there.
    Its size is the sparse product's work, ``Σ_i nnz_i(nnz_i + 1)/2``; ``None`` above
    ``budget`` entries. Built once, it saves every Gram the sparse product's symbolic pass,
    allocation and format conversions (4.7× per Gram on Adult's design).

    Example:
        >>> import scipy.sparse as sps
        >>> p, j, k = pair_products(sps.csr_matrix([[1.0, 0.0], [1.0, 2.0]]))
        >>> (p @ [1.0, 0.5]).tolist(), j.tolist(), k.tolist()
        ([1.5, 1.0, 2.0], [0, 0, 1], [0, 1, 1])
    """
    csr = csr.copy()
    csr.sum_duplicates()                       # canonical: sorted, unique columns per row
    n, d = csr.shape
    counts = np.diff(csr.indptr)
    entry_row = np.repeat(np.arange(n), counts)
    partners = np.repeat(csr.indptr[1:], counts) - np.arange(csr.nnz)   # entries e' ≥ e
    total = int(partners.sum())
    if total > budget:
        return None
    first = np.repeat(np.arange(csr.nnz), partners)
    second = first + np.arange(total) - np.repeat(np.cumsum(partners) - partners, partners)
    pair = csr.indices[first].astype(np.int64) * d + csr.indices[second]
    pairs, code = np.unique(pair, return_inverse=True)
    products = sps.csr_matrix((csr.data[first] * csr.data[second], (code, entry_row[first])),
                              shape=(len(pairs), n))
    return products, pairs // d, pairs % d


# Armijo's sufficient decrease is undecidable once the predicted decrease ``t·|slope|`` is
# below this many ulps of the objective: the comparison of two float64 means is then rounding.
RESOLUTION_ULPS = 4.0


def _backtrack(loss: Callable[[torch.Tensor], torch.Tensor], a: Design, beta: torch.Tensor,
               step: torch.Tensor, value: float, slope: float, grad_max: float
               ) -> tuple[float, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None:
    """The Armijo step ``t`` along ``step`` (halving from 1) and the derivatives there, while
    the predicted decrease is above the objective's float64 resolution; past it the objective
    cannot rank two points, so the full step is taken if it shrinks the gradient's largest
    entry (Newton's own convergence) and otherwise the search stops: ``None``, the optimum in
    float64. (Halving on below the resolution cost up to 40 wasted loss evaluations a call.)"""
    floor = RESOLUTION_ULPS * float(np.finfo(np.float64).eps) * abs(value)
    t = 1.0
    while t * -slope > floor and t >= 1e-12:
        found = _derivatives(loss, a @ (beta + t * step))
        if float(found[0]) <= value + 1e-4 * t * slope:
            return t, found
        t /= 2
    if t < 1.0:
        return None
    found = _derivatives(loss, a @ (beta + step))
    shrinks = float((a.rmatvec(found[1]) / a.a.shape[0]).abs().max()) < grad_max
    return (1.0, found) if shrinks else None


def newton(a: torch.Tensor | Design, loss: Callable[[torch.Tensor], torch.Tensor],
           beta: torch.Tensor, *, steps: int = 100, tolerance: float = 1e-10
           ) -> torch.Tensor | None:
    """``argmin_β (1/n) Σ_i φ_i(⟨β, a_i⟩)`` by damped Newton with a backtracking (Armijo)
    line search from ``beta``, in float64, until the gradient's largest entry is at most
    ``tolerance`` or ``steps`` iterations. The step solves ``(H + μI) s = −g`` with ``μ`` a
    multiple of ``‖g‖`` (Levenberg–Marquardt: far from the optimum, where the logistic
    curvature vanishes, plain Newton steps are huge; ``μ → 0`` at the optimum, where the
    convergence is Newton's); ``g`` lies in the row space of ``a``, so on rank-deficient
    designs (one-hot columns with an intercept) the step has no part in the null space.
    ``None`` if a step is not a descent direction (a φ that is not convex).

    Example:
        >>> import torch
        >>> a = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
        >>> y = torch.tensor([0.25, 0.75], dtype=torch.float64)     # soft labels
        >>> bce = lambda f: torch.nn.functional.softplus(f) - y * f
        >>> beta = newton(a, bce, torch.zeros(2, dtype=torch.float64))
        >>> [round(v, 6) for v in torch.sigmoid(a @ beta).tolist()]
        [0.25, 0.75]
    """
    a = a if isinstance(a, Design) else Design(a)
    n = a.a.shape[0]
    value, d1, d2 = _derivatives(loss, a @ beta)
    ratio = 1.0
    for _ in range(steps):
        grad = a.rmatvec(d1) / n
        grad_max = float(grad.abs().max())
        if grad_max <= tolerance:
            break
        damped = a.gram(d2) / n + ratio * float(grad.norm()) * torch.eye(len(grad),
                                                                       dtype=grad.dtype)
        step = -torch.linalg.solve(damped, grad)
        slope = float(grad @ step)
        if not slope < 0:
            return None
        found = _backtrack(loss, a, beta, step, float(value), slope, grad_max)
        if found is None:
            break
        t, (value, d1, d2) = found
        beta = beta + t * step
        # a full step: trust the quadratic model more; a shortened one: less
        ratio = ratio / 10 if t == 1.0 else ratio * 10
    return beta
