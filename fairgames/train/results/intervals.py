"""Bootstrap intervals of every solution's constraints on every split.

The one interval method of fairgames (:class:`fairgames.rates.Bootstrap`): per split, ``n``
seeded resamples stratified by protected group × label (by group for a real-valued target);
every solution is scored on the same resamples; a stochastic model's row carries its expected
prediction ``Σ_r q_r 1[s_r > 0]``; the interval is the 2.5 % and 97.5 % percentiles of the
constraint's value ``g`` over the resamples. ``trainer.bootstrap`` sets ``n`` (0: none).

Example:
    >>> import torch
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.rates import group, true_positive_rate
    >>> splits = make_synthetic(n=600, d=3, seed=0)
    >>> eo = (true_positive_rate(group("group", 1)) >= true_positive_rate() - 0.05).named("eo")
    >>> out = constraint_intervals([eo], {"final": torch.nn.Linear(3, 1)}, splits, "group",
    ...                            resamples=200, seed=0)
    >>> lo, hi = out["final"]["test"]["eo"]
    >>> lo <= hi
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fairgames.data import DatasetSplits, TabularDataset
from fairgames.game.solutions import StochasticModel
from fairgames.rates import Bootstrap, Constraint, percentile_interval, stratum_codes

from ..data import chunks, make_batch, predict_scores

LEVEL = 0.95
Interval = list[float] | None


def constraint_intervals(constraints: Sequence[Constraint],
                         solutions: Mapping[str, torch.nn.Module], splits: DatasetSplits,
                         protected: str,
                         baselines: Mapping[str, torch.Tensor] | None = None, *,
                         resamples: int = 1000, seed: int = 0, chunk: int = 65536,
                         level: float = LEVEL) -> dict[str, dict[str, dict[str, Interval]]]:
    """``{solution: {split: {constraint: [lo, hi] or None}}}``: the percentile bootstrap
    interval of each constraint's ``g`` (``None`` where fewer than half of the resamples
    define it). ``solutions`` are modules (scores ``[B]``) or
    :class:`~fairgames.game.solutions.StochasticModel` mixtures; ``baselines`` are the churn
    baseline's scores per split. Split ``i`` (train, validation, test) is resampled with seed
    ``3·seed + i``."""
    boot = Bootstrap({c.name: c for c in constraints})
    out: dict[str, dict[str, dict[str, Interval]]] = {name: {} for name in solutions}
    for i, (split, ds) in enumerate(splits.items()):
        base = baselines.get(split) if baselines else None
        scorings = [_batches(ds, model, base, chunk) for model in solutions.values()]
        strata = stratum_codes(ds.labels, ds.groups[protected], ds.label_kind == "binary")
        values = boot.resample(scorings, strata, resamples=resamples, seed=3 * int(seed) + i)
        for name, per in zip(solutions, values, strict=True):
            out[name][split] = {}
            for c in constraints:
                interval = percentile_interval(per[c.name], level)
                out[name][split][c.name] = list(interval) if interval is not None else None
    return out


@torch.no_grad()
def _batches(ds: TabularDataset, model: torch.nn.Module, baseline: torch.Tensor | None,
             chunk: int) -> list:
    """The split's batches under ``model``: its scores, or a mixture's member scores and
    weights (each row then carries its expected prediction)."""
    weights = (model.weights.to(torch.float32) if isinstance(model, StochasticModel)
               else None)
    scores = predict_scores(model, ds.features, chunk)
    return [make_batch(ds, scores[..., idx], idx, baseline_scores=baseline,
                       mixture_weights=weights)
            for idx in chunks(len(ds), chunk, ds.device)]


def attach_intervals(results: dict, intervals: Mapping[str, Mapping[str, Mapping[str, Interval]]]
                     ) -> None:
    """Write each interval into ``results[solution][split]["constraints"][name]["interval"]``
    (``None`` for a solution or split without one)."""
    for solution, per_split in results.items():
        for split, metrics in per_split.items():
            found = intervals.get(solution, {}).get(split, {})
            for name, entry in metrics["constraints"].items():
                entry["interval"] = found.get(name)
