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
