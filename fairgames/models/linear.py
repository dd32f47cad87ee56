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


class LinearModel(nn.Module):
    """Linear scores ``[B]`` from features ``[B, D]``; predicted positive iff the score is > 0.

    Args:
        input_dim: number of features ``D``.
        bias: learn an intercept.

    Example:
        >>> import torch
        >>> m = LinearModel(3, bias=False)
        >>> sum(p.numel() for p in m.parameters()), m(torch.ones(2, 3)).tolist()
        (3, [0.0, 0.0])
    """

    def __init__(self, input_dim: int, bias: bool = True) -> None:
        super().__init__()
        if not isinstance(input_dim, int) or input_dim < 1:
            raise ValueError(f"input_dim must be a positive int, got {input_dim!r}")
        self.linear = nn.Linear(input_dim, 1, bias=bias)
        # Start from the zero model (paper 001 starts MM from w = 0): deterministic and neutral.
        nn.init.zeros_(self.linear.weight)
        if bias:
            nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of features ``x`` ``[B, D]``."""
        return self.linear(x).squeeze(-1)
