"""The value ``scripts/train.py`` hands to a Hydra sweeper (Optuna, Nevergrad, Ax, ...): a job's
score, lower is better, in the order ``trainer.tune=validation`` chooses by
(:func:`.tune.choose`), never reading test — a sweeper that read test would tune on it.

The score is in tiers, each above every value of the one before:

1. meets every constraint on **train** (where they are asked) and on validation: its
   **validation** objective;
2. meets them on train only: ``VALIDATION_MISS`` plus its largest validation violation;
3. misses one on train: ``INFEASIBLE`` plus its largest train violation;
4. nothing to score (stopped by ``trainer.stop_after``, an objective undefined on validation):
   ``UNSCORED``.

Within a tier the nearer is better, so a sampler still sees a slope. Every run has a validation
split (the papers' recipes hold one out of their training rows; an empty one is refused when
the data loads), so a sweeper never falls back to train or test.

Example:
    >>> m = {"objective": 0.2, "constraints": {"c": {"violation": -0.01}}}
    >>> score({"solutions": {"recommended": {"train": m, "validation": m}}})
    (0.2, None)
    >>> late = {"objective": 0.1, "constraints": {"c": {"violation": 0.03}}}
    >>> score({"solutions": {"recommended": {"train": late, "validation": late}}})[0]
    2000000.03
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .tune import TRAIN_SLACK, _violations, deployable_solution

# Above any objective the catalog's problems reach: rates, losses and their ratios are O(1),
# and so is a regression's error on standardised targets.
VALIDATION_MISS = 1.0e6
INFEASIBLE = 2.0e6
UNSCORED = 3.0e6


def score(results: Mapping[str, Any] | None) -> tuple[float, str | None]:
    """``(value for the sweeper, a warning or None)`` for a finished run's ``results.json``
    content (``None``: the run produced none)."""
    if results is None:
        return UNSCORED, "the run finished no solution to score: it scores as infeasible"
    per_split = results["solutions"][deployable_solution(results)]
    on_train = _worst(per_split["train"])
    if on_train > TRAIN_SLACK:
        return INFEASIBLE + min(on_train, VALIDATION_MISS), None
    on_validation = _worst(per_split["validation"])
    if on_validation > 0.0:
        return VALIDATION_MISS + min(on_validation, VALIDATION_MISS), None
    objective = per_split["validation"]["objective"]
    if objective is None or not math.isfinite(objective):
        return UNSCORED, "the objective is undefined on validation: the run scores as infeasible"
    return float(objective), None


def _worst(metrics: Mapping[str, Any]) -> float:
    return max(_violations(metrics), default=0.0)   # undefined (no row): infinitely violated
