"""Scorers for binary classification: linear and MLP, built by name from a config.

Any ``nn.Module`` mapping features ``[B, D]`` to scores ``[B]`` (predicted positive iff > 0)
can be trained by fairgames; these are the two the configs name.

Example:
    >>> from fairgames.models import build_model
    >>> build_model("mlp", 10, hidden=[32]).net[0].out_features
    32
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .linear import LinearModel
from .mlp import ACTIVATIONS, MLP

MODELS = ("linear", "mlp")


def build_model(name: str, input_dim: int, **options: Any) -> nn.Module:
    """A model by name: ``linear`` (options: ``bias``) or ``mlp`` (``hidden``, ``activation``,
    ``dropout``). Unknown names and options raise ``ValueError`` naming them.

    Example:
        >>> import torch
        >>> model = build_model("linear", 4)
        >>> type(model).__name__, model(torch.ones(2, 4)).shape
        ('LinearModel', torch.Size([2]))
        >>> build_model("cnn", 4)
        Traceback (most recent call last):
        ...
        ValueError: unknown model 'cnn'; choose from ['linear', 'mlp']
    """
    if name == "linear":
        allowed = {"bias"}
        cls: Any = LinearModel
    elif name == "mlp":
        allowed = {"hidden", "activation", "dropout"}
        cls = MLP
    else:
        raise ValueError(f"unknown model {name!r}; choose from {list(MODELS)}")
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for model {name!r}; it takes "
                         f"{sorted(allowed)}")
    return cls(input_dim, **options)


__all__ = ["ACTIVATIONS", "MLP", "MODELS", "LinearModel", "build_model"]
