"""Per-example losses for group-loss leaves ``E_w[loss | S]`` (bounded group loss, paper 003).

Example:
    >>> import torch
    >>> from fairgames.rates.losses import SQUARED
    >>> SQUARED(torch.tensor([0.5]), torch.tensor([1.0])).tolist()
    [0.125]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Loss:
    """A named per-example loss ``fn(scores [B], labels [B]) -> [B]``.

    The name is the loss's identity: two leaves with the same loss name and subset are the
    same leaf, so give distinct losses distinct names.

    Example:
        >>> import torch
        >>> shortfall = Loss("shortfall", lambda s, y: torch.relu(y - s))
        >>> shortfall(torch.tensor([0.25, 0.9]), torch.tensor([1.0, 0.0])).tolist()
        [0.75, 0.0]
    """

    name: str
    fn: LossFn = field(compare=False, hash=False)

    def __call__(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        out = self.fn(scores, labels)
        if out.shape != scores.shape[-1:]:
            raise ValueError(
                f"loss {self.name!r} returned shape {tuple(out.shape)}, expected "
                f"({scores.shape[-1]},) (one value per example)")
        return out

    def __str__(self) -> str:
        return self.name


def _squared(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * (y - s) ** 2


def _absolute(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (y - s).abs()


def _logistic(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # binary labels in {0, 1}; log(1 + exp(-(2y-1) s))
    return F.softplus(-(2.0 * y - 1.0) * s)


def _hinge(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(1.0 - (2.0 * y - 1.0) * s)


def _bounded_logistic(s: torch.Tensor, y: torch.Tensor, c: float = 5.0) -> torch.Tensor:
    # Paper 003 Ex. 2 with f = s in [0,1]: log(1+e^{-C(2y-1)(2f-1)}) / (2 log(1+e^C)), C = 5 [code].
    return F.softplus(-c * (2.0 * y - 1.0) * (2.0 * s - 1.0)) / (2.0 * math.log1p(math.exp(c)))


SQUARED = Loss("squared", _squared)
ABSOLUTE = Loss("absolute", _absolute)
LOGISTIC = Loss("logistic", _logistic)
HINGE = Loss("hinge", _hinge)
BOUNDED_LOGISTIC = Loss("bounded_logistic", _bounded_logistic)
LOSSES = {x.name: x for x in (SQUARED, ABSOLUTE, LOGISTIC, HINGE, BOUNDED_LOGISTIC)}


def as_loss(loss: str | Loss) -> Loss:
    """Look up a built-in loss by name, or pass a ``Loss`` through.

    Example:
        >>> import torch
        >>> hinge = as_loss("hinge")
        >>> hinge.name, hinge(torch.tensor([0.5, -2.0]), torch.tensor([1.0, 0.0])).tolist()
        ('hinge', [0.5, 0.0])
    """
    if isinstance(loss, Loss):
        return loss
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; built-ins are {sorted(LOSSES)}, or pass a Loss")
    return LOSSES[loss]
