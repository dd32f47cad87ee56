"""The bias-shifted baseline of paper 001 (Section 3 and Section 4.2's "thresholded SVM"): an
unconstrained model whose decision threshold is moved, after training, until a recall
constraint holds on the training data.

A model predicts positive iff its score is > 0. Shifting its bias by ``shift`` predicts
positive iff ``score > t`` with ``t = -shift``. Recall on train, #{y = 1, s > t} / #{y = 1}
(paper 001, Table 2: #TP / |D+|), only falls as ``t`` rises, so the constraint recall ≥ κ
holds exactly for ``t`` below the k-th largest positive score ``p_(k)``, k = ⌈κ |D+|⌉ (every
example scoring ``p_(k)``, ties included, is then predicted positive). :func:`recall_shift`
takes the largest such threshold up to the training data: every ``t`` in
``[the largest score below p_(k), p_(k))`` predicts the same on train, and it returns the
midpoint of that gap — the fewest positive predictions (the least cost in errors and false
positives, the paper's objective) that meet the recall floor.

From Python::

    shift = recall_shift(model(train.features), train.labels, 0.8)
    baseline = BiasShifted(model, shift.shift)      # a module: scores + shift

As a run's churn baseline, score the splits with ``BiasShifted`` and give them to
:func:`fairgames.train.fit` (``baseline_scores=``), or save it like any model.

Example:
    >>> import torch
    >>> s = torch.tensor([3.0, 2.0, 2.0, 1.0, 0.0, -1.0])
    >>> y = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    >>> r = recall_shift(s, y, 0.75)        # k = 3 of 4 positives: t just below p_(3) = 1
    >>> r.threshold, r.shift, r.recall
    (0.5, -0.5, 0.75)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class RecallShift:
    """A recall threshold found on train.

    Attributes:
        threshold: predict positive iff score > ``threshold``.
        shift: what to add to the model's bias (``-threshold``).
        recall: the recall on the data it was found on (≥ the target).
        needed: k, the positives that must score above the threshold (⌈κ |D+|⌉).
    """

    threshold: float
    shift: float
    recall: float
    needed: int


def recall_shift(scores: torch.Tensor, labels: torch.Tensor, target: float) -> RecallShift:
    """The largest threshold whose recall on ``(scores, labels)`` is at least ``target``.

    Args:
        scores: ``[N]`` model scores (positive iff > 0 before the shift).
        labels: ``[N]`` 0/1 labels.
        target: the recall floor κ, in (0, 1].

    Raises:
        ValueError: a target outside (0, 1], no positive example, or scores and labels of
            different lengths.

    Example:
        >>> import torch
        >>> recall_shift(torch.tensor([1.0, 1.0, -2.0]), torch.tensor([1, 1, 0]), 1.0).threshold
        -0.5
    """
    if not 0.0 < target <= 1.0:
        raise ValueError(f"recall target must lie in (0, 1], got {target}")
    s = scores.detach().reshape(-1).to("cpu", torch.float64)
    y = labels.detach().reshape(-1).to("cpu")
    if s.shape != y.shape:
        raise ValueError(f"scores {tuple(s.shape)} and labels {tuple(y.shape)} differ in length")
    pos = torch.sort(s[y > 0.5], descending=True).values
    if len(pos) == 0:
        raise ValueError("no positive example: recall is undefined; give data with positives")
    # k = ⌈κ |D+|⌉, robust to κ |D+| landing a rounding error above a whole number
    k = min(len(pos), max(1, math.ceil(target * len(pos) - 1e-9)))
    top = float(pos[k - 1])                      # p_(k): it and every tie must be positive
    below = s[s < top]
    threshold = (top + float(below.max())) / 2 if len(below) else top - 1.0
    recall = float((pos > threshold).double().mean())
    return RecallShift(threshold=threshold, shift=-threshold, recall=recall, needed=k)


class BiasShifted(nn.Module):
    """A model's scores plus a constant: the bias-shifted baseline as a module.

    Example:
        >>> import torch
        >>> m = BiasShifted(torch.nn.Identity(), 0.5)
        >>> m(torch.tensor([[-1.0], [0.0]])).flatten().tolist()
        [-0.5, 0.5]
    """

    def __init__(self, model: nn.Module, shift: float) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("shift", torch.tensor(float(shift)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x) + self.shift.to(x.device)
