"""Input checks shared by the baselines: shapes, dtypes, finiteness, labels, group codes.

Example:
    >>> import torch
    >>> as_vector(torch.tensor([0.2, 0.7]), "scores").dtype
    torch.float64
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class BaselineError(ValueError):
    """Bad input to a baseline (shape, dtype, NaN, labels, groups) or a call before ``fit``."""


ArrayLike = torch.Tensor | np.ndarray | Sequence[float]


def as_vector(values: ArrayLike, name: str, *, n: int | None = None) -> torch.Tensor:
    """``values`` as a finite float64 CPU vector ``[N]`` (``[N, 1]`` is accepted)."""
    t = torch.as_tensor(np.asarray(values) if not isinstance(values, torch.Tensor) else values)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() != 1:
        raise BaselineError(f"{name} must be a vector [N], got shape {tuple(t.shape)}")
    if t.dtype == torch.bool:
        t = t.double()
    if not (t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32,
                                                 torch.int64, torch.uint8)):
        raise BaselineError(f"{name} must be numeric, got dtype {t.dtype}")
    t = t.detach().to("cpu", torch.float64)
    if n is not None and len(t) != n:
        raise BaselineError(f"{name} has {len(t)} rows, expected {n}")
    if len(t) == 0:
        raise BaselineError(f"{name} is empty")
    if not torch.isfinite(t).all():
        raise BaselineError(f"{name} has {int((~torch.isfinite(t)).sum())} NaN/inf value(s)")
    return t


def as_labels(labels: ArrayLike, n: int | None = None) -> torch.Tensor:
    """Binary labels ``[N]`` in {0, 1} as float64."""
    y = as_vector(labels, "labels", n=n)
    bad = ~((y == 0) | (y == 1))
    if bad.any():
        raise BaselineError(f"labels must be 0/1; found {int(bad.sum())} other value(s), e.g. "
                            f"{float(y[bad][0])}")
    return y


def as_weights(weights: ArrayLike, n: int | None = None) -> torch.Tensor:
    """Example weights ``[N]``: finite, non-negative, not all zero (float64)."""
    w = as_vector(weights, "weights", n=n)
    if bool((w < 0).any()):
        raise BaselineError(f"weights must be >= 0; found {int((w < 0).sum())} negative value(s)")
    if not bool((w > 0).any()):
        raise BaselineError("weights are all zero: at least one example needs a positive weight")
    return w


def as_groups(groups: ArrayLike, n: int, n_groups: int | None = None) -> tuple[torch.Tensor, int]:
    """Integer group codes ``[N]`` (0..G−1) and ``G``; every group must be non-empty."""
    g = as_vector(groups, "groups", n=n)
    if (g != g.round()).any() or (g < 0).any():
        raise BaselineError("groups must be non-negative integer codes 0..G-1")
    codes = g.long()
    count = int(codes.max()) + 1 if n_groups is None else int(n_groups)
    if int(codes.max()) >= count:
        raise BaselineError(f"group code {int(codes.max())} is out of range for {count} groups")
    sizes = torch.bincount(codes, minlength=count)
    empty = [i for i in range(count) if sizes[i] == 0]
    if empty:
        raise BaselineError(f"group(s) {empty} have no rows; every group needs examples")
    return codes, count


def as_features(features: ArrayLike, n: int | None = None) -> torch.Tensor:
    """Features ``[N, D]`` as finite float32."""
    x = torch.as_tensor(np.asarray(features) if not isinstance(features, torch.Tensor)
                        else features)
    if x.dim() != 2:
        raise BaselineError(f"features must be a matrix [N, D], got shape {tuple(x.shape)}")
    x = x.detach().to("cpu", torch.float32)
    if n is not None and len(x) != n:
        raise BaselineError(f"features have {len(x)} rows, expected {n}")
    if len(x) == 0:
        raise BaselineError("features are empty")
    if not torch.isfinite(x).all():
        raise BaselineError("features have NaN/inf values")
    return x
