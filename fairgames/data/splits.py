"""Seeded, deterministic split indices, drawn on the CPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import DataError


def split_counts(n: int, fractions: Sequence[float]) -> list[int]:
    """Sizes of the parts of ``n`` rows for ``fractions`` (largest-remainder rounding).

    Example:
        >>> split_counts(10, (0.6, 0.2, 0.2))
        [6, 2, 2]
    """
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or len(fr) == 0 or np.any(fr < 0) or not np.isfinite(fr).all():
        raise DataError(f"split fractions must be non-negative numbers, got {tuple(fractions)}")
    if abs(fr.sum() - 1.0) > 1e-6:
        raise DataError(f"split fractions must sum to 1, got {tuple(fractions)} "
                        f"(sum {fr.sum():.6g})")
    raw = fr * n
    counts = np.floor(raw).astype(np.int64)
    rest = n - int(counts.sum())
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[:rest]] += 1
    return [int(c) for c in counts]


def random_split(
    n: int,
    fractions: Sequence[float],
    seed: int | Sequence[int],
    stratify: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Disjoint sorted index arrays covering ``range(n)``, one per fraction.

    With ``stratify`` (an ``[n]`` array of stratum codes) every stratum is split in the
    given proportions separately, so each part keeps the strata's shares.
    Uses ``numpy.random.default_rng(seed)`` on the CPU, so the split is the same on every
    machine and device.

    Example:
        >>> parts = random_split(10, (0.5, 0.5), seed=0)
        >>> sorted(np.concatenate(parts).tolist()) == list(range(10))
        True
    """
    rng = np.random.default_rng(seed)
    if stratify is None:
        perm = rng.permutation(n)
        bounds = np.cumsum([0, *split_counts(n, fractions)])
        return [np.sort(perm[bounds[i]:bounds[i + 1]]) for i in range(len(fractions))]
    strata = np.asarray(stratify)
    if strata.shape != (n,):
        raise DataError(f"stratify must have shape [{n}], got {strata.shape}")
    parts: list[list[np.ndarray]] = [[] for _ in fractions]
    for value in np.unique(strata):
        idx = np.flatnonzero(strata == value)
        idx = idx[rng.permutation(len(idx))]
        bounds = np.cumsum([0, *split_counts(len(idx), fractions)])
        for i in range(len(fractions)):
            parts[i].append(idx[bounds[i]:bounds[i + 1]])
    return [np.sort(np.concatenate(p)) if p else np.zeros(0, np.int64) for p in parts]
