"""A linear scorer ``s(x) = ⟨w, x⟩ + b`` (the model of papers 000 and 001).

Example:
    >>> import torch
    >>> m = LinearModel(3)
    >>> m(torch.zeros(5, 3)).shape
    torch.Size([5])
"""

from __future__ import annotations

import torch
from torch import nn

from .sparse_inputs import CsrCache, sparse_inputs_option

OUTPUTS = ("score", "unit")


def head(output: str) -> str:
    """Check an ``output`` option: ``"score"`` (the raw score) or ``"unit"`` (its sigmoid, a
    prediction in (0, 1) for bounded regression, paper 003).

    Example:
        >>> head("unit")
        'unit'
    """
    if output not in OUTPUTS:
        raise ValueError(f"unknown model output {output!r}; choose from {list(OUTPUTS)} "
                         "('unit': a sigmoid head, predictions in (0, 1))")
    return output


def decision_threshold(model: nn.Module) -> float:
    """The score a binary prediction must exceed: 0.5 for a sigmoid head (``output="unit"``,
    its value estimates P(y = 1)), 0 for a raw score.

    Example:
        >>> decision_threshold(LinearModel(2, output="unit")), decision_threshold(LinearModel(2))
        (0.5, 0.0)
    """
    return 0.5 if getattr(model, "output", "score") == "unit" else 0.0


class LinearModel(nn.Module):
    """Linear scores ``[B]`` from features ``[B, D]``; predicted positive iff the score is > 0.

    Args:
        input_dim: number of features ``D``.
        bias: learn an intercept.
        output: ``"score"``, or ``"unit"``: ``sigmoid(⟨w, x⟩ + b)`` (starts at 0.5 everywhere).
        sparse_inputs: ``"auto"``: in training, a large mostly-zero CPU feature matrix that
            comes back unchanged (a full batch) is multiplied through its CSR form, forward and
            backward (:mod:`fairgames.models.sparse_inputs`; equal to the dense product to
            rounding); ``"off"``: always the dense kernels.

    Example:
        >>> import torch
        >>> m = LinearModel(3, bias=False)
        >>> sum(p.numel() for p in m.parameters()), m(torch.ones(2, 3)).tolist()
        (3, [0.0, 0.0])
    """

    def __init__(self, input_dim: int, bias: bool = True, output: str = "score",
                 sparse_inputs: str = "auto") -> None:
        super().__init__()
        self.output = head(output)
        self.sparse_inputs = sparse_inputs_option(sparse_inputs)
        self._csr = CsrCache()
        if not isinstance(input_dim, int) or input_dim < 1:
            raise ValueError(f"input_dim must be a positive int, got {input_dim!r}")
        self.linear = nn.Linear(input_dim, 1, bias=bias)
        # Start from the zero model (paper 001 starts MM from w = 0): deterministic and neutral.
        nn.init.zeros_(self.linear.weight)
        if bias:
            nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of features ``x`` ``[B, D]``."""
        s = None
        if self.sparse_inputs == "auto" and self.training and torch.is_grad_enabled():
            s = self._csr.scores(x, self.linear.weight, self.linear.bias)
        if s is None:
            s = self.linear(x).squeeze(-1)
        return torch.sigmoid(s) if self.output == "unit" else s
