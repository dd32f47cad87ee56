"""A multi-layer perceptron scorer.

Example:
    >>> import torch
    >>> m = MLP(4, hidden=(16, 8))
    >>> m(torch.zeros(3, 4)).shape
    torch.Size([3])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .linear import head

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "elu": nn.ELU}


class MLP(nn.Module):
    """Scores ``[B]`` from features ``[B, D]`` through hidden layers.

    Args:
        input_dim: number of features ``D``.
        hidden: widths of the hidden layers (at least one).
        activation: one of ``relu``, ``tanh``, ``gelu``, ``elu``.
        dropout: dropout probability after each hidden activation (0 disables it).
        output: ``"score"``, or ``"unit"``: the score's sigmoid (predictions in (0, 1)).

    Example:
        >>> import torch
        >>> m = MLP(4, hidden=[8], activation="tanh", dropout=0.1)
        >>> [type(layer).__name__ for layer in m.net]
        ['Linear', 'Tanh', 'Dropout', 'Linear']
        >>> m(torch.zeros(5, 4)).shape
        torch.Size([5])
    """

    def __init__(self, input_dim: int, hidden: Sequence[int] = (64,), activation: str = "relu",
                 dropout: float = 0.0, output: str = "score") -> None:
        super().__init__()
        self.output = head(output)
        if not isinstance(input_dim, int) or input_dim < 1:
            raise ValueError(f"input_dim must be a positive int, got {input_dim!r}")
        hidden = list(hidden)
        if not hidden or any(not isinstance(h, int) or h < 1 for h in hidden):
            raise ValueError(f"hidden must list positive layer widths, got {hidden!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose from "
                             f"{sorted(ACTIVATIONS)}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        layers: list[nn.Module] = []
        width = input_dim
        for h in hidden:
            layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of features ``x`` ``[B, D]``."""
        s = self.net(x).squeeze(-1)
        return torch.sigmoid(s) if self.output == "unit" else s
