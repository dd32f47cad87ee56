"""Per-group tables and parity gaps of one set of predictions, as the run's log shows them.

A binary target's table lists each group's classification rates, a real one's its losses
(:class:`fairgames.rates.GroupTable`, exact); :func:`parity_gaps` gives the compact
statistical-parity scalars TensorBoard shows beside λ (paper 003).

Example:
    >>> import torch
    >>> t = group_rates(torch.tensor([1., 0.]), torch.tensor([0, 1]), ["a", "b"], "g",
    ...                 torch.tensor([1., 1.]))
    >>> t["g=a"]["tpr"], t["g=b"]["fpr"]
    (1.0, 1.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from fairgames.data import TabularDataset, labeled_mask, labeled_part
from fairgames.rates import Batch, threshold_rates
from fairgames.rates.exact import cached_group_table

from .hard_predictions import expected_prediction

GROUP_RATES = ("count", "share", "base_rate", "positive_rate", "tpr", "fpr", "error",
               "precision", "fmeasure", "kld")
GROUP_LOSSES = ("count", "share", "mean_label", "mean_prediction", "mse", "mae")


def group_table(ds: TabularDataset, positive: torch.Tensor, attribute: str
                ) -> dict[str, dict[str, float | None]]:
    """Per-group rates of predictions ``positive`` (``P(ŷ = 1)`` per row, in [0, 1]) on
    ``ds``, a split with a binary target.

    Keys are ``"overall"`` and ``"<attribute>=<value>"``; see :func:`group_rates`. With
    unlabeled sources, over the labeled rows.
    """
    if ds.unlabeled:      # the rates read labels: the labeled rows alone
        positive, ds = positive[labeled_mask(ds)], labeled_part(ds)
    return group_rates(ds.labels, ds.groups[attribute], ds.group_names[attribute], attribute,
                       positive)


def group_rates(labels: torch.Tensor, codes: torch.Tensor, names: Sequence[str], attribute: str,
                positive: torch.Tensor) -> dict[str, dict[str, float | None]]:
    """Per-group rates of predictions ``positive`` (``P(ŷ = 1)`` per row) against 0/1
    ``labels``: ``count``, ``share``, ``base_rate``, ``positive_rate``, ``tpr``, ``fpr``,
    ``error``, ``precision``, ``fmeasure`` and ``kld`` (KLD between the overall base rate and
    the group's positive rate), for ``"overall"`` and each ``"<attribute>=<value>"``. A rate
    with an empty denominator is ``None``. Exact (:class:`fairgames.rates.GroupTable`).

    Example:
        >>> import torch
        >>> t = group_rates(torch.tensor([1., 0., 1., 1.]), torch.tensor([0, 0, 1, 1]),
        ...                 ["a", "b"], "g", torch.tensor([1., 1., 0., 1.]))
        >>> t["g=a"]["precision"], t["g=b"]["tpr"], t["overall"]["error"]
        (0.5, 0.5, 0.5)
    """
    p = positive if positive.is_floating_point() else positive.double()
    batch = Batch(scores=None, probabilities=p, labels=labels, groups={attribute: codes},
                  group_values={attribute: list(names)})
    return cached_group_table(attribute, tuple(names), "binary").evaluate(batch)


def batch_group_table(batch: Batch, attribute: str, decision: float = 0.0
                      ) -> dict[str, dict[str, float | None]]:
    """The per-group table of ``batch`` by its label kind (:class:`~fairgames.rates.GroupTable`):
    classification rates for a binary target (predicted positive: score > ``decision``),
    losses for a real one.

    Example:
        >>> import torch
        >>> b = Batch(scores=torch.tensor([0.2, 0.9]), labels=torch.tensor([0.0, 1.0]),
        ...           label_kind="real", groups={"g": torch.tensor([0, 1])},
        ...           group_values={"g": ["a", "b"]})
        >>> round(batch_group_table(b, "g")["overall"]["mse"], 4)
        0.025
    """
    if decision and batch.label_kind == "binary":
        batch = dataclasses.replace(batch, scores=batch.scores - decision)
    if batch.label_kind == "binary" and batch.scores is not None:
        # the table reads 1[s > 0] alone: the expected prediction gives its values, bit for
        # bit, without the surrogate bounds of the scores' pass
        p = expected_prediction(batch.scores, batch.mixture_weights)
        if p is not None:
            batch = dataclasses.replace(batch, scores=None, mixture_weights=None,
                                        probabilities=p)
    return cached_group_table(attribute, tuple(batch.group_values[attribute]),
                              batch.label_kind, tuple(batch.unlabeled_sources)).evaluate(batch)


def parity_gaps(scores: torch.Tensor, codes: torch.Tensor, names: Sequence[str],
                thresholds: Sequence[float]) -> dict[str, float]:
    """The compact statistical-parity scalars TensorBoard shows beside λ (paper 003): the
    worst ``|γ̂_{a,z}| = |P[f ≥ z | A=a] − P[f ≥ z]|`` over the thresholds (``worst_gap``) and
    each group's own worst (``<value>/max_gap``), exact on these scores; soft groups (a
    membership matrix) have none.

    Example:
        >>> parity_gaps(torch.tensor([0.1, 0.9, 0.9, 0.9]), torch.tensor([0, 0, 1, 1]),
        ...             ["a", "b"], [0.5])
        {'worst_gap': 0.25, 'a/max_gap': 0.25, 'b/max_gap': 0.25}
    """
    if codes.is_floating_point():
        return {}
    t = threshold_rates(scores, codes, len(names), torch.tensor(list(thresholds)))
    per_group = t.gaps.abs().amax(1).tolist()
    out = {"worst_gap": t.disparity()}
    out.update({f"{v}/max_gap": g for v, g in zip(names, per_group, strict=True)
                if g == g})                                    # NaN: a group absent here
    return out
