"""The two games of paper 003 in one shape, so one exponentiated-gradient loop plays both:
``L(h, λ) = objective(h) + ⟨λ, g(h)⟩`` with ``λ ≥ 0``, ``‖λ‖₁ ≤ B`` and ``g`` the one-sided
constraint values (violation beyond the slack), all evaluated on TRUE rates and losses.

* :class:`ParityGame` (SP, Algorithm 1): objective ``cost^(h)`` (Eq. 10), ``g`` the
  ``2|𝒜|N`` rows ``[γ̂ − ε̂; −γ̂ − ε̂]`` from the exact threshold rates of
  :mod:`fairgames.rates.thresholds`; ``ρ = 2`` (costs in [−1, 1]).
* :class:`GroupLossGame` (BGL, Algorithm 2): objective ``loss^(f)``, ``g_a = γ̂^BGL_a − ζ̂_a``
  (the group losses); ``ρ = 1``. Losses are taken at predictions clipped to [0, 1], the
  paper's range of f (fairlearn's ``SquareLoss(0, 1)`` clips the same way).

Example:
    >>> import torch
    >>> from fairgames.rates.losses import SQUARED
    >>> from .fitting import Fitter
    >>> from .oracles import WeightedLossOracle
    >>> from .sample import Sample
    >>> s = Sample.of(torch.tensor([[0.0], [1.0]]), torch.tensor([0.2, 0.6]),
    ...               torch.tensor([0, 1]))
    >>> game = GroupLossGame(s, SQUARED, 0.1, WeightedLossOracle(
    ...     Fitter(lambda: torch.nn.Linear(1, 1), s.x), s.y, SQUARED))
    >>> f = game.best_response(torch.zeros(2, dtype=torch.float64))
    >>> [round(v, 6) for v in game.evaluate(f)[1].tolist()]   # group losses 0 − ζ̂
    [-0.1, -0.1]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from fairgames.rates.losses import Loss
from fairgames.rates.thresholds import threshold_grid, threshold_rates

from .discretize import clamped_loss, costs, lagrangian_costs, predictor_cost, prefix_sums
from .fitting import outputs
from .sample import Sample, slacks

Oracle = Callable[[torch.Tensor], nn.Module]


def predictions(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``f(x)`` ``[n]`` in float64, without autograd, in eval mode."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = outputs(model, x).to(torch.float64)
    model.train(was_training)
    return out


class ParityGame:
    """Statistical parity (problem (11)) with slacks ε̂_a on the grid of ``grid_size``."""

    kind = "sp"
    rho = 2.0

    def __init__(self, sample: Sample, loss: Loss, tolerance: float | Sequence[float],
                 oracle: Oracle, grid_size: int) -> None:
        self.sample, self.loss, self.oracle = sample, loss, oracle
        self.grid_size = grid_size
        self.grid = threshold_grid(grid_size)
        self.eps = slacks(tolerance, sample.num_groups)
        self.c = costs(loss, sample.y, grid_size)                       # [n, N]
        self.c_prefix = prefix_sums(self.c)          # fixed: every evaluate gathers from it
        alpha = 1.0 / grid_size
        # Lemma 1: loss_α(f) = cost^(h_f) + Ê ℓ(Y, α/2)
        half = torch.tensor(alpha / 2, dtype=torch.float64)
        self.offset = clamped_loss(loss, sample.y, half).mean()
        self.num_multipliers = 2 * sample.num_groups * grid_size

    def signed(self, lam: torch.Tensor) -> torch.Tensor:
        """``λ⁺ − λ⁻`` ``[G, N]`` from the stacked ``[λ⁺; λ⁻]``."""
        plus, minus = lam.reshape(2, self.sample.num_groups, self.grid_size)
        return plus - minus

    def best_response(self, lam: torch.Tensor) -> nn.Module:
        s = self.sample
        return self.oracle(lagrangian_costs(self.c, s.codes, self.signed(lam), s.proportions))

    def gaps(self, u: torch.Tensor) -> torch.Tensor:
        """``γ̂_{a,z}`` ``[G, N]`` of the predictions ``u`` (exact threshold rates)."""
        s = self.sample
        return threshold_rates(u, s.codes, s.num_groups, self.grid).gaps

    def evaluate(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cost^(h_f), g(h_f) [2GN])``."""
        u = predictions(model, self.sample.x)
        gamma = self.gaps(u).to(self.c.device)
        eps = self.eps.to(gamma.device)[:, None]
        cost = predictor_cost(self.c, u, prefix=self.c_prefix)
        return cost, torch.cat([gamma - eps, -gamma - eps]).reshape(-1)

    def report(self, objective: torch.Tensor, g: torch.Tensor) -> tuple[float, float]:
        """``(loss_α, max |γ̂|)`` of a (mixture's) objective and constraint values."""
        plus, minus = g.reshape(2, self.sample.num_groups, self.grid_size)
        gamma = (plus - minus) / 2
        return float(objective + self.offset), float(gamma.abs().max())

    def iteration_bound(self, bound: float, gap: float) -> float:
        """Theorem 4: ``16 B² log(2|𝒜|N + 1) / ν²``."""
        return 16 * bound ** 2 * math.log(self.num_multipliers + 1) / gap ** 2


class GroupLossGame:
    """Bounded group loss (problem (4)) with bounds ζ̂_a."""

    kind = "bgl"
    rho = 1.0

    def __init__(self, sample: Sample, loss: Loss, tolerance: float | Sequence[float],
                 oracle: Oracle) -> None:
        self.sample, self.loss, self.oracle = sample, loss, oracle
        self.zeta = slacks(tolerance, sample.num_groups)
        self.num_multipliers = sample.num_groups

    def best_response(self, lam: torch.Tensor) -> nn.Module:
        s = self.sample
        n = s.y.shape[0]
        return self.oracle(1.0 / n + (lam.to(s.counts.device, torch.float64) / s.counts)[s.codes])

    def evaluate(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss^(f), γ̂^BGL(f) − ζ̂ [G])``."""
        s = self.sample
        u = predictions(model, s.x).clamp(0.0, 1.0)
        per_row = self.loss(u, s.y)
        group = torch.zeros(s.num_groups, dtype=torch.float64, device=u.device)
        group = group.index_add(0, s.codes, per_row) / s.counts
        return per_row.mean(), group - self.zeta.to(group.device)

    def report(self, objective: torch.Tensor, g: torch.Tensor) -> tuple[float, float]:
        """``(loss, worst group loss)``."""
        return float(objective), float((g + self.zeta).max())

    def iteration_bound(self, bound: float, gap: float) -> float:
        """App. D: ``4 B² ln(|𝒜| + 1) / ν²``."""
        return 4 * bound ** 2 * math.log(self.num_multipliers + 1) / gap ** 2
