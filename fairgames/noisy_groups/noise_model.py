"""``robust=soft_assignments`` (paper 004, Sec. 4): the noise model read off the training
rows, the soft-assignment player of a run, and the exact worst case over 𝒲 reported per split.

The training rows carry both the noisy and the true groups (``data.noise`` keeps the true
ones as ``<protected>_true``): they are the auxiliary data of the paper's experiments (§5.14
of the notes), from which ``P(G = j | Ĝ = k)`` is estimated once. The true groups never enter
the game otherwise.

Example:
    >>> from fairgames.data import make_synthetic, noisy_splits
    >>> tr = noisy_splits(make_synthetic(n=500, seed=0), "group", 0.2, seed=0).train
    >>> [[round(float(x), 3) for x in row] for row in noise_model(tr, "group")]
    [[0.764, 0.243], [0.236, 0.757]]
"""

from __future__ import annotations

from typing import Any

import torch

from fairgames.data import TabularDataset, estimate_group_noise, true_attribute
from fairgames.game import Problem

from .soft_assignments import SoftAssignmentPlayer
from .soft_groups import cell_codes, cell_counts
from .soft_worst_case import soft_worst_case


def noise_model(train: TabularDataset, attribute: str) -> torch.Tensor:
    """``[m, m̂]``: ``P(G = j | Ĝ = k)`` on the training rows (float64, columns sum to 1)."""
    true = true_attribute(attribute)
    if true not in train.groups:
        raise ValueError(missing_true_groups(attribute))
    n = len(train.group_names[attribute])
    est = estimate_group_noise(train.groups[true].cpu(), train.groups[attribute].cpu(),
                               n_groups=n)
    return est.p_true_given_noisy


def missing_true_groups(attribute: str) -> str:
    """Why ``robust=soft_assignments`` cannot play on data without ``<attribute>_true``, and
    the remedies that work on every data set, a table included.

    Example:
        >>> missing_true_groups("race").startswith("robust=soft_assignments needs P(G = j")
        True
    """
    return (f"robust=soft_assignments needs P(G = j | Ĝ = k), read off the training rows' "
            f"true groups ({true_attribute(attribute)!r}), which this data does not hold. To "
            "simulate noisy groups (paper 004's experiments), set data.noise=<fraction> (e.g. "
            "data.noise=0.2: that share of the rows get another group, their true ones are "
            "kept), on any data set, your own table (data=table) included. If your groups "
            "are noisy and their true values unknown, P(G | Ĝ) cannot be estimated: use "
            "robust=dro robust.gamma=<P(Ĝ ≠ G | G = j): one number, or a list, one per "
            "group> instead (docs/noisy_groups.md)")


def soft_player(train: TabularDataset, attribute: str, *, lr: float, steps: int,
                projection_iterations: int, optimizer: str, timing: str
                ) -> SoftAssignmentPlayer:
    """The soft-assignment player on ``attribute``'s noisy codes: the constraints read the
    soft true-group memberships in its place."""
    names = train.group_names[attribute]
    return SoftAssignmentPlayer(attribute, noise_model(train, attribute), true_values=names,
                                lr=lr, steps=steps, projection_iterations=projection_iterations,
                                optimizer=optimizer, timing=timing)


def soft_values(problem: Problem, scores: torch.Tensor, ds: TabularDataset, attribute: str,
                b: torch.Tensor, mixture_weights: torch.Tensor | None = None
                ) -> dict[str, float | None] | None:
    """Each constraint's exact maximum over 𝒲 (:func:`~fairgames.noisy_groups.soft_worst_case`) at
    the split's cell counts (a stochastic model's: the mixture-weighted counts of its
    members); ``None`` when the problem is not linear in rates of labels, predictions and
    ``attribute`` (the LP does not cover it). Host-side, at report time."""
    noisy = ds.groups[attribute].cpu()
    m_hat = len(ds.group_names[attribute])
    labels = ds.labels.cpu()
    rows = scores.cpu().reshape(-1, scores.shape[-1])
    weights = (mixture_weights.cpu().double() if mixture_weights is not None
               else torch.ones(1, dtype=torch.float64))
    counts = sum(float(w) * cell_counts(cell_codes(noisy, s, labels), m_hat).double()
                 for w, s in zip(weights, rows, strict=True))
    try:
        worst = soft_worst_case(problem, counts, b, attribute, ds.group_names[attribute])
    except ValueError:
        return None
    return {name: (None if v != v else float(v))
            for name, v in zip(worst.rows, worst.values, strict=True)}


def noise_table(train: TabularDataset, attribute: str) -> dict[str, Any]:
    """The noise model as the report names it: ``{noisy value: {true value: P}}``."""
    b = noise_model(train, attribute)
    names = train.group_names[attribute]
    return {k: {j: float(b[jj, kk]) for jj, j in enumerate(names)}
            for kk, k in enumerate(names)}
