"""Whole-split evaluation of a deterministic model or a stochastic mixture of models.

A solution is evaluated with TRUE rates over a whole split (float64 counts through
:meth:`~fairgames.rates.RateEvaluator.evaluate_split`): the problem's objective, every
constraint's value ``g`` (of ``g <= 0``; positive is a violation) and violation, the error
rate, and a per-group table of common rates. For a stochastic model (weights ``q`` over ``R``
members) every rate is the exact mixture expectation ``Σ_r q_r R(θ_r)`` and a metric is
evaluated at those rates, as paper 000 defines a stochastic model's metric.

Example:
    >>> import torch
    >>> from fairgames.rates import error_rate, positive_prediction_rate, group
    >>> from fairgames.data import make_synthetic
    >>> ds = make_synthetic(n=200, seed=0).test
    >>> view = SolutionEvaluator(error_rate(), [(positive_prediction_rate(group("group", "1"))
    ...                                           >= 0.3).named("ppr1")], "group")
    >>> out = view.evaluate(ds, torch.ones(len(ds)))   # predicts everyone positive
    >>> out["constraints"]["ppr1"], round(out["error"], 4) == round(1 - float(ds.labels.mean()), 4)
    ({'value': -0.7, 'violation': 0.0}, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.rates import Constraint, Expression, RateEvaluator, error_rate

from .data import chunks, make_batch

GROUP_RATES = ("count", "share", "base_rate", "positive_rate", "tpr", "fpr", "error",
               "precision", "fmeasure", "kld")


class SolutionEvaluator:
    """Evaluates the objective, constraints, error and per-group rates of a solution.

    Args:
        objective: the problem's objective expression.
        constraints: the problem's named constraints.
        protected: the attribute whose groups the table lists.
        chunk: rows per evaluation chunk.
    """

    def __init__(self, objective: Expression, constraints: Sequence[Constraint],
                 protected: str, chunk: int = 65536) -> None:
        self.objective = objective
        self.constraints = list(constraints)
        self.protected = protected
        self.chunk = int(chunk)
        self.error = error_rate()
        self.evaluator = RateEvaluator([objective, *self.constraints, self.error]).eval()

    def evaluate(self, ds: TabularDataset, scores: torch.Tensor,
                 mixture_weights: torch.Tensor | None = None,
                 baseline_scores: torch.Tensor | None = None) -> dict[str, Any]:
        """Metrics of scores ``[N]`` (a deterministic model) or ``[R, N]`` with
        ``mixture_weights [R]`` (a stochastic model) on the split ``ds``."""
        self.evaluator.to(ds.device)
        n = len(ds)
        parts = []
        for idx in chunks(n, self.chunk, ds.device):
            s = scores[..., idx]
            parts.append(make_batch(ds, s, idx, baseline_scores=baseline_scores,
                                    mixture_weights=mixture_weights))
        values = self.evaluator.evaluate_split(parts)
        out: dict[str, Any] = {
            "objective": float(self.objective.evaluate(values)),
            "error": float(self.error.evaluate(values)),
            "constraints": {},
        }
        for c in self.constraints:
            out["constraints"][c.name] = {"value": float(c.value(values)),
                                          "violation": float(c.violation(values))}
        if mixture_weights is None:
            positive = (scores > 0).double()
        else:
            positive = (mixture_weights.double()[:, None] * (scores > 0).double()).sum(0)
        out["groups"] = group_table(ds, positive, self.protected)
        return out


def max_violation(metrics: dict[str, Any]) -> float:
    """The largest constraint violation of :meth:`SolutionEvaluator.evaluate`'s output."""
    return max((c["violation"] for c in metrics["constraints"].values()), default=0.0)


def group_table(ds: TabularDataset, positive: torch.Tensor, attribute: str
                ) -> dict[str, dict[str, float | None]]:
    """Per-group rates of predictions ``positive`` (``P(ŷ = 1)`` per row, in [0, 1]) on ``ds``.

    Keys are ``"overall"`` and ``"<attribute>=<value>"``; see :func:`group_rates`.
    """
    return group_rates(ds.labels, ds.groups[attribute], ds.group_names[attribute], attribute,
                       positive)


def group_rates(labels: torch.Tensor, codes: torch.Tensor, names: Sequence[str], attribute: str,
                positive: torch.Tensor) -> dict[str, dict[str, float | None]]:
    """Per-group rates (one host sync): ``count``, ``share``, ``base_rate``,
    ``positive_rate``, ``tpr``, ``fpr``, ``error``, ``precision``, ``fmeasure`` and ``kld``
    (KLD between the overall base rate and the group's positive rate), for ``"overall"`` and
    each ``"<attribute>=<value>"``. A rate with an empty denominator is ``None``.

    Example:
        >>> import torch
        >>> t = group_rates(torch.tensor([1., 0., 1., 1.]), torch.tensor([0, 0, 1, 1]),
        ...                 ["a", "b"], "g", torch.tensor([1., 1., 0., 1.]))
        >>> t["g=a"]["precision"], t["g=b"]["tpr"], t["overall"]["error"]
        (0.5, 0.5, 0.5)
    """
    y = labels.double()
    p = positive.double()
    base = float(y.mean())
    masks = [("overall", torch.ones_like(y, dtype=torch.bool))] + [
        (f"{attribute}={v}", codes == i) for i, v in enumerate(names)]
    stacked = torch.stack([m for _, m in masks]).double()             # [G+1, N]
    count = stacked.sum(1)
    pos = stacked @ y
    pred = stacked @ p
    tp = stacked @ (y * p)
    fp = stacked @ ((1 - y) * p)
    fn = stacked @ (y * (1 - p))
    vals = torch.stack([count, pos, pred, tp, fp, fn]).T.tolist()
    n = len(y)
    rows: dict[str, dict[str, float | None]] = {}
    for (key, _), (c, ps, pr, t, f, fneg) in zip(masks, vals, strict=True):
        rows[key] = {
            "count": c,
            "share": c / n,
            "base_rate": _div(ps, c),
            "positive_rate": _div(pr, c),
            "tpr": _div(t, ps),
            "fpr": _div(f, c - ps),
            "error": _div(f + fneg, c),
            "precision": _div(t, t + f),
            "fmeasure": _div(2 * t, 2 * t + f + fneg),
            "kld": _kld(base, _div(pr, c)),
        }
    return rows


def _div(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _kld(p: float, q: float | None) -> float | None:
    if q is None:
        return None
    t = torch.tensor([p, q], dtype=torch.float64)
    kl = (torch.xlogy(t[0], t[0]) - torch.xlogy(t[0], t[1]) + torch.xlogy(1 - t[0], 1 - t[0])
          - torch.xlogy(1 - t[0], 1 - t[1]))
    v = float(kl)
    return v if v == v and v != float("inf") else None
