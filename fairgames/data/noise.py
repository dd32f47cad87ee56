"""Noisy protected groups (paper 004): flip a fraction of group labels; estimate the noise."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .dataset import DatasetSplits
from .errors import DataError


def flip_groups(
    codes: torch.Tensor,
    gamma: float,
    *,
    n_groups: int | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """Noisy copy of group codes: exactly ``floor(gamma * N)`` rows, chosen uniformly at
    random, are moved to a different group chosen uniformly among the other ``G - 1``.

    This is the noise model of paper 004 (Sec. 7, following its released code). The draw
    is made on the CPU from ``seed``; the result is on the device of ``codes``.
    Paper 004's code flips the groups of the whole data set once, before splitting.

    Args:
        codes: ``[N]`` int64 true group codes ``0..G-1``.
        gamma: fraction of rows to reassign, in ``[0, 1]``.
        n_groups: ``G`` (default ``codes.max() + 1``); must be at least 2 when ``gamma > 0``.
        seed: seed of the draw.

    Example:
        >>> import torch
        >>> from fairgames.data import flip_groups
        >>> g = torch.tensor([0, 0, 1, 1, 2, 2, 0, 1, 2, 0])
        >>> noisy = flip_groups(g, 0.3, n_groups=3, seed=0)
        >>> int((noisy != g).sum())
        3
    """
    if not isinstance(codes, torch.Tensor) or codes.dim() != 1 or codes.dtype != torch.int64:
        raise DataError("codes must be a 1-d int64 tensor of group codes")
    if not 0.0 <= float(gamma) <= 1.0:
        raise DataError(f"gamma must be in [0, 1], got {gamma}")
    c = codes.cpu()
    g = int(c.max()) + 1 if n_groups is None and len(c) else int(n_groups or 0)
    if len(c) and (int(c.min()) < 0 or int(c.max()) >= g):
        raise DataError(f"group codes must lie in 0..{g - 1}")
    k = int(float(gamma) * len(c))
    if k == 0:
        return codes.clone()
    if g < 2:
        raise DataError("flipping groups needs at least 2 groups")
    gen = torch.Generator().manual_seed(int(seed))
    rows = torch.randperm(len(c), generator=gen)[:k]
    offset = torch.randint(1, g, (k,), generator=gen)
    out = c.clone()
    out[rows] = (c[rows] + offset) % g
    return out.to(codes.device)


@dataclass
class GroupNoiseEstimate:
    """Estimates of the group-noise model from auxiliary ``(G, Ĝ)`` pairs.

    Attributes:
        p_true_given_noisy: ``[G, G]``, entry ``[j, k] = P(G = j | Ĝ = k)`` (columns sum to
            1; a column of an empty noisy group is NaN).
        p_noisy_differs_given_true: ``[G]``, ``P(Ĝ ≠ G | G = j)`` (γ_j of paper 004).
        p_true: ``[G]``, ``P(G = j)``.
        p_noisy: ``[G]``, ``P(Ĝ = k)``.
        counts: ``[G, G]`` int64, entry ``[j, k]`` = number of rows with ``G = j, Ĝ = k``.

    Example:
        >>> est = estimate_group_noise(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 1, 1]))
        >>> est.counts.tolist(), est.p_noisy.tolist()
        ([[1, 1], [0, 2]], [0.25, 0.75])
        >>> est.p_true_given_noisy[:, 1].tolist()   # P(G = j | Ĝ = 1)
        [0.3333333333333333, 0.6666666666666666]
    """

    p_true_given_noisy: torch.Tensor
    p_noisy_differs_given_true: torch.Tensor
    p_true: torch.Tensor
    p_noisy: torch.Tensor
    counts: torch.Tensor


def estimate_group_noise(
    true_codes: torch.Tensor,
    noisy_codes: torch.Tensor,
    *,
    n_groups: int | None = None,
) -> GroupNoiseEstimate:
    """Estimate ``P(G = j | Ĝ = k)`` and ``P(Ĝ ≠ G | G = j)`` from auxiliary data.

    Example:
        >>> import torch
        >>> from fairgames.data import estimate_group_noise
        >>> est = estimate_group_noise(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 1, 1]))
        >>> est.p_noisy_differs_given_true.tolist()
        [0.5, 0.0]
    """
    for name, t in (("true_codes", true_codes), ("noisy_codes", noisy_codes)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype != torch.int64:
            raise DataError(f"{name} must be a 1-d int64 tensor")
    if true_codes.shape != noisy_codes.shape:
        raise DataError(f"true_codes {tuple(true_codes.shape)} and noisy_codes "
                        f"{tuple(noisy_codes.shape)} differ in shape")
    if len(true_codes) == 0:
        raise DataError("cannot estimate group noise from no rows")
    t = true_codes.cpu()
    h = noisy_codes.cpu()
    g = n_groups if n_groups is not None else int(max(int(t.max()), int(h.max()))) + 1
    if int(t.min()) < 0 or int(h.min()) < 0 or int(t.max()) >= g or int(h.max()) >= g:
        raise DataError(f"group codes must lie in 0..{g - 1}")
    counts = torch.bincount(t * g + h, minlength=g * g).reshape(g, g)
    c = counts.double()
    col = c.sum(0)
    row = c.sum(1)
    n = c.sum()
    p_true_given_noisy = c / col[None, :]
    differs = (row - torch.diagonal(c)) / row
    dev = true_codes.device
    return GroupNoiseEstimate(
        p_true_given_noisy=p_true_given_noisy.to(dev),
        p_noisy_differs_given_true=differs.to(dev),
        p_true=(row / n).to(dev),
        p_noisy=(col / n).to(dev),
        counts=counts.to(dev),
    )


TRUE_SUFFIX = "_true"


def true_attribute(attribute: str) -> str:
    """The name under which a noisy attribute's true codes are kept (evaluation only).

    Example:
        >>> true_attribute("race3")
        'race3_true'
    """
    return attribute + TRUE_SUFFIX


def check_noise(fraction: object) -> float:
    """``fraction`` as a float in ``[0, 1]``, else a clear :class:`DataError`.

    Example:
        >>> check_noise(0.3)
        0.3
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0.0 <= float(fraction) <= 1.0:
        raise DataError(f"noise must be the fraction of rows whose group is flipped, in "
                        f"[0, 1]; got {fraction!r}")
    return float(fraction)


