"""Baselines of paper 000's experiments, usable on any data set: a logistic class-probability
model, PostShift group thresholds (Hardt et al. 2016 style), the plug-in F-measure classifier
(UncF1) and COCO (Narasimhan 2018: Frank-Wolfe with a plug-in cost-sensitive oracle inside
gradient descent-ascent on the multipliers).

They work on plain tensors (features, 0/1 labels, integer group codes), so they need nothing
from the training engine. UncError — the unconstrained hinge model — is the engine's own
``problem=error`` run. Paper 003's regression baselines and FC are its family's:
:mod:`fairgames.fair_regression.baselines`.

Example:
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.baselines import LogisticRegression, PostShift
    >>> s = make_synthetic(n=1000, d=4, group_shift=1.0, seed=0)
    >>> tr = s.train
    >>> eta = LogisticRegression().fit(tr.features, tr.labels).predict_proba(tr.features)
    >>> ps = PostShift().fit(eta, tr.groups["group"], tr.labels)   # every group at P(y = 1)
    >>> pred = ps.predict(eta, tr.groups["group"])
    >>> [round(float(pred[tr.groups["group"] == g].mean()), 2) for g in (0, 1)]
    [0.35, 0.35]
"""

from .checks import BaselineError
from .coco import COCO, Confusion, kld
from .logistic import LogisticRegression
from .thresholds import PluginF1, PostShift, best_f1_threshold

__all__ = [
    "COCO",
    "BaselineError",
    "Confusion",
    "LogisticRegression",
    "PluginF1",
    "PostShift",
    "best_f1_threshold",
    "kld",
]
