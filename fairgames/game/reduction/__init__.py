"""Paper 003's reductions (Agarwal, Dudík & Wu 2019): fair regression under statistical
parity (Algorithm 1) and bounded group loss (Algorithm 2) by exponentiated gradient on the
multipliers against best-responding models, with the duality-gap stop and Theorem 4's
certificates.

Modules: :mod:`.discretize` (the grid, ℓ_α, c, c_λ, g_λ, the targets U_i),
:mod:`.sample` (checked data), :mod:`.fitting` (weighted ERM), :mod:`.oracles` (LS, LR, CS,
BGL's weighted ERM), :mod:`.games` (SP and BGL in one shape), :mod:`.expgrad` (the loop and
its certificates), :mod:`.fair_regression` (the entry point).

Example:
    >>> from fairgames.game.reduction import ReductionConfig, fair_regression
    >>> ReductionConfig().grid_size
    40
"""

from .expgrad import OUTCOMES, Certificate, History, ReductionResult, best_lambda, play
from .fair_regression import ReductionConfig, fair_regression
from .games import GroupLossGame, ParityGame
from .oracles import CostSensitiveOracle, LeastSquaresOracle, RiskOracle, WeightedLossOracle

__all__ = [
    "OUTCOMES", "Certificate", "CostSensitiveOracle", "GroupLossGame", "History",
    "LeastSquaresOracle", "ParityGame", "ReductionConfig", "ReductionResult", "RiskOracle",
    "WeightedLossOracle", "best_lambda", "fair_regression", "play",
]
