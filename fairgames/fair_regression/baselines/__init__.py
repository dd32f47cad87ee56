"""Paper 003's baselines (§6): unconstrained least squares, the paper's bounded logistic
regression and SEO (:mod:`.regression`), and FC, the fair-classification reduction on
thresholded targets (:mod:`.fair_classification`). Like paper 000's baselines
(:mod:`fairgames.baselines`, whose input checks they share) they work on plain tensors.

Example:
    >>> import torch
    >>> from fairgames.fair_regression.baselines import LeastSquares
    >>> x = torch.tensor([[0.0], [1.0], [2.0]])
    >>> fitted = LeastSquares().fit(x, torch.tensor([1.0, 3.0, 5.0]))
    >>> [round(v, 3) for v in fitted.predict(x).tolist()]
    [1.0, 3.0, 5.0]
"""

from .fair_classification import FairClassification
from .regression import SEO, BoundedLogisticRegression, LeastSquares

__all__ = ["SEO", "BoundedLogisticRegression", "FairClassification", "LeastSquares"]
