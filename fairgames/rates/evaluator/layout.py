"""The fused pass's per-batch-layout work and reused tensors: each example's cell code, the
one-hot matrix and the subsets' weights, cached while the batch's factor tensors are the same
(:class:`_Layout`, :class:`Layouts`); the column buffer and its views; cached constants
(:class:`Constants`). A recorded step (:mod:`fairgames.game.capture`) clears the caches so that
they are made inside its graph."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..batch import Batch
from .plan import _Plan


def _version(x: torch.Tensor | None) -> int | None:
    """``x``'s in-place version counter (``0`` for an absent tensor); ``None`` for an
    inference tensor (made under ``torch.inference_mode()``, e.g. Lightning's validation),
    which has none: a layout over one is never reused, since it may change in place unseen.
    ``is_inference()`` reads a flag of the tensor, not its data: no host-device sync."""
    if x is None:
        return 0
    return None if x.is_inference() else x._version


@dataclass
class _Layout:
    """Per-batch-layout work of the fused pass, reused while the batch's factor tensors and
    weights are the same objects at the same version: each example's cell, the one-hot
    matrix, and the subsets' weights, proportions and running-estimate step."""

    plan: _Plan
    sources: list[torch.Tensor | None]
    versions: list[int | None]          # None: an inference tensor (never reused)
    code: torch.Tensor                  # [B] cell of each example
    weights: torch.Tensor | None        # [B] float32
    onehot: torch.Tensor | None         # [cells, B]: weight of example i in its cell
    dens: torch.Tensor | None = None    # [M] subset weights, 1 where empty
    leaf_dens: torch.Tensor | None = None  # [K] the same per leaf
    total: torch.Tensor | None = None   # the batch's weight
    empty: torch.Tensor | None = None   # [K] the leaf's subset has no weight
    n_empty: torch.Tensor | None = None  # the number of empty subsets (float32 scalar)
    step: torch.Tensor | None = None    # [M] (1 − decay)·proportion, float64
    prop: torch.Tensor | None = None    # [K] each leaf's subset proportion
    unseen: torch.Tensor | None = None  # [K] NaN where empty, else 0 (float64)


class Layouts:
    """The fused pass's cached :class:`_Layout` (``cache``, the last batch's) and its reused
    ``[C, B]`` column buffers (``scratch``) and their views (``views``), for a plan over
    ``n_indicators`` indicators."""

    def __init__(self, n_indicators: int) -> None:
        self.n_indicators = n_indicators
        self.cache: _Layout | None = None
        self.scratch: dict[tuple, torch.Tensor] = {}
        self.views: dict[tuple, tuple] = {}

    def forget(self) -> None:
        """Drop the cached layout and column views: the next pass computes them anew."""
        self.cache = None
        self.views.clear()

    def layout(self, plan: _Plan, batch: Batch) -> _Layout:
        """The batch's :class:`_Layout`, cached while its factor tensors and weights are the
        same objects at the same version (a full-batch loop computes it once)."""
        sources: list[torch.Tensor | None] = []
        for f in plan.factors:
            if f.name == "label":
                sources.append(batch.labels)
            elif f.name == "baseline":
                sources.append(batch.baseline_scores)
            elif f.name == "source":
                sources.append(batch.sources)
            else:
                sources.append(batch.groups[f.name[6:]])
        sources.append(batch.weights)
        cached = self.cache
        if (cached is not None and cached.plan is plan and len(cached.sources) == len(sources)
                and all(a is b and v is not None and _version(a) == v for a, b, v in
                        zip(cached.sources, sources, cached.versions, strict=True))):
            return cached
        code: torch.Tensor | None = None
        for f, x in zip(plan.factors, sources[:-1], strict=True):
            assert x is not None
            x = (x > 0).long() if f.name == "baseline" else x.long()
            code = x if code is None else torch.add(x, code, alpha=f.size)   # code·size + x
        if code is None:
            code = torch.zeros(batch.size, dtype=torch.long, device=batch.device)
        w = batch.weights
        if w is not None and w.dtype != torch.float32:
            w = w.to(torch.float32)
        onehot = None
        assert plan.fused is not None
        if plan.fused.onehot:
            onehot = torch.zeros(plan.hard_cells, batch.size, device=batch.device)
            if w is None:
                onehot.scatter_(0, code.unsqueeze(0), 1.0)
            else:
                onehot.scatter_(0, code.unsqueeze(0), w.unsqueeze(0))
        layout = _Layout(plan, sources, [_version(x) for x in sources],
                         code, w, onehot)
        self.cache = layout
        return layout

    def columns(self, columns: int, like: torch.Tensor) -> torch.Tensor:
        """A reused ``[C, B]`` float32 buffer whose row 0 holds ones (the other rows are
        overwritten by every pass; it never leaves the pass)."""
        key = (columns, like.shape[0], like.device)
        buf = self.scratch.get(key)
        if buf is None:
            buf = self.scratch[key] = torch.empty(columns, like.shape[0],
                                                        dtype=torch.float32, device=like.device)
            buf[0] = 1.0
        return buf

    def column_views(self, columns: int, like: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor,
                                 list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
        """:meth:`columns`' buffer, its transpose and, per indicator, its rows (hits, the
        ``[2, B]`` bounds, the lower bound): views made once per buffer, not per pass.
        A recorded step (:mod:`fairgames.game.capture`) drops them first, so that the views
        it reads are made in its graph from the buffer, not read as other constants."""
        key = (columns, like.shape[0], like.device)
        views = self.views.get(key)
        if views is None:
            cols = self.columns(columns, like)
            rows = [(cols[r], cols[r + 1: r + 3], cols[r + 2])
                    for r in range(1, 1 + 3 * self.n_indicators, 3)]
            views = self.views[key] = (cols, cols.t(), rows)
        return views


class Constants:
    """Cached device constants, made on first use (a recorded step reads them as constants)."""

    def __init__(self) -> None:
        self.cache: dict[tuple, torch.Tensor] = {}

    def __call__(self, value: float, like: torch.Tensor, size: int | None = None
                 ) -> torch.Tensor:
        """A cached constant (a scalar, or a vector of ``size``) on ``like``'s device/dtype."""
        key = (value, size, like.device, like.dtype)
        out = self.cache.get(key)
        if out is None:
            shape = () if size is None else (size,)
            out = self.cache[key] = torch.full(shape, value, dtype=like.dtype,
                                                    device=like.device)
        return out
