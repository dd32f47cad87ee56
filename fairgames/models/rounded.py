"""Paper 003's deployed regressor: a model's prediction rounded to its threshold grid.

The guarantees of the SP reduction hold for ``⌊f(x)⌋_α + α/2`` (the cell midpoint; notes
§2.4), not for the raw ``f`` a linear best response outputs (which may leave [0, 1]).
:class:`GridRounded` wraps the raw model so that every output — the run's evaluation, the
bootstrap intervals and the saved solutions — is that rounded value.

Example:
    >>> import torch
    >>> m = GridRounded(torch.nn.Linear(1, 1), grid_size=4)
    >>> with torch.no_grad():
    ...     _ = m.inner.weight.fill_(1.0), m.inner.bias.fill_(0.0)
    >>> m(torch.tensor([[-0.2], [0.3], [1.7]])).tolist()
    [0.125, 0.375, 1.0]
"""

from __future__ import annotations

import torch
from torch import nn

from fairgames.rates.thresholds import rounded


class GridRounded(nn.Module):
    """``rounded(inner(x), grid_size)`` ``[B]``: the inner model's prediction snapped to the
    midpoint of its cell of the grid 1/N, …, 1 (1 from 1 up). No parameters of its own: its
    state is the inner model's (keys prefixed ``inner.``). Its values lie in [0, 1], so a
    binary prediction is ``> 0.5`` (``output = "unit"``, :func:`decision_threshold`).

    A value and its rounding lie above the same grid points, so threshold rates on the grid
    are the inner model's; losses are those of the rounded value (paper 003's ``ℓ_α``).
    """

    output = "unit"

    def __init__(self, inner: nn.Module, grid_size: int) -> None:
        super().__init__()
        if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 1:
            raise ValueError(f"grid_size must be a positive int, got {grid_size!r}")
        self.inner, self.grid_size = inner, grid_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        if out.dim() == 2 and out.shape[1] == 1:
            out = out[:, 0]
        return rounded(out, self.grid_size)

    def extra_repr(self) -> str:
        return f"grid_size={self.grid_size}"
