"""Scorers for binary classification and bounded regression: linear and MLP, built by name.

Any ``nn.Module`` mapping features ``[B, D]`` to scores ``[B]`` (predicted positive iff > 0)
can be trained by fairgames; these are the two the configs name. ``output="unit"`` puts a
sigmoid on the score so that predictions lie in (0, 1), as paper 003's regressors do
(f: 𝒳 → [0, 1]; its threshold grid and bounded losses assume it). A sigmoid rather than a
clamp: a clamped score outside [0, 1] has no gradient, and an SP or loss gradient could not
bring it back.

Example:
    >>> from fairgames.models import build_model
    >>> build_model("mlp", 10, hidden=[32]).net[0].out_features
    32
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .linear import OUTPUTS, LinearModel, decision_threshold, head
from .mlp import ACTIVATIONS, MLP
from .rounded import GridRounded
from .sparse_inputs import SPARSE_INPUTS

MODELS = ("linear", "mlp")


def build_model(name: str, input_dim: int, **options: Any) -> nn.Module:
    """A model by name: ``linear`` (options: ``bias``, ``sparse_inputs``) or ``mlp``
    (``hidden``, ``activation``, ``dropout``); both take ``output`` (``"score"``, or
    ``"unit"``: a sigmoid head). Unknown names and options raise ``ValueError`` naming them.

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
        allowed = {"bias", "output", "sparse_inputs"}
        cls: Any = LinearModel
    elif name == "mlp":
        allowed = {"hidden", "activation", "dropout", "output"}
        cls = MLP
    else:
        raise ValueError(f"unknown model {name!r}; choose from {list(MODELS)}")
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for model {name!r}; it takes "
                         f"{sorted(allowed)}")
    return cls(input_dim, **options)


__all__ = ["ACTIVATIONS", "MLP", "MODELS", "OUTPUTS", "SPARSE_INPUTS", "GridRounded",
           "LinearModel", "build_model", "decision_threshold", "head"]
