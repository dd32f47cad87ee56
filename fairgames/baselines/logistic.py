"""Logistic regression, the class-probability model η(x) ≈ P(y = 1 | x) of the plug-in
baselines (PostShift, UncF1, COCO).

Full-batch L-BFGS on the mean logistic loss plus ``l2 / 2 · ‖w‖²`` (no penalty on the bias),
in float64 on the CPU: deterministic, and converged in well under a second on Adult. Optional
example weights ``W`` make the loss ``(1/N) Σ_i W_i ℓ_i`` (the cost-sensitive oracle of the FC
baseline, :mod:`.fair_classification`); with ``l2 = 1 / (C·N)`` this is sklearn's
``LogisticRegression(C=C).fit(x, y, sample_weight=W)`` divided by ``C·N``.

Example:
    >>> import torch
    >>> x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]])
    >>> model = LogisticRegression(l2=0.1).fit(x, torch.tensor([0, 0, 1, 1]))
    >>> [round(p, 2) for p in model.predict_proba(x).tolist()]
    [0.05, 0.19, 0.81, 0.95]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import ArrayLike, BaselineError, as_features, as_labels, as_weights


class LogisticRegression:
    """An L2-regularised logistic regression.

    Args:
        l2: the penalty ``l2 / 2 · ‖w‖²`` on the weights (≥ 0).
        max_iter: L-BFGS iterations.
    """

    def __init__(self, l2: float = 1e-4, max_iter: int = 200) -> None:
        if not l2 >= 0:
            raise BaselineError(f"l2 must be >= 0, got {l2!r}")
        if max_iter < 1:
            raise BaselineError(f"max_iter must be >= 1, got {max_iter!r}")
        self.l2, self.max_iter = float(l2), int(max_iter)
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None

    def fit(self, features: ArrayLike, labels: ArrayLike,
            weights: ArrayLike | None = None) -> LogisticRegression:
        """Fit on features ``[N, D]``, 0/1 labels ``[N]`` and optional non-negative example
        weights ``[N]`` (the loss is ``mean(W_i ℓ_i)``); returns ``self``."""
        x = as_features(features).double()
        y = as_labels(labels, n=len(x))
        w_ex = None if weights is None else as_weights(weights, n=len(x))
        w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
        b = torch.zeros((), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=self.max_iter,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-9,
                                tolerance_change=1e-12)

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = (F.binary_cross_entropy_with_logits(x @ w + b, y, weight=w_ex)
                    + 0.5 * self.l2 * (w @ w))
            loss.backward()
            return loss

        opt.step(closure)
        self.weight, self.bias = w.detach(), b.detach()
        return self

    def decision_function(self, features: ArrayLike) -> torch.Tensor:
        """Logits ``[N]`` (float64)."""
        if self.weight is None or self.bias is None:
            raise BaselineError("LogisticRegression is not fitted; call fit() first")
        x = as_features(features).double()
        if x.shape[1] != len(self.weight):
            raise BaselineError(f"features have {x.shape[1]} columns, the model was fitted on "
                                f"{len(self.weight)}")
        return x @ self.weight + self.bias

    def predict_proba(self, features: ArrayLike) -> torch.Tensor:
        """η(x) = P(y = 1 | x) ``[N]`` (float64)."""
        return torch.sigmoid(self.decision_function(features))
