"""Threshold baselines on a score (e.g. a logistic model's η(x)): PostShift's per-group
thresholds and the plug-in F-measure threshold (UncF1).

* :class:`PostShift` — Hardt et al. (2016)-style post-processing: one threshold per group,
  chosen so that each group's positive prediction rate hits a target (by default the overall
  base rate ``p``, which makes every ``KLD(p, p̂_G)`` ≈ 0: paper 000's Table 3 baseline).
* :func:`best_f1_threshold` / :class:`PluginF1` — the plug-in classifier ``η(x) > t`` with
  ``t`` tuned to maximise the F-measure (paper 000's Table 4 UncF1; Narasimhan et al. 2014).

A row is predicted positive iff its score is **strictly above** its threshold.

Example:
    >>> import torch
    >>> scores = torch.tensor([0.1, 0.4, 0.6, 0.9, 0.2, 0.3, 0.8, 0.7])
    >>> groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    >>> ps = PostShift().fit(scores, groups, target_rates=[0.5, 0.25])
    >>> ps.predict(scores, groups).tolist()
    [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    >>> best_f1_threshold(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0]))[1]
    0.8
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .checks import ArrayLike, BaselineError, as_features, as_groups, as_labels, as_vector
from .logistic import LogisticRegression


def _candidate_thresholds(s: torch.Tensor) -> torch.Tensor:
    """Thresholds giving every distinct "top-k" prediction set: below the minimum, the
    midpoints between consecutive distinct scores, and the maximum (nobody positive)."""
    u = torch.unique(s)                                    # sorted ascending
    mids = (u[1:] + u[:-1]) / 2
    return torch.cat([u[:1] - 1.0, mids, u[-1:]])


class PostShift:
    """Per-group thresholds hitting target positive prediction rates.

    ``fit`` picks, for each group ``G``, the threshold whose rate ``P(score > t | G)`` on the
    fitting data is closest to the group's target (ties: the larger threshold). Targets are
    ``target_rates`` (one per group) or, by default, the overall base rate of ``labels``.

    Attributes:
        thresholds: ``[G]`` float64 thresholds after ``fit``.
        targets: ``[G]`` the target rates.
    """

    def __init__(self) -> None:
        self.thresholds: torch.Tensor | None = None
        self.targets: torch.Tensor | None = None

    def fit(self, scores: ArrayLike, groups: ArrayLike, labels: ArrayLike | None = None, *,
            target_rates: Sequence[float] | torch.Tensor | None = None,
            n_groups: int | None = None) -> PostShift:
        """Fit thresholds on ``scores`` ``[N]`` and group codes ``[N]`` (0..G−1).

        Args:
            labels: 0/1 labels; their mean is every group's target when ``target_rates`` is
                not given.
            target_rates: one target positive rate per group, in [0, 1].
            n_groups: the number of groups (default: largest code + 1).
        """
        s = as_vector(scores, "scores")
        codes, count = as_groups(groups, len(s), n_groups)
        if target_rates is None:
            if labels is None:
                raise BaselineError("PostShift.fit needs labels (target = base rate) or "
                                    "target_rates")
            targets = torch.full((count,), float(as_labels(labels, len(s)).mean()),
                                 dtype=torch.float64)
        else:
            targets = as_vector(target_rates, "target_rates", n=count)
            if ((targets < 0) | (targets > 1)).any():
                raise BaselineError(f"target_rates must lie in [0, 1], got {targets.tolist()}")
        thresholds = torch.empty(count, dtype=torch.float64)
        for g in range(count):
            sg = s[codes == g]
            cand = _candidate_thresholds(sg)
            rates = (sg[None, :] > cand[:, None]).double().mean(1)
            gap = (rates - targets[g]).abs()
            best = torch.nonzero(gap == gap.min()).flatten()[-1]
            thresholds[g] = cand[best]
        self.thresholds, self.targets = thresholds, targets
        return self

    def predict(self, scores: ArrayLike, groups: ArrayLike) -> torch.Tensor:
        """0/1 predictions ``[N]`` (float64): ``score > thresholds[group]``."""
        if self.thresholds is None:
            raise BaselineError("PostShift is not fitted; call fit() first")
        s = as_vector(scores, "scores")
        codes, _ = _codes_for_predict(groups, len(s), len(self.thresholds))
        return (s > self.thresholds[codes]).double()


def _codes_for_predict(groups: ArrayLike, n: int, count: int) -> tuple[torch.Tensor, int]:
    g = as_vector(groups, "groups", n=n)
    if (g != g.round()).any() or (g < 0).any() or (g >= count).any():
        raise BaselineError(f"groups must be integer codes 0..{count - 1} (as when fitted)")
    return g.long(), count


def best_f1_threshold(scores: ArrayLike, labels: ArrayLike) -> tuple[float, float]:
    """The threshold ``t`` maximising the F-measure of ``score > t``, and that F-measure.

    Scans every distinct top-k set (``O(N log N)``); among ties, the largest threshold.

    Raises:
        BaselineError: no positive label (the F-measure is 0 for every threshold).
    """
    s = as_vector(scores, "scores")
    y = as_labels(labels, len(s))
    positives = float(y.sum())
    if positives == 0:
        raise BaselineError("best_f1_threshold: the labels have no positive example, so every "
                            "threshold has F-measure 0")
    order = torch.argsort(s, descending=True, stable=True)
    s_sorted, y_sorted = s[order], y[order]
    tp = torch.cumsum(y_sorted, 0)                          # top-k predicted positive
    k = torch.arange(1, len(s) + 1, dtype=torch.float64)
    f1 = 2 * tp / (k + positives)
    # Only cut where the next score is strictly lower (a threshold cannot split ties).
    cut = torch.ones(len(s), dtype=torch.bool)
    cut[:-1] = s_sorted[1:] < s_sorted[:-1]
    f1 = torch.where(cut, f1, torch.full_like(f1, -1.0))
    best_value = f1.max()
    i = int(torch.nonzero(f1 == best_value).flatten()[0])   # the smallest k: largest t
    t = float((s_sorted[i] + s_sorted[i + 1]) / 2) if i + 1 < len(s) else float(s_sorted[i] - 1)
    return t, float(best_value)


class PluginF1:
    """UncF1: a logistic model η(x) thresholded at the F-measure-maximising ``t``.

    Args:
        l2: the logistic model's L2 penalty.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> train = make_synthetic(n=800, d=4, seed=0).train
        >>> clf = PluginF1().fit(train.features, train.labels)
        >>> 0.0 < clf.threshold < 1.0, clf.predict(train.features).shape
        (True, torch.Size([480]))
    """

    def __init__(self, l2: float = 1e-4) -> None:
        self.model = LogisticRegression(l2=l2)
        self.threshold: float | None = None
        self.fmeasure: float | None = None

    def fit(self, features: ArrayLike, labels: ArrayLike, *,
            tune_features: ArrayLike | None = None,
            tune_labels: ArrayLike | None = None) -> PluginF1:
        """Fit η on ``features``/``labels``; tune the threshold on ``tune_*`` (e.g. a
        validation split) when given, else on the training data."""
        x = as_features(features)
        self.model.fit(x, labels)
        if (tune_features is None) != (tune_labels is None):
            raise BaselineError("give both tune_features and tune_labels, or neither")
        tx = x if tune_features is None else as_features(tune_features)
        ty = labels if tune_labels is None else tune_labels
        self.threshold, self.fmeasure = best_f1_threshold(self.model.predict_proba(tx), ty)
        return self

    def predict_proba(self, features: ArrayLike) -> torch.Tensor:
        """η(x) ``[N]``."""
        return self.model.predict_proba(features)

    def predict(self, features: ArrayLike) -> torch.Tensor:
        """0/1 predictions ``[N]`` (float64)."""
        if self.threshold is None:
            raise BaselineError("PluginF1 is not fitted; call fit() first")
        return (self.model.predict_proba(features) > self.threshold).double()
