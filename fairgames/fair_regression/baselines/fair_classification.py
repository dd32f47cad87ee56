"""FC, paper 003's fair-classification baseline (§6): Agarwal, Beygelzimer, Dudík, Langford &
Wallach (ICML 2018), "A Reductions Approach to Fair Classification", under demographic parity,
on the targets thresholded at ``threshold``, with a linear logistic-regression oracle. Paper 003
evaluates FC's real-valued scores ``p = σ(⟨w, x⟩ + b)`` (SP at every threshold, the KS
disparity), not its 0/1 decisions.

The mode is the one the paper's code ran (notes §3.2 "FC in code", §5 #13): a grid search over
Lagrange multipliers, one deterministic logistic model per grid point (2018 paper §3.4), not the
randomised exponentiated-gradient mixture.

**The cost-sensitive problem of one λ** (2018 paper §3.2, Example 3). DP compares each group's
selection rate with the overall one, ``γ_g(h) = P[h = 1 | A = g] − P[h = 1]``, and the
Lagrangian ``err(h) + Σ_g λ_g γ_g(h)`` (``λ_g = λ⁺_g − λ⁻_g``, fairlearn's "+" / "−" rows)
is, per example, the cost of predicting 0 and of predicting 1 (the common ``1/n`` left out, as
in fairlearn and the paper's code):

    C⁰_i = 1{y_i = 1},     C¹_i = 1{y_i = 0} + λ_{A_i} / p_{A_i} − Σ_g λ_g,

``p_g = P̂[A = g]``. Its minimiser over ``h`` is the weighted classification with label
``1{C⁰_i > C¹_i}`` and weight ``|C⁰_i − C¹_i|``, here a weighted logistic regression.

**The grid.** ``lambdas`` is either

* a vector of scalars λ (two groups only; the paper's code, ``grid_class.py``): λ multiplies
  the gap ``P[h = 1 | A = 1] − P[h = 1 | A = 0]``, so ``C¹_i = 1{y_i = 0} + λ(1{A_i = 1}/p_1
  − 1{A_i = 0}/p_0)``. It is the per-group vector ``(0, λ / p_0)`` (since
  ``P[h|1] − P[h] = p_0 (P[h|1] − P[h|0])``), i.e. fairlearn's
  ``GridSearch`` column with ``λ⁺ = max(λ, 0) / p_0`` and ``λ⁻ = max(−λ, 0) / p_0`` on group
  1's rows and 0 elsewhere; the positive λ push group 1's selection rate down; or
* a matrix ``[L, G]`` of per-group multipliers ``λ_g`` on ``γ_g``, any number of groups ≥ 2:
  fairlearn's column with ``λ⁺_g = max(λ_g, 0)``, ``λ⁻_g = max(−λ_g, 0)``. (A scalar cannot
  weigh G > 2 groups' gaps, so that case needs the matrix.)

**C.** The oracle is sklearn's ``LogisticRegression(C)`` with an intercept, i.e.
``½‖w‖² + C Σ_i W_i ℓ_i`` (bias not penalised). The default C = 10 is the paper code's FC
learner (``LRLearner(C=10)`` in ``grid_class.py``, which is also its unconstrained logistic
baseline's C); C = 10000 is its LR oracle *inside the reduction*, where the ridge should not
bias the best response. The code fits without an intercept (on features that hold the group);
an intercept is kept here, as in fairlearn's reference fit and the other baselines, so that the
fit does not depend on the features holding a constant column.

A relabelled problem with one class gets the constant model of that class (scores exactly 0 or
1), as fairlearn's ``GridSearch`` does with its ``DummyClassifier``. (The shifts
``λ_a / p_a − Σ_g λ_g`` average to 0 over the groups, so this needs a group whose targets are
all one class, and a large λ.)

Example:
    >>> import torch
    >>> gen = torch.Generator().manual_seed(0)
    >>> g = torch.arange(400) % 2
    >>> z = torch.randn(400, generator=gen)
    >>> x = torch.stack([z, g.double()], 1)                     # the group is a feature
    >>> y = torch.rand(400, generator=gen) < torch.sigmoid(2 * z + 3 * g - 1.5)
    >>> fc = FairClassification([-0.25, 0.0, 0.25, 0.5]).fit(x, y, g)
    >>> rates = (fc.predict_proba(x) >= 0.5).double()           # [4, 400]
    >>> [round(float(r[g == 1].mean() - r[g == 0].mean()), 2) for r in rates]
    [0.76, 0.49, 0.07, -0.99]
"""

from __future__ import annotations

import numpy as np
import torch

from fairgames.baselines.checks import ArrayLike, BaselineError, as_features, as_groups
from fairgames.baselines.logistic import LogisticRegression

from .regression import unit_targets

DEFAULT_LAMBDAS = (-0.5, -0.25, 0.0, 0.25, 0.5)
"""The paper code's FC grid, ``np.linspace(-0.5, 0.5, 5)`` (``grid_class.py``)."""


def group_multipliers(lambdas: torch.Tensor, shares: torch.Tensor) -> torch.Tensor:
    """Per-group multipliers ``[L, G]`` on ``γ_g = P[h=1|A=g] − P[h=1]`` from ``lambdas``
    (scalars ``[L]``, two groups: the code's gap λ becomes ``(0, λ / p_0)``; or ``[L, G]`` as
    is), given the group shares ``p`` ``[G]``.

    Example:
        >>> group_multipliers(torch.tensor([0.5]), torch.tensor([0.25, 0.75])).tolist()
        [[0.0, 2.0]]
    """
    count = len(shares)
    if lambdas.dim() == 1:
        if count != 2:
            raise BaselineError(f"a scalar λ grid weighs the gap between two groups; with "
                                f"{count} groups give lambdas as an [L, {count}] matrix of "
                                f"per-group multipliers")
        return torch.stack([torch.zeros_like(lambdas), lambdas / shares[0]], 1)
    if lambdas.shape[1] != count:
        raise BaselineError(f"lambdas has {lambdas.shape[1]} columns but the data has {count} "
                            f"groups: give one multiplier per group")
    return lambdas


