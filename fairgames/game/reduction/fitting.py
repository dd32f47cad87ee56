"""Weighted empirical-risk minimisation over a model class, the work inside every best
response of the reductions: closed-form (weighted) least squares when the model is one
``nn.Linear`` with one output, else a warm-started full-batch L-BFGS inner loop on any
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

import torch
from torch import nn

from fairgames.game.stochastic import as_scores


def is_linear(model: nn.Module) -> bool:
    """One ``nn.Linear`` with a single output (and a bias): the closed-form class."""
    return (isinstance(model, nn.Linear) and model.out_features == 1
            and model.bias is not None)


def outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's predictions ``[n]`` (``[n, 1]`` outputs are flattened)."""
    return as_scores(model(x))


def linear_least_squares(x: torch.Tensor, targets: torch.Tensor,
                         weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``argmin_{w, b} Σ_i W_i (U_i − ⟨w, x_i⟩ − b)²`` in float64 (``torch.linalg.lstsq`` on
    the features with an intercept column; minimum-norm on rank-deficient features, as
    one-hot columns with an intercept are). Returns ``(w [d], b)``.

    Example:
        >>> import torch
        >>> w, b = linear_least_squares(torch.tensor([[0.0], [1.0]]), torch.tensor([1.0, 3.0]))
        >>> round(float(w[0]), 6), round(float(b), 6)
        (2.0, 1.0)
    """
    a = torch.cat([x.to(torch.float64), torch.ones(x.shape[0], 1, dtype=torch.float64,
                                                     device=x.device)], 1)
    u = targets.to(torch.float64)
    if weights is not None:
        root = weights.to(torch.float64).clamp_min(0).sqrt()
        a, u = a * root[:, None], u * root
    # gelsd: SVD-based, minimum-norm and deterministic where gelsy's pivoting is not needed
    driver = "gelsd" if a.device.type == "cpu" else None
    sol = torch.linalg.lstsq(a, u[:, None], driver=driver).solution[:, 0]
    return sol[:-1], sol[-1]


class Fitter:
    """Weighted ERM over the class of ``model_factory``'s modules on the features ``x``.

    Every call returns a new module (the iterate); the inner loop warm-starts from the last
    solution. ``steps`` bounds the L-BFGS iterations of one call.
    """

    def __init__(self, model_factory: Callable[[], nn.Module], x: torch.Tensor, *,
                 steps: int = 100) -> None:
        self.x = x
        self.model = model_factory()
        self.linear = is_linear(self.model)
        self.steps = int(steps)

    def set_linear(self, coef: torch.Tensor, intercept: torch.Tensor) -> nn.Module:
        """Set the linear model to ``(coef [d], intercept)``; returns a copy (the iterate)."""
        with torch.no_grad():
            self.model.weight.copy_(coef.reshape(self.model.weight.shape))
            self.model.bias.copy_(intercept.reshape(self.model.bias.shape))
        return copy.deepcopy(self.model)

    def squared(self, targets: torch.Tensor, weights: torch.Tensor | None = None) -> nn.Module:
        """``argmin_f Σ_i W_i (U_i − f(x_i))²`` (closed form for a linear model)."""
        if not self.linear:
            w = torch.ones_like(targets) if weights is None else weights
            return self.minimize(lambda f: (w * (targets - f) ** 2).sum() / w.sum())
        return self.set_linear(*linear_least_squares(self.x, targets, weights))

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
