"""Evaluating candidate solutions: the exact objective and constraint rows of every member of
a stochastic model on a whole split, the input of :mod:`.lp`'s choice.

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate
    >>> from fairgames.game.solutions import SnapshotRecorder
    >>> model = torch.nn.Linear(1, 1)
    >>> rec = SnapshotRecorder(model, every=1, capacity=2)
    >>> for bias in (-1.0, 1.0):
    ...     with torch.no_grad():
    ...         _ = model.weight.zero_(); _ = model.bias.fill_(bias)
    ...     _ = rec.step()
    >>> x, y = torch.zeros(4, 1), torch.tensor([1.0, 1.0, 0.0, 1.0])
    >>> values = evaluate_candidates(rec.to_stochastic_model(), error_rate(), [], x, y)
    >>> values.objectives.tolist()
    [0.75, 0.25]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fairgames.rates import Batch, Constraint, Expression, RateEvaluator

from .stochastic import StochasticModel


@dataclass
class CandidateValues:
    """Objective ``[R]`` and constraint rows ``[R, m]`` (``≤ 0`` form) of the candidates."""

    objectives: np.ndarray
    constraints: np.ndarray
    names: list[str]


def evaluate_candidates(model: StochasticModel, objective: Expression | None,
                        constraints: Sequence[Constraint], features: torch.Tensor,
                        labels: torch.Tensor, *, chunk_size: int = 8192,
                        evaluator: RateEvaluator | None = None,
                        **batch_kwargs: Any) -> CandidateValues:
    """Exact (float64, whole-split) objective and constraint values of every member.

    ``batch_kwargs`` are :class:`fairgames.rates.Batch` arguments; per-example tensors (and
    dicts of them, such as ``groups``) are sliced into chunks of ``chunk_size`` along with the
    features. An equality constraint ``g == 0`` gives two rows, ``g`` and ``−g``.
    """
    items: list[Expression | Constraint] = list(constraints)
    if objective is not None:
        items.insert(0, objective)
    if not items:
        raise ValueError("nothing to evaluate: give an objective or constraints")
    ev = evaluator if evaluator is not None else RateEvaluator(items)
    names: list[str] = []
    for i, c in enumerate(constraints):
        name = c.name or f"constraint_{i}"
        names += [name] if c.sense == "<=" else [f"{name}:+", f"{name}:-"]
    objs, rows = [], []
    for r in range(len(model)):
        values = ev.evaluate_split(_chunks(model, r, features, labels, chunk_size, batch_kwargs))
        objs.append(float(objective.evaluate(values)) if objective is not None else 0.0)
        row: list[float] = []
        for c in constraints:
            v = float(c.value(values))
            row += [v] if c.sense == "<=" else [v, -v]
        rows.append(row)
    return CandidateValues(np.asarray(objs), np.asarray(rows, dtype=np.float64).reshape(
        len(model), len(names)), names)


def _chunks(model: StochasticModel, r: int, features: torch.Tensor, labels: torch.Tensor,
            size: int, kwargs: Mapping[str, Any]) -> Iterator[Batch]:
    n = features.shape[0]
    if labels.shape[0] != n:
        raise ValueError(f"features have {n} rows but labels {labels.shape[0]}")

    def cut(v: Any, sl: slice) -> Any:
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n:
            return v[sl]
        if isinstance(v, Mapping):
            return {k: cut(x, sl) for k, x in v.items()}
        return v

    with torch.no_grad():
        for start in range(0, n, size):
            sl = slice(start, min(start + size, n))
            yield Batch(scores=model.member_scores(features[sl], r), labels=labels[sl],
                        **{k: cut(v, sl) for k, v in kwargs.items()})