def relabel(labels: torch.Tensor, codes: torch.Tensor, multipliers: torch.Tensor,
            shares: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The weighted classification of one λ (2018 paper §3.2): labels ``1{C⁰ > C¹}`` and
    weights ``|C⁰ − C¹|`` ``[n]``, for 0/1 ``labels``, group ``codes``, per-group
    ``multipliers`` ``[G]`` and group shares ``[G]``.

    Example:
        >>> y, w = relabel(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]),
        ...                torch.tensor([0.0, 0.2]), torch.tensor([0.5, 0.5]))
        >>> y.tolist(), [round(v, 2) for v in w.tolist()]
        ([1.0, 0.0], [1.2, 1.2])
    """
    c0 = labels
    c1 = (1 - labels) + multipliers[codes] / shares[codes] - multipliers.sum()
    return (c0 > c1).double(), (c0 - c1).abs()


def _grid(lambdas: ArrayLike) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(lambdas, dtype=np.float64)
                        if not isinstance(lambdas, torch.Tensor) else lambdas).double()
    if t.dim() not in (1, 2) or t.shape[0] == 0 or t.numel() == 0:
        raise BaselineError(f"lambdas must be a non-empty vector [L] or matrix [L, G], got "
                            f"shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise BaselineError("lambdas have NaN/inf values")
    return t


def _constant(label: float, dim: int) -> LogisticRegression:
    """The one-class problem's model: scores exactly ``label`` (σ(±∞))."""
    model = LogisticRegression()
    model.weight = torch.zeros(dim, dtype=torch.float64)
    model.bias = torch.tensor(float("inf") if label == 1 else float("-inf"), dtype=torch.float64)
    return model


class FairClassification:
    """FC: one weighted logistic regression per grid multiplier (see the module docstring).

    Args:
        lambdas: the grid, scalars ``[L]`` (two groups) or per-group multipliers ``[L, G]``.
        threshold: targets ``y ≥ threshold`` are the positive class (a 0/1 target is as is).
        C: sklearn's inverse ridge strength of the logistic oracle.
        max_iter: L-BFGS iterations per model.
    """

    def __init__(self, lambdas: ArrayLike = DEFAULT_LAMBDAS, *, threshold: float = 0.5,
                 C: float = 10.0, max_iter: int = 500) -> None:
        if not 0 < threshold <= 1:
            raise BaselineError(f"threshold must lie in (0, 1] (targets are in [0, 1]), got "
                                f"{threshold!r}")
        if not C > 0:
            raise BaselineError(f"C must be > 0, got {C!r}")
        self.lambdas = _grid(lambdas)
        self.threshold, self.C, self.max_iter = float(threshold), float(C), int(max_iter)
        self.models: list[LogisticRegression] = []
        self.multipliers: torch.Tensor | None = None

    def fit(self, features: ArrayLike, targets: ArrayLike,
            groups: ArrayLike) -> FairClassification:
        """Fit one model per grid point on features ``[n, d]``, targets in [0, 1] ``[n]`` and
        group codes ``[n]`` (≥ 2 groups); returns ``self``."""
        x = as_features(features)
        labels = (unit_targets(targets, len(x)) >= self.threshold).double()
        if bool((labels == labels[0]).all()):
            raise BaselineError(f"every target is {'≥' if labels[0] else '<'} the threshold "
                                f"{self.threshold}: fair classification needs both classes "
                                f"(move the threshold)")
        codes, count = as_groups(groups, len(x))
        if count < 2:
            raise BaselineError("demographic parity needs at least two groups; the group codes "
                                "hold one")
        shares = torch.bincount(codes, minlength=count).double() / len(x)
        self.multipliers = group_multipliers(self.lambdas, shares)
        self.models = [self._best_response(x, labels, codes, lam, shares)
                       for lam in self.multipliers]
        return self

    def _best_response(self, x: torch.Tensor, labels: torch.Tensor, codes: torch.Tensor,
                       multipliers: torch.Tensor, shares: torch.Tensor) -> LogisticRegression:
        y, w = relabel(labels, codes, multipliers, shares)
        if bool((y == y[0]).all()):
            return _constant(float(y[0]), x.shape[1])
        # sklearn's ½‖w‖² + C Σ W ℓ, divided by C·n: our mean(W ℓ) + l2/2 ‖w‖²
        model = LogisticRegression(l2=1.0 / (self.C * len(x)), max_iter=self.max_iter)
        return model.fit(x, y, w)

    def predict_proba(self, features: ArrayLike, index: int | None = None) -> torch.Tensor:
        """Scores ``σ(⟨w, x⟩ + b)``: every model's ``[L, n]``, or model ``index``'s ``[n]``."""
        if not self.models:
            raise BaselineError("FairClassification is not fitted: call fit() first")
        if index is None:
            return torch.stack([m.predict_proba(features) for m in self.models])
        if not -len(self.models) <= index < len(self.models):
            raise BaselineError(f"index {index} is out of range for {len(self.models)} models")
        return self.models[index].predict_proba(features)


__all__ = ["DEFAULT_LAMBDAS", "FairClassification", "group_multipliers", "relabel"]
