"""The linear classifier every baseline returns, and the rates Figure 2 plots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class LinearClassifier:
    """``f(x) = wᵀx (+ b)``, predicting the positive class (1) where ``f(x) > 0``.

    Attributes:
        w: ``[D]`` weights.
        b: the bias (0.0 for the paper's no-bias models).
        info: the solver's record (status, iterations, multiplier, constraint values).

    Example:
        >>> m = LinearClassifier(np.array([1.0, -1.0]))
        >>> m.predict(np.array([[2.0, 1.0], [0.0, 1.0]])).tolist()
        [1, 0]
    """

    w: np.ndarray
    b: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        """The scores ``wᵀx + b`` of the rows of ``x``."""
        return np.asarray(x, dtype=np.float64) @ self.w + self.b

    def predict(self, x: np.ndarray) -> np.ndarray:
        """0/1 predictions: 1 where the score is positive (the paper's threshold at 0)."""
        return (self.decision_function(x) > 0).astype(np.int64)


def positive_rate_ratio(pred: np.ndarray, mask_a: np.ndarray, mask_b: np.ndarray) -> float:
    """``s_p(D_A) / s_p(D_B)``: the positive rate on rows ``mask_a`` over that on ``mask_b``
    (paper 001's Figure 2 x-axis, A = male, B = female); ``inf`` when ``D_B`` gets none.

    Example:
        >>> positive_rate_ratio(np.array([1, 1, 0, 1]), np.array([1, 1, 0, 0], bool),
        ...                     np.array([0, 0, 1, 1], bool))
        2.0
    """
    pred = np.asarray(pred, dtype=np.float64)
    ra, rb = pred[mask_a].mean(), pred[mask_b].mean()
    return float(ra / rb) if rb > 0 else float("inf")


def signed_labels(y: np.ndarray) -> np.ndarray:
    """0/1 labels as ±1 (the losses' convention); anything else is refused."""
    y = np.asarray(y)
    values = set(np.unique(y).tolist())
    if not values <= {0, 1}:
        raise ValueError(f"labels must be 0/1 (1: the positive class), got values "
                         f"{sorted(values)[:5]}; map them to 0/1 first")
    return np.where(y == 1, 1.0, -1.0)
