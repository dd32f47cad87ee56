"""Fair regression (paper 003: Agarwal, Dudík & Wu, ICML 2019): its reductions — statistical
parity (Algorithm 1) and bounded group loss (Algorithm 2) by exponentiated gradient on the
multipliers against best-responding models, with the duality-gap stop and Theorem 4's
certificates — and the paper's baselines.

The solver (imports light: torch, numpy, scipy): :mod:`.discretize` (the grid, ℓ_α, c, c_λ,
g_λ, the targets U_i), :mod:`.sample` (checked data), :mod:`.fitting` (weighted ERM),
:mod:`.oracles` (LS, LR, CS, BGL's weighted ERM), :mod:`.games` (SP and BGL in one shape),
:mod:`.expgrad` (the loop and its certificates), :mod:`.reduction` (the entry point,
:func:`fair_regression`). The baselines (least squares, the bounded logistic regression,
SEO, FC): :mod:`.baselines`. ``algorithm=reduction`` as a run method: :mod:`.method`.
The user guide is ``docs/fair_regression.md``.

Example:
    >>> from fairgames.fair_regression import ReductionConfig, fair_regression
    >>> ReductionConfig().grid_size
    40
"""

from .expgrad import OUTCOMES, Certificate, History, ReductionResult, best_lambda, play
from .games import GroupLossGame, ParityGame
from .oracles import CostSensitiveOracle, LeastSquaresOracle, RiskOracle, WeightedLossOracle
from .reduction import ReductionConfig, fair_regression

__all__ = [
    "OUTCOMES", "Certificate", "CostSensitiveOracle", "GroupLossGame", "History",
    "LeastSquaresOracle", "ParityGame", "ReductionConfig", "ReductionResult", "RiskOracle",
    "WeightedLossOracle", "best_lambda", "fair_regression", "play",
]
