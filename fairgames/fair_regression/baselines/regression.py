"""Regression baselines of paper 003 (§6): unconstrained least squares, the paper's bounded
logistic regression, and SEO (Johnson et al. 2016).

* :class:`LeastSquares`: ordinary (optionally weighted) least squares with an intercept.
* :class:`BoundedLogisticRegression`: the linear ``f`` minimising paper 003's logistic loss
  ``log(1 + e^{−C(2y−1)(2f−1)}) / (2 log(1 + e^C))`` (Ex. 2, C = 5). Written as the
  cross-entropy ``y·softplus(−m) + (1 − y)·softplus(m)``, ``m = C(2f − 1)``: the same on
  0/1 labels, and bounded below for targets inside (0, 1), where the printed form is not.
* :class:`SEO`: ``variant="paper"`` is the closed-form least-squares linear model whose
  predictions have zero sample covariance with every group indicator, as the paper describes
  it (the normal equations with the covariance constraints, solved as one KKT system);
  ``variant="code"`` is what the authors' code runs (notes §3.2 / §5 #13): least squares with
  the group's feature columns, whose coefficients are then dropped.

FC (Agarwal et al. 2018 on thresholded labels) is :mod:`.fair_classification`.

Example:
    >>> import torch
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> y = torch.tensor([0.1, 0.5, 0.3, 0.7])
    >>> [round(v, 3) for v in LeastSquares().fit(x, y).predict(x).tolist()]
    [0.1, 0.5, 0.3, 0.7]
    >>> seo = SEO().fit(x, y, torch.tensor([0, 0, 1, 1]))      # x[:, 1] is the group
    >>> [round(v, 3) for v in seo.predict(x).tolist()]
    [0.2, 0.6, 0.2, 0.6]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fairgames.baselines.checks import ArrayLike, BaselineError, as_features, as_groups, as_vector

C_LOGISTIC = 5.0


def _design(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], 1)


def unit_targets(y: ArrayLike, n: int) -> torch.Tensor:
    """``n`` targets as a float64 vector, refused unless in [0, 1] (paper 003's scale; the
    regression baselines and FC's thresholded labels read it).

    Example:
        >>> unit_targets([0.0, 0.5, 1.0], 3).tolist()
        [0.0, 0.5, 1.0]
    """
    t = as_vector(y, "targets", n=n)
    if bool(((t < 0) | (t > 1)).any()):
        raise BaselineError("targets must lie in [0, 1] (paper 003): rescale them first")
    return t


class _Linear:
    coef: torch.Tensor | None = None       # [d + 1], the intercept last

    def predict(self, features: ArrayLike) -> torch.Tensor:
        """``⟨w, x⟩ + b`` ``[N]`` (float64)."""
        if self.coef is None:
            raise BaselineError(f"{type(self).__name__} is not fitted: call fit() first")
        x = as_features(features)
        if x.shape[1] + 1 != len(self.coef):
            raise BaselineError(f"expected {len(self.coef) - 1} features, got {x.shape[1]}")
        return _design(x) @ self.coef

    def module(self) -> nn.Linear:
        """The fitted model as an ``nn.Linear(d, 1)`` (float64)."""
        if self.coef is None:
            raise BaselineError(f"{type(self).__name__} is not fitted: call fit() first")
        m = nn.Linear(len(self.coef) - 1, 1).double()
        with torch.no_grad():
            m.weight.copy_(self.coef[:-1][None]), m.bias.copy_(self.coef[-1:])
        return m


class LeastSquares(_Linear):
    """``argmin Σ_i W_i (y_i − ⟨w, x_i⟩ − b)²`` (minimum-norm on collinear features)."""

    def fit(self, features: ArrayLike, targets: ArrayLike,
            weights: ArrayLike | None = None) -> LeastSquares:
        x = as_features(features)
        y = as_vector(targets, "targets", n=len(x))
        a = _design(x)
        if weights is not None:
            root = as_vector(weights, "weights", n=len(x)).clamp_min(0).sqrt()
            a, y = a * root[:, None], y * root
        self.coef = torch.linalg.lstsq(a, y[:, None], driver="gelsd").solution[:, 0]
        return self


class BoundedLogisticRegression(_Linear):
    """Linear ``f`` under paper 003's logistic loss (C = 5), full-batch L-BFGS (convex)."""

    def __init__(self, max_iter: int = 500) -> None:
        self.max_iter = int(max_iter)

    def fit(self, features: ArrayLike, targets: ArrayLike) -> BoundedLogisticRegression:
        a = _design(as_features(features))
        y = unit_targets(targets, len(a))
        beta = torch.zeros(a.shape[1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([beta], lr=1.0, max_iter=self.max_iter,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-10,
                                tolerance_change=1e-14)

        def closure() -> torch.Tensor:
            opt.zero_grad()
            m = C_LOGISTIC * (2 * (a @ beta) - 1)
            # the normaliser 2 log(1 + e^C) is a constant factor: left out
            value = (y * F.softplus(-m) + (1 - y) * F.softplus(m)).mean()
            value.backward()
            return value

        opt.step(closure)
        self.coef = beta.detach()
        return self


class SEO(_Linear):
    """Least squares with predictions uncorrelated with the group (Johnson et al. 2016).

    Args:
        variant: ``"paper"`` (zero covariance with each group indicator, closed form) or
            ``"code"`` (fit on all features, then drop ``group_columns``' coefficients).
        group_columns: the feature columns that encode the group (``"code"`` only).
    """

    def __init__(self, variant: str = "paper", group_columns: Sequence[int] = ()) -> None:
        if variant not in ("paper", "code"):
            raise BaselineError(f"variant must be 'paper' or 'code', got {variant!r}")
        if variant == "code" and not group_columns:
            raise BaselineError("the 'code' variant drops the group's feature columns: give "
                                "group_columns (their indices)")
        self.variant, self.group_columns = variant, list(group_columns)

    def fit(self, features: ArrayLike, targets: ArrayLike, groups: ArrayLike) -> SEO:
        x = as_features(features)
        y = as_vector(targets, "targets", n=len(x))
        if self.variant == "code":
            coef = LeastSquares().fit(x, y).coef
            assert coef is not None
            coef = coef.clone()
            coef[self.group_columns] = 0.0
            self.coef = coef
            return self
        codes, count = as_groups(groups, len(x))
        a = _design(x)
        onehot = F.one_hot(codes, count).double()
        cov = (onehot - onehot.mean(0)).T @ a                    # [G, d + 1]: cov(Xβ, 1_g)·n
        k = a.shape[1]
        kkt = torch.zeros(k + count, k + count, dtype=torch.float64)
        kkt[:k, :k], kkt[:k, k:], kkt[k:, :k] = a.T @ a, cov.T, cov
        rhs = torch.cat([a.T @ y, torch.zeros(count, dtype=torch.float64)])
        self.coef = torch.linalg.lstsq(kkt, rhs[:, None], driver="gelsd").solution[:k, 0]
        return self
