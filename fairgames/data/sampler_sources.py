"""Per-source minibatches (several data sets in one problem, paper 001): each step's batch is
every source's own batch, concatenated in the sources' order — all of a source's rows
(``batch_size`` ``None``) or a minibatch from its own seeded stream.

Sources are sampled at different rates, so a row of source ``s`` is weighted by
``(n_s / N) / (b_s / B)`` (``n_s`` its rows, ``b_s`` its rows per batch, ``N`` and ``B`` the
totals): a weighted rate over all sources is then an unbiased estimate of the rate over all
their rows, and the weights' mean over a batch is 1. A rate on one source (``source="d2"``)
is unchanged by them: they are constant within a source.

Example:
    >>> from fairgames.data import combine_sources, make_synthetic
    >>> ds = combine_sources({"d1": make_synthetic(n=50).train,
    ...                       "d2": make_synthetic(n=100, seed=1).train})
    >>> sampler = SourcesSampler(ds, {"d1": None, "d2": 20}, seed=0)
    >>> idx = next(sampler)
    >>> w = sampler.importance_weights(idx)      # (30/90)/(30/50) and (60/90)/(20/50)
    >>> ds.sources[idx].bincount().tolist(), [round(float(w[0]), 4), round(float(w[-1]), 4)]
    ([30, 20], [0.5556, 1.6667])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from .dataset import TabularDataset
from .errors import DataError
from .sampler import MinibatchSampler


class SourcesSampler:
    """Infinite iterator of ``[B]`` int64 row indices of a data set of several sources.

    Args:
        data: a :class:`TabularDataset` with ``sources``.
        batch_sizes: every source's rows per step (``None``: all its rows). A size at or
            above a source's rows is its full batch; a minibatched source drops the short
            last batch of its epochs, so every step's batch has the same size and weights.
        seed: the seed of every source's stream (each source's stream is its own: one
            source's batch size does not change another's batches).

    Attributes:
        balanced_by: always ``None`` (for the engine's checks); ``weighted``: ``True``.
    """

    balanced_by = None
    weighted = True

    def __init__(self, data: TabularDataset, batch_sizes: Mapping[str, int | None], *,
                 seed: int = 0) -> None:
        if data.sources is None or data.source_names is None:
            raise DataError("per-source batches need a data set of several sources "
                            "(fairgames.data.combine_sources)")
        names = list(data.source_names)
        unknown = sorted(set(batch_sizes) - set(names))
        missing = [n for n in names if n not in batch_sizes]
        if unknown or missing:
            raise DataError(f"per-source batch sizes name the sources {sorted(batch_sizes)}; "
                            f"the data's are {names} (unknown {unknown}, missing {missing})")
        src = data.sources
        self.device = src.device
        counts = torch.bincount(src.cpu(), minlength=len(names)).tolist()
        empty = [n for n, c in zip(names, counts, strict=True) if c == 0]
        if empty:
            raise DataError(f"source(s) {empty} have no training rows to sample")
        self.names, self.seed = names, int(seed)
        self.sizes = {n: batch_sizes[n] for n in names}
        order = torch.argsort(src.cpu(), stable=True)
        self._rows = [r.to(self.device) for r in torch.split(order, counts)]
        self._samplers: list[MinibatchSampler | None] = [
            None if (b is None or b >= c) else MinibatchSampler(
                c, b, seed=_stream_seed(self.seed, i), drop_last=True, device=self.device)
            for i, (b, c) in enumerate(zip(self.sizes.values(), counts, strict=True))]
        per_batch = [c if s is None else s.batch_size
                     for s, c in zip(self._samplers, counts, strict=True)]
        n, b = np.array(counts, dtype=np.float64), np.array(per_batch, dtype=np.float64)
        factor = (n / n.sum()) / (b / b.sum())      # (n_s / N) / (b_s / B)
        self._factor = torch.tensor(factor, dtype=torch.float32, device=self.device)
        self._sources = src
        self.steps = 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        return self

    def __next__(self) -> torch.Tensor:
        self.steps += 1
        return torch.cat([rows if s is None else rows[next(s)]
                          for rows, s in zip(self._rows, self._samplers, strict=True)])

    def importance_weights(self, index: torch.Tensor) -> torch.Tensor:
        """``[B]`` weights ``(n_s / N) / (b_s / B)`` of the rows ``index`` (a gather, no
        host sync)."""
        return self._factor[self._sources[index]]

    def state_dict(self) -> dict[str, Any]:
        """Every source's stream position (plain Python values)."""
        return {"kind": "sources", "seed": self.seed, "steps": self.steps,
                "sizes": dict(self.sizes), "rows": [len(r) for r in self._rows],
                "samplers": {n: (s.state_dict() if s is not None else None)
                             for n, s in zip(self.names, self._samplers, strict=True)}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next batches match the original run's.

        Raises:
            DataError: a state of other sources, sizes or rows (the differences named).
        """
        mine = {"sizes": dict(self.sizes), "rows": [len(r) for r in self._rows]}
        for key, value in mine.items():
            if state.get(key) != value:
                raise DataError(f"per-source sampler state has {key}={state.get(key)!r} but "
                                f"this run has {key}={value!r}")
        for name, s in zip(self.names, self._samplers, strict=True):
            if s is not None:
                s.load_state_dict(dict(state["samplers"][name]))
        self.seed, self.steps = int(state["seed"]), int(state["steps"])


def _stream_seed(seed: int, index: int) -> int:
    """Source ``index``'s own stream seed (31 bits, mixed from the run's seed)."""
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 4211, index])
               .generate_state(1)[0]) & 0x7FFFFFFF
