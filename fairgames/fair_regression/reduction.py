"""The public entry point of paper 003's reduction: :func:`fair_regression` and its
:class:`ReductionConfig`.

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.rand(300, 3, generator=g)
    >>> codes = (x[:, 0] > 0.5).long()
    >>> y = (0.2 + 0.6 * x[:, 0]).clamp(0, 1)          # the target tracks the group
    >>> r = fair_regression(lambda: torch.nn.Linear(3, 1), x, y, codes,
    ...                     ReductionConfig(tolerance=0.1, bound=2.0, gap=0.05, grid_size=10,
    ...                                     step_size=0.5))
    >>> r.outcome, r.certificate.violation_ok
    ('converged', True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fairgames.game.players.keys import ConfigKey, one_of, positive
from fairgames.rates.losses import as_loss

from .expgrad import LOWER_SIDES, ReductionResult, play
from .fitting import Fitter
from .games import GroupLossGame, Oracle, ParityGame
from .oracles import CostSensitiveOracle, LeastSquaresOracle, RiskOracle, WeightedLossOracle
from .sample import Sample

CONSTRAINTS = ("sp", "bgl")
SP_ORACLES = ("ls", "lr", "cs")
# losses of classifier scores: at a prediction in [0, 1] they are not the paper's losses
# (the plain logistic log(1 + e^{∓u}) keeps p = σ(u) in [0.5, 0.73])
SCORE_LOSSES = {"logistic": "bounded_logistic", "hinge": "bounded_logistic"}


@dataclass(frozen=True)
class ReductionConfig:
    """Settings of :func:`fair_regression` (paper 003's symbols in brackets).

    ``tolerance`` is ε̂ (SP) or ζ̂ (BGL), a number or one per group; ``bound`` is B,
    ``gap`` ν, ``grid_size`` N; ``step_size`` η defaults to the paper's ν/(8B) (SP) or ν/(2B)
    (BGL), which is safe but slow; ``oracle`` is ``"ls"``, ``"lr"``, ``"cs"`` (SP; BGL always
    plays one weighted ERM) or a callable ``c_λ [n, N] -> module``; ``inner_steps`` bounds the
    L-BFGS iterations of one best response where there is no closed form; ``seed`` seeds the
    model factory. ``lower_side`` is how the gap's lower side ν̲ reads ``Best_h(λ̂)``
    (:func:`~fairgames.fair_regression.expgrad.play`'s ``lower``): ``"oracle"``, the oracle's
    response, or ``"found"``, the best of it and every iterate by the true Lagrangian (the
    certificate then holds against every mixture of the hypotheses found); ``None``:
    ``"found"`` for ``lr`` — a heuristic whose response at λ̂ loses to earlier iterates by
    more than a small ν (benchmarks/results/fair_regression.discussion.md, "Why the LR cell
    ran to its cap") — and ``"oracle"`` otherwise.
    """

    constraint: str = "sp"
    tolerance: float | Sequence[float] = 0.05
    loss: str = "squared"
    oracle: str | Oracle = "ls"
    bound: float = 10.0
    gap: float = 0.01
    grid_size: int = 40
    max_iterations: int = 1000
    check_every: int = 1
    step_size: float | None = None
    inner_steps: int = 100
    seed: int = 0
    lower_side: str | None = None

    def __post_init__(self) -> None:
        if self.constraint not in CONSTRAINTS:
            raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {self.constraint!r}")
        if isinstance(self.oracle, str) and self.oracle not in SP_ORACLES:
            raise ValueError(f"oracle must be one of {SP_ORACLES} or a callable, got "
                             f"{self.oracle!r}")
        for name in ("bound", "gap"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if self.step_size is not None and not self.step_size > 0:
            raise ValueError(f"step_size must be positive, got {self.step_size!r}")
        for name in ("grid_size", "max_iterations", "check_every", "inner_steps"):
            if not int(getattr(self, name)) >= 1:
                raise ValueError(f"{name} must be a positive integer, got "
                                 f"{getattr(self, name)!r}")
        if self.lower_side is not None and self.lower_side not in LOWER_SIDES:
            raise ValueError(f"lower_side must be one of {LOWER_SIDES} or None, got "
                             f"{self.lower_side!r}")
        as_loss(self.loss)
        if isinstance(self.loss, str) and self.loss in SCORE_LOSSES:
            raise ValueError(f"loss {self.loss!r} is a loss of classifier scores, not of a "
                             "prediction in [0, 1]; for a binary target use "
                             f"{SCORE_LOSSES[self.loss]!r} (paper 003's Ex. 2, C = 5)")


# The run config's algorithm=reduction reads these two keys, and the λ-player's
# (``radius`` = B, ``multiplier_lr`` = η) and the best response's (``theta_steps``: L-BFGS
# iterations where there is no closed form); fairgames.fair_regression.method maps them.
CONFIG_KEYS = (
    ConfigKey("best_response", str, "ls", "the SP reduction's best response: ls (least "
              "squares to the argmin targets), lr (two weighted 0/1 copies) or cs "
              "(cost-sensitive classification of (x, z) pairs)", one_of(SP_ORACLES)),
    ConfigKey("gap", float, ReductionConfig.gap, "ν: stop when the duality gap "
              "max(ν̄, ν̲) is at most this", positive()),
)


def lower_side(config: ReductionConfig) -> str:
    """The config's ``lower_side``, ``None`` resolved: ``"found"`` for the ``lr`` oracle of
    SP, else ``"oracle"`` (``ls`` and ``cs`` keep Algorithm 1's reading).

    Example:
        >>> lower_side(ReductionConfig(oracle="lr")), lower_side(ReductionConfig())
        ('found', 'oracle')
    """
    if config.lower_side is not None:
        return config.lower_side
    return "found" if config.constraint == "sp" and config.oracle == "lr" else "oracle"


def _oracle(config: ReductionConfig, fitter: Fitter, sample: Sample) -> Oracle:
    loss = as_loss(config.loss)
    if config.constraint == "bgl":
        return WeightedLossOracle(fitter, sample.y, loss)
    if callable(config.oracle):
        return config.oracle
    if config.oracle == "ls":
        return LeastSquaresOracle(fitter)
    if config.oracle == "lr":
        return RiskOracle(fitter, loss)
    return CostSensitiveOracle(fitter)


def fair_regression(model_factory: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor,
                    codes: torch.Tensor, config: ReductionConfig | None = None,
                    **changes: object) -> ReductionResult:
    """Train a randomised regressor under statistical parity (``constraint="sp"``,
    Algorithm 1) or bounded group loss (``"bgl"``, Algorithm 2) of paper 003.

    Args:
        model_factory: builds the model class's modules (``nn.Linear(d, 1)`` gets the closed
            forms); called once, under ``config.seed``.
        x: features ``[n, d]``; y: targets ``[n]`` in [0, 1]; codes: group codes ``[n]``.
        config: the settings; keyword ``changes`` replace single fields of it.

    Returns the :class:`~fairgames.fair_regression.expgrad.ReductionResult`: the mixture,
    outcome, certificate, history and oracle timings.
    """
    config = dataclasses.replace(config or ReductionConfig(), **changes)  # type: ignore[arg-type]
    sample = Sample.of(x, y, codes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        fitter = Fitter(model_factory, x, steps=config.inner_steps)
    oracle = _oracle(config, fitter, sample)
    loss = as_loss(config.loss)
    game: ParityGame | GroupLossGame
    if config.constraint == "sp":
        game = ParityGame(sample, loss, config.tolerance, oracle, config.grid_size)
    else:
        game = GroupLossGame(sample, loss, config.tolerance, oracle)
    return play(game, bound=config.bound, gap=config.gap,
                max_iterations=config.max_iterations, check_every=config.check_every,
                step_size=config.step_size, lower=lower_side(config))
