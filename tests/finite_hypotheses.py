"""A small statistical-parity regression problem over a finite set of linear hypotheses, and a
best response over that set: the instance the reduction tests hold the exponentiated-gradient
loop to (an LP over the set's mixtures is the independent reference).

Example:
    >>> x, y, codes, w, b = finite_problem()
    >>> x.shape, w.shape, bool(((y >= 0) & (y <= 1)).all())
    (torch.Size([240, 2]), torch.Size([12, 2]), True)
"""

from __future__ import annotations

import torch

from fairgames.fair_regression.discretize import predictor_cost


def finite_problem(seed: int = 0, n: int = 240, k: int = 12):
    """Features ``[n, 2]`` shifted by group, targets in [0, 1], group codes and ``k``
    hypotheses ``w [k, 2]``, ``b [k]`` (the first a constant, so the problem is feasible;
    the second the regression itself)."""
    g = torch.Generator().manual_seed(seed)
    codes = (torch.rand(n, generator=g) < 0.4).long()
    x = torch.randn(n, 2, generator=g, dtype=torch.float64) + codes[:, None] * 2.0
    y = (0.25 + 0.3 * x[:, 0] + 0.05 * torch.randn(n, generator=g, dtype=torch.float64))
    y = y.clamp(0, 1)
    w = torch.randn(k, 2, generator=g, dtype=torch.float64) * 0.3
    b = torch.rand(k, generator=g, dtype=torch.float64)
    w[0], b[0] = 0.0, 0.5                     # a constant: the problem is feasible
    w[1], b[1] = torch.tensor([0.3, 0.0], dtype=torch.float64), 0.25   # the regression
    return x, y, codes, w, b


class FiniteOracle:
    """Best_h over the finite set by the Eq. 12 form, argmin_k Ê[g_λ(Y, A, f_k(X))]
    (App. F): ``rank=0`` the exact best response; ``rank=1`` the second best, a heuristic
    that never returns the best (as a surrogate-minimising oracle need not)."""

    def __init__(self, x, w, b, rank: int = 0):
        self.x, self.w, self.b, self.rank = x, w, b, rank
        self.scores = (x @ w.T + b).T                                   # [K, n]

    def module(self, j: int) -> torch.nn.Module:
        m = torch.nn.Linear(2, 1).double()
        with torch.no_grad():
            m.weight.copy_(self.w[j][None]), m.bias.copy_(self.b[j:j + 1])
        return m

    def __call__(self, c_lam: torch.Tensor) -> torch.nn.Module:
        values = torch.stack([predictor_cost(c_lam, s) for s in self.scores])
        return self.module(int(torch.argsort(values, stable=True)[self.rank]))
