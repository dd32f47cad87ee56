"""Paper 001's baselines (Goh et al., NIPS 2016, Figure 2), on numpy / scipy arrays.

- :func:`zafar_fit`: Zafar et al.'s disparate-impact formulation (AISTATS 2017, their
  ``fair-classification`` code): summed logistic loss s.t. ``|(1/N) Σ (z_i − z̄) wᵀx_i| ≤ c``.
- :func:`svm_fit`: the unconstrained linear SVM, LIBLINEAR's objective
  ``½‖w‖² + C Σ max(0, 1 − y_i wᵀx_i)``, no bias (``C = 1`` is the paper's ``λ = 1/n``).
- :func:`pseudo_example_svm_fit`: the authors' own baseline (``svmc.jl``,
  ``fairness_zvrg``): that SVM with a hinge constraint on one pseudo-example
  :func:`pseudo_example` ``x_f = (N_F Σ_M x − N_M Σ_F x)/(N_M + N_F)``.

Labels are 0/1 (1: the positive class) as everywhere in the package; every fit returns a
:class:`LinearClassifier`. The library's own method (ramp + MM) is ``algorithm=mm``.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(200, 3)); y = (x[:, 0] > 0).astype(int)
    >>> model = svm_fit(x, y)
    >>> float(np.mean(model.predict(x) == y)) > 0.9
    True
"""

from .model import LinearClassifier, positive_rate_ratio
from .svm import (
    pseudo_example,
    pseudo_example_svm_fit,
    pseudo_example_svm_path,
    svm_fit,
    svm_objective,
)
from .zafar import zafar_covariances, zafar_fit

__all__ = ["LinearClassifier", "positive_rate_ratio", "pseudo_example",
           "pseudo_example_svm_fit", "pseudo_example_svm_path", "svm_fit", "svm_objective",
           "zafar_covariances", "zafar_fit"]
