"""A synthetic tabular generator with groups, imbalance, separability and label noise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .dataset import DatasetSplits, TabularDataset
from .errors import DataError
from .splits import random_split, split_counts


def make_synthetic(
    n: int = 2000,
    d: int = 10,
    *,
    n_groups: int = 2,
    group_proportions: Sequence[float] | None = None,
    separability: float = 1.0,
    group_shift: float = 1.0,
    label_noise: float = 0.0,
    seed: int = 0,
    label_kind: str = "binary",
    split: Sequence[float] = (0.6, 0.2, 0.2),
) -> DatasetSplits:
    """Gaussian features, a logistic label model and a protected attribute ``"group"``.

    The model: group sizes are exact (``group_proportions``, uniform by default); for an
    example of group ``g``, ``x ~ N(-g * group_shift * m, I_d)`` where ``m`` is a fixed unit
    direction with a component ``0.8`` along the label direction ``w`` and ``0.6``
    orthogonal to it; the label score is ``s = separability * 2 * <w, x>``.

    * binary labels: ``y ~ Bernoulli(sigmoid(s))``, then each label is flipped with
      probability ``label_noise``;
    * real labels: ``y = clip(sigmoid(s) + label_noise * N(0, 1), 0, 1)``.

    With ``group_shift > 0`` group 1 has a lower base rate than group 0 (and group ``g``
    lower than ``g - 1``), so an unconstrained model violates demographic parity and equal
    opportunity constraints; the group is also partly predictable from ``x``.
    ``separability`` scales how deterministic the label is given ``x``. The whole draw is
    made on the CPU from ``seed``, so it is identical on every machine.
    The attribute is not among the features.

    Args:
        n: number of examples over all splits.
        d: number of features (at least 1).
        n_groups: number of values of the attribute ``"group"`` (named ``"0"``, ``"1"``, ...).
        group_proportions: share of each group; uniform when ``None``.
        separability: multiplies the label logit; larger is easier.
        group_shift: distance between consecutive group means.
        label_noise: flip probability (binary) or noise scale (real).
        seed: seed of the draw and of the split.
        label_kind: ``"binary"`` or ``"real"``.
        split: fractions ``(train, validation, test)`` (two values: no validation).

    Example:
        >>> from fairgames.data import make_synthetic
        >>> s = make_synthetic(n=1000, d=5, group_proportions=(0.7, 0.3), seed=0)
        >>> s.train.features.shape, s.train.group_names["group"]
        (torch.Size([600, 5]), ['0', '1'])
        >>> r = s.train.base_rates()["group"]
        >>> r["0"] > r["1"]
        True
    """
    props, fractions = _checked_arguments(n, d, n_groups, group_proportions, label_kind,
                                          label_noise, split)
    codes, x, y, w = _draw(n, d, n_groups, props, separability, group_shift, label_noise,
                           seed, label_kind)

    full = TabularDataset(
        features=x.float(),
        labels=y.float(),
        label_kind=label_kind,
        groups={"group": codes.long()},
        group_names={"group": [str(i) for i in range(n_groups)]},
        feature_names=[f"x{i}" for i in range(d)],
        label_name="y",
        name="synthetic",
    )
    tr, va, te = random_split(n, fractions, seed=int(seed))
    meta = {
        "name": "synthetic",
        "paper": None,
        "preprocessing": "synthetic Gaussian features, logistic labels (see make_synthetic)",
        "split": fractions,
        "seed": int(seed),
        "params": {
            "n": n, "d": d, "n_groups": n_groups, "group_proportions": props.tolist(),
            "separability": separability, "group_shift": group_shift,
            "label_noise": label_noise, "label_kind": label_kind,
        },
        "label_direction": w.tolist(),
        "sources": [],
    }
    return DatasetSplits(
        train=full.subset(torch.from_numpy(tr)),
        validation=full.subset(torch.from_numpy(va)),
        test=full.subset(torch.from_numpy(te)),
        metadata=meta,
    )


def _checked_arguments(n: int, d: int, n_groups: int, group_proportions: Sequence[float] | None,
                       label_kind: str, label_noise: float, split: Sequence[float]
                       ) -> tuple[np.ndarray, tuple[float, ...]]:
    """:func:`make_synthetic`'s arguments checked: the group shares and the three split
    fractions (two given: no validation)."""
    if n < 1 or d < 1:
        raise DataError(f"n and d must be positive, got n={n}, d={d}")
    if n_groups < 1:
        raise DataError(f"n_groups must be at least 1, got {n_groups}")
    if label_kind not in ("binary", "real"):
        raise DataError(f"label_kind must be 'binary' or 'real', got {label_kind!r}")
    if not 0.0 <= label_noise <= (1.0 if label_kind == "binary" else float("inf")):
        raise DataError(f"label_noise must be in [0, 1] for binary labels, got {label_noise}")
    props = (np.full(n_groups, 1.0 / n_groups) if group_proportions is None
             else np.asarray(group_proportions, dtype=np.float64))
    if props.shape != (n_groups,):
        raise DataError(f"group_proportions must have {n_groups} values, got "
                        f"{tuple(np.atleast_1d(props))}")
    fractions = tuple(split)
    if len(fractions) == 2:
        fractions = (fractions[0], 0.0, fractions[1])
    if len(fractions) != 3:
        raise DataError(f"split must be (train, validation, test) fractions, got {split}")
    return props, fractions


def _draw(n: int, d: int, n_groups: int, props: np.ndarray, separability: float,
          group_shift: float, label_noise: float, seed: int, label_kind: str
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The draw of :func:`make_synthetic` on the CPU from ``seed``: group codes, features,
    labels (float64) and the unit label direction ``w``."""
    gen = torch.Generator().manual_seed(int(seed))
    counts = split_counts(n, props / props.sum() if props.sum() > 0 else props)
    codes = torch.repeat_interleave(torch.arange(n_groups), torch.tensor(counts))
    codes = codes[torch.randperm(n, generator=gen)]

    w = torch.randn(d, generator=gen, dtype=torch.float64)
    w = w / w.norm()
    v = torch.randn(d, generator=gen, dtype=torch.float64)
    v = v - (v @ w) * w
    v = v / v.norm() if d > 1 and v.norm() > 1e-12 else torch.zeros(d, dtype=torch.float64)
    direction = 0.8 * w + 0.6 * v
    direction = direction / direction.norm()
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    x = x - group_shift * codes.double()[:, None] * direction[None, :]
    score = separability * 2.0 * (x @ w)
    p = torch.sigmoid(score)
    if label_kind == "binary":
        y = (torch.rand(n, generator=gen, dtype=torch.float64) < p).double()
        flip = torch.rand(n, generator=gen, dtype=torch.float64) < label_noise
        y = torch.where(flip, 1.0 - y, y)
    else:
        noise = torch.randn(n, generator=gen, dtype=torch.float64)
        y = (p + label_noise * noise).clamp(0.0, 1.0)
    return codes, x, y, w