def noisy_splits(splits: DatasetSplits, attribute: str, fraction: float, seed: int
                 ) -> DatasetSplits:
    """``splits`` with ``attribute`` replaced by a noisy copy and its true codes kept as
    :func:`true_attribute` (for evaluation only).

    The flip (:func:`flip_groups`) is drawn once on the whole data set — the train,
    validation and test rows concatenated in that order — as paper 004's code flips before
    splitting: exactly ``floor(fraction · N)`` rows of all ``N``, uniformly at random.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> s = noisy_splits(make_synthetic(n=1000, seed=0), "group", 0.2, seed=1)
        >>> flipped = sum(int((d.groups["group"] != d.groups["group_true"]).sum()) for d in s)
        >>> flipped, s.train.group_names["group_true"]
        (200, ['0', '1'])
    """
    fraction = check_noise(fraction)
    if attribute not in splits.train.groups:
        raise DataError(f"unknown attribute {attribute!r} to add noise to; the data has "
                        f"{sorted(splits.train.groups)}")
    parts = list(splits)
    codes = torch.cat([d.groups[attribute].cpu() for d in parts])
    noisy = flip_groups(codes, fraction, n_groups=len(parts[0].group_names[attribute]),
                        seed=seed)
    out, start = [], 0
    for d in parts:
        piece = noisy[start:start + len(d)].to(d.groups[attribute].device)
        start += len(d)
        names = dict(d.group_names)
        names[true_attribute(attribute)] = list(names[attribute])
        out.append(replace(d, groups={**d.groups, attribute: piece,
                                      true_attribute(attribute): d.groups[attribute]},
                           group_names=names))
    meta = {**splits.metadata, "noise": {"attribute": attribute, "fraction": fraction,
                                         "seed": int(seed),
                                         "true_attribute": true_attribute(attribute)}}
    return DatasetSplits(*out, metadata=meta)
