"""Percentile bootstrap intervals of metrics over a whole split: the one interval method.

A resample draws, within each stratum (protected group × label), as many rows as the stratum
has, with replacement. A metric's value on a resample is its exact value on the split
reweighted by each row's number of draws, evaluated by the plan of
:class:`~fairgames.rates.ExactEvaluator`; its interval at level ``1 − α`` is the ``α/2`` and
``1 − α/2`` quantiles of the resampled values (:func:`percentile_interval`). A stochastic
model's row carries its *expected* prediction ``Σ_r q_r 1[s_r > 0]`` (not a sampled member),
so the interval reflects the data's sampling noise only.

Why it is cheap: a leaf's true value is a ratio of weighted sums of per-example columns
(weight, weight·prediction, losses; :meth:`RateEvaluator.example_columns`) over the cells of
the model-independent factors (label, group, ...). Rows of one stratum with the same cell and
the same columns under every solution scored are interchangeable: a *type*. Drawing ``n_s``
rows of a stratum with replacement draws its types from a multinomial with probabilities
``rows of the type / n_s`` (:func:`multinomial_counts`: one draw per type and resample, not
one per row). Unweighted data and 0/1 or mixture predictions have few types (per cell, at
most the distinct expected predictions), so 1 000 resamples of a 30 000-row split cost
milliseconds; real weights or group losses make every row a type and the cost that of
per-row draws. The types' counts times their columns give every resample's cell sums in one
product, the plan's matrix maps them to leaf values
(:meth:`RateEvaluator.leaf_values_of_sums`), and the expression graph (ratios, ψ such as KLD)
runs on ``[n]``-vectors of leaf values. Solutions scored in one call share the resamples
(common random numbers).

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, ExactEvaluator, group, true_positive_rate
    >>> g = torch.Generator().manual_seed(0)
    >>> n = 400
    >>> batch = Batch(scores=torch.randn(n, generator=g),
    ...               labels=(torch.rand(n, generator=g) < 0.5).float(),
    ...               groups={"g": torch.randint(0, 2, (n,), generator=g)},
    ...               group_values={"g": ["a", "b"]})
    >>> gap = true_positive_rate(group("g", "a")) - true_positive_rate(group("g", "b"))
    >>> boot = Bootstrap({"gap": gap})
    >>> strata = stratum_codes(batch.labels, batch.groups["g"])
    >>> (values,) = boot.resample([batch], strata, resamples=1000, seed=0)
    >>> lo, hi = percentile_interval(values["gap"])
    >>> point = ExactEvaluator({"gap": gap}).evaluate(batch)["gap"]
    >>> lo < point < hi, hi - lo < 0.3
    (True, True)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batch import Batch, split_batches
from .errors import RatesError
from .evaluator import RateEvaluator
from .expressions import Constraint, Expression, mapping_lookup

# Resamples drawn and evaluated at once: at most this many counts (resamples × types).
CHUNK_ELEMENTS = 1 << 22
# An interval is reported only when at least this share of the resamples define the metric
# (a ratio whose denominator a resample empties, e.g. a group's predicted positives).
MIN_DEFINED = 0.5


def stratum_codes(labels: torch.Tensor, codes: torch.Tensor | None = None,
                  binary: bool = True) -> torch.Tensor:
    """Stratum of each row: protected group × label (``codes`` ``[N]`` hard group codes;
    ``None``, or soft memberships ``[N, G]``, stratify by label only; ``binary=False``: a
    real-valued label does not stratify).

    Example:
        >>> stratum_codes(torch.tensor([0.0, 1.0, 1.0]), torch.tensor([0, 0, 2])).tolist()
        [0, 1, 5]
    """
    y = (labels > 0.5).long() if binary else torch.zeros_like(labels, dtype=torch.long)
    if codes is None or codes.dim() != 1:
        return y
    return codes.long() * 2 + y


def multinomial_counts(sizes: torch.Tensor, strata: torch.Tensor, resamples: int,
                       rng: np.random.Generator) -> torch.Tensor:
    """Draw counts ``[resamples, K]`` (float64, on ``sizes``' device) of ``K`` types: per
    resample and stratum, ``n_s`` draws with replacement among the stratum's ``n_s`` rows
    (``sizes[k]`` of them of type ``k``; ``strata`` ``[K]`` gives each type's stratum), i.e.
    a multinomial with probabilities ``sizes[k] / n_s`` (numpy's exact sampler).

    Example:
        >>> c = multinomial_counts(torch.tensor([2.0, 1.0, 3.0]), torch.tensor([0, 0, 1]), 4,
        ...                        np.random.default_rng(0))
        >>> c[:, :2].sum(1).tolist(), c[:, 2].tolist()
        ([3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0])
    """
    if resamples < 1:
        raise RatesError(f"resamples must be a positive integer, got {resamples}")
    n = sizes.detach().cpu().to(torch.float64).numpy()
    s = strata.detach().cpu().numpy()
    out = np.zeros((resamples, n.shape[0]))
    for stratum in np.unique(s):
        members = np.nonzero(s == stratum)[0]
        total = n[members].sum()
        out[:, members] = rng.multinomial(int(round(total)), n[members] / total,
                                          size=resamples)
    return torch.from_numpy(out).to(sizes.device)


def percentile_interval(values: torch.Tensor, level: float = 0.95
                        ) -> tuple[float, float] | None:
    """The percentile interval ``[q(α/2), q(1 − α/2)]`` of resampled values (``α = 1 −
    level``; linear interpolation between order statistics, as ``numpy.quantile``). Only
    finite values count; ``None`` when fewer than :data:`MIN_DEFINED` of them are finite.

    Example:
        >>> [round(v, 9) for v in percentile_interval(torch.arange(201.0))]
        [5.0, 195.0]
    """
    if not 0.0 < level < 1.0:
        raise RatesError(f"level must lie in (0, 1), got {level}")
    finite = values[torch.isfinite(values)].to(torch.float64)
    if finite.numel() == 0 or finite.numel() < MIN_DEFINED * values.numel():
        return None
    alpha = 1.0 - level
    q = torch.tensor([alpha / 2.0, 1.0 - alpha / 2.0], dtype=torch.float64,
                     device=finite.device)
    lo, hi = torch.quantile(finite, q).tolist()
    return lo, hi


@dataclass
class _Columns:
    """A split's per-example columns ``[N, C']`` (true values only), hard cells ``[N]``
    and one batch of it (the plan's layout)."""

    values: torch.Tensor
    code: torch.Tensor
    layout: Batch


class Bootstrap:
    """Resampled exact values of named metrics (expressions, or constraints: their ``g``).

    Args:
        metrics: name (any hashable) → an expression or a constraint.

    Example:
        >>> import torch
        >>> from fairgames.rates import Batch, positive_prediction_rate
        >>> boot = Bootstrap({"ppr": positive_prediction_rate()})
        >>> b = Batch(scores=torch.tensor([1.0, -1.0, 1.0, -1.0]), labels=torch.zeros(4))
        >>> counts = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 1.0, 0.0]],
        ...                       dtype=torch.float64)
        >>> boot.values([b], counts)[0]["ppr"].tolist()   # the split, then a resample
        [0.5, 1.0]
    """

    def __init__(self, metrics: Mapping[Hashable, Expression | Constraint]) -> None:
        self.metrics = dict(metrics)
        if not self.metrics:
            raise RatesError("Bootstrap needs at least one metric")
        self._expressions: dict[Hashable, Expression] = {}
        for name, m in self.metrics.items():
            if isinstance(m, Constraint):
                m = m.expression
            if not isinstance(m, Expression):
                raise RatesError(f"a bootstrap metric must be an Expression or a Constraint, "
                                 f"got {type(m).__name__} for {name!r}")
            self._expressions[name] = m
        self.rates = RateEvaluator(list(self._expressions.values())).eval()

    def values(self, splits: Sequence[Batch | Iterable[Batch]], counts: torch.Tensor
               ) -> list[dict[Hashable, torch.Tensor]]:
        """Each metric's value ``[n]`` under each of ``n`` row weightings ``counts`` ``[n,
        N]`` (e.g. bootstrap draws per row), for every scoring in ``splits`` (the same ``N``
        rows, e.g. several solutions on one split; each one batch or its chunks in row
        order)."""
        cols = self._all_columns(splits)
        n_rows = cols[0].code.shape[0]
        if counts.dim() != 2 or counts.shape[1] != n_rows:
            raise RatesError(f"counts must be [n, {n_rows}], got {tuple(counts.shape)}")
        cells = self.rates.hard_cells(cols[0].layout)
        per_row = [_by_cell(c.values, c.code, cells) for c in cols]
        counts = counts.to(device=cols[0].code.device, dtype=torch.float64)
        return [self._metrics(c.layout, counts @ x) for c, x in zip(cols, per_row, strict=True)]

    def resample(self, splits: Sequence[Batch | Iterable[Batch]], strata: torch.Tensor, *,
                 resamples: int = 1000, seed: int = 0) -> list[dict[Hashable, torch.Tensor]]:
        """Each metric's values on ``resamples`` stratified bootstrap resamples of the split
        (strata ``[N]``: :func:`stratum_codes`), for every scoring in ``splits`` (all on the
        same resamples). Seeded: the same seed, rows and scorings give the same values."""
        cols = self._all_columns(splits)
        code = cols[0].code
        if strata.shape != code.shape:
            raise RatesError(f"strata must be [{code.shape[0]}] (one per row), got "
                             f"{tuple(strata.shape)}")
        width = cols[0].values.shape[1]
        key = torch.cat([strata.to(code.device)[:, None].to(torch.float64),
                         code[:, None].to(torch.float64), *[c.values for c in cols]], dim=1)
        ids = _type_ids(key)
        sizes = torch.bincount(ids).to(torch.float64)
        first = torch.full_like(sizes, key.shape[0], dtype=torch.long).scatter_reduce(
            0, ids, torch.arange(key.shape[0], device=ids.device), "amin")
        types = key[first]
        cells = self.rates.hard_cells(cols[0].layout)
        type_code = types[:, 1].long()
        # every scoring's columns side by side: one product gives all their cell sums
        per_type = torch.cat([_by_cell(types[:, 2 + i * width: 2 + (i + 1) * width], type_code,
                                       cells) for i in range(len(cols))], dim=1)
        rng = np.random.default_rng(int(seed))
        chunk = max(1, CHUNK_ELEMENTS // max(1, types.shape[0]))
        parts: list[list[dict[Hashable, torch.Tensor]]] = []
        for start in range(0, resamples, chunk):
            counts = multinomial_counts(sizes, types[:, 0], min(chunk, resamples - start), rng)
            sums = (counts @ per_type).chunk(len(cols), dim=1)
            parts.append([self._metrics(c.layout, x) for c, x in zip(cols, sums, strict=True)])
        return [{name: torch.cat([p[i][name] for p in parts]) for name in self._expressions}
                for i in range(len(cols))]

    def _all_columns(self, splits: Sequence[Batch | Iterable[Batch]]) -> list[_Columns]:
        if not splits:
            raise RatesError("Bootstrap needs at least one scoring of the split")
        cols = [self._columns(s) for s in splits]
        code = cols[0].code
        if any(c.code.shape != code.shape or not torch.equal(c.code, code) for c in cols[1:]):
            raise RatesError("every scoring of a split must have the same rows (labels, groups)")
        return cols

    def _columns(self, split: Batch | Iterable[Batch]) -> _Columns:
        first, batches = split_batches(split, "Bootstrap")
        self.rates.to(first.device)
        parts = [self.rates.example_columns(b, bounds=False) for b in batches]
        return _Columns(torch.cat([v for v, _ in parts]), torch.cat([c for _, c in parts]),
                        first)

    def _metrics(self, layout: Batch, sums: torch.Tensor) -> dict[Hashable, torch.Tensor]:
        """Each metric's ``[n]`` values from ``n`` cell-sum vectors."""
        true, _ = self.rates.leaf_values_of_sums(layout, sums)
        lookup = mapping_lookup({lf.key: true[j] for j, lf in enumerate(self.rates.leaves)})
        n = sums.shape[0]
        return {name: torch.broadcast_to(e.evaluate(lookup), (n,)).to(torch.float64)
                for name, e in self._expressions.items()}


def _type_ids(key: torch.Tensor) -> torch.Tensor:
    """Each row's type ``[N]``: ``0..K-1`` numbering the distinct rows of ``key`` ``[N, C]``
    in lexicographic order (the first column most significant). Column by column with 1-d
    ``unique`` (a sort each), much cheaper than ``unique(dim=0)`` on a float matrix."""
    ids = torch.zeros(key.shape[0], dtype=torch.long, device=key.device)
    for j in range(key.shape[1]):
        values, inverse = torch.unique(key[:, j], return_inverse=True)
        if values.numel() > 1:
            _, ids = torch.unique(ids * values.numel() + inverse, return_inverse=True)
    return ids


def _by_cell(values: torch.Tensor, code: torch.Tensor, cells: int) -> torch.Tensor:
    """``[M, cells·C']``: row ``i``'s columns placed in its cell's block (zeros elsewhere),
    the layout of the plan's cell sums."""
    m, width = values.shape
    out = torch.zeros(m, cells, width, dtype=torch.float64, device=values.device)
    out[torch.arange(m, device=values.device), code] = values.to(torch.float64)
    return out.reshape(m, cells * width)
