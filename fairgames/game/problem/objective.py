"""The objective under a surrogate of its own (``Problem(objective_surrogate=...)``): the
setting checked (:func:`objective_surrogate_for`) and θ's bound of the objective under it
(:class:`ObjectiveBound`), while the constraints keep the problem's surrogate.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fairgames.rates import Batch, Expression, RateEvaluator, Surrogate


class ObjectiveBound(torch.nn.Module):
    """The θ-player's sign-correct bound ``ω·Σ_k (w_k⁺·upper_k + w_k⁻·lower_k)`` of an affine
    objective ``⟨w, R⟩`` under its own surrogate (paper 000 eq. (4) with the objective's
    costs alone), from one fused pass over the objective's leaves. It never updates running
    estimates: its values are θ's, the game's records come from the main evaluator.

    Example:
        >>> import math
        >>> import torch
        >>> from fairgames.rates import Batch, error_rate
        >>> bound = ObjectiveBound(error_rate(), Surrogate("logistic"), {})
        >>> s = torch.tensor([2.0, -1.0])
        >>> value = bound(Batch(scores=s, labels=torch.tensor([1.0, 1.0])), torch.tensor(1.0))
        >>> ce = torch.nn.functional.softplus(-s).mean() / math.log(2.0)  # cross-entropy, bits
        >>> bool(torch.isclose(value, ce))
        True
    """

    def __init__(self, objective: Expression, surrogate: Surrogate,
                 evaluator_options: Mapping[str, object]) -> None:
        super().__init__()
        self.evaluator = RateEvaluator([objective], surrogate, **evaluator_options)  # type: ignore[arg-type]
        weights = [0.0] * len(self.evaluator.leaves)
        for leaf, coefficient in objective.affine.terms:
            weights[self.evaluator.index[leaf.key]] += coefficient
        self.register_buffer("weights", torch.tensor(weights), persistent=False)

    def forward(self, batch: Batch, omega: torch.Tensor) -> torch.Tensor:
        costs = omega * self.weights
        value, _ = self.evaluator.combination_bound(batch, lambda _true: costs, update=False)
        return value


def objective_surrogate_for(surrogate: Surrogate | str | None, objective: Expression | None
                            ) -> Surrogate | None:
    """``Problem(objective_surrogate=...)`` checked: an objective affine in the rates, that
    reads some (a ``ValueError`` otherwise; ``None`` passes through).

    Example:
        >>> from fairgames.rates import error_rate
        >>> objective_surrogate_for("logistic", error_rate()).kind
        'logistic'
    """
    if surrogate is None:
        return None
    surrogate = surrogate if isinstance(surrogate, Surrogate) else Surrogate(surrogate)
    if objective is not None and objective.nodes:
        raise ValueError(f"objective_surrogate needs an objective affine in the rates; "
                         f"{objective} is not affine in the rates (its ratio or ψ terms take "
                         "the problem's surrogate): leave objective_surrogate unset")
    if objective is None or not objective.affine.terms:
        raise ValueError("objective_surrogate needs an objective over rates; this problem's "
                         f"objective is {objective}")
    return surrogate
