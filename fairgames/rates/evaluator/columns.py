"""Column forming: each example's columns (its weight, each indicator's hit and surrogate
bounds times the weight, each group loss) and its cell code, and their per-cell sums
(:class:`Columns`; the general pass, whole splits and bootstrap resamples read them)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..batch import Batch
from ..errors import RatesError
from ..events import Indicator
from ..losses import Loss
from ..surrogates import Surrogate
from .plan import _Plan


class Columns:
    """Forms the columns of ``indicators`` and ``losses`` with ``surrogate``'s bounds.
    ``buffers`` is the evaluator's buffer dict (read at each call, so that ``.to()`` and
    ``load_state_dict`` are seen): a pass ORs a non-finite score into its
    ``nonfinite_seen``."""

    def __init__(self, indicators: Sequence[Indicator], losses: Sequence[Loss],
                 surrogate: Surrogate, buffers: dict[str, torch.Tensor | None]) -> None:
        self.indicators, self.losses = indicators, losses
        self.surrogate, self.buffers = surrogate, buffers

    def cell_sums(self, plan: _Plan, batch: Batch, dtype: torch.dtype,
                  bounds: bool = True) -> torch.Tensor:
        """The per-cell column sums ``[cells · columns]`` of ``batch`` (additive over
        chunks): :meth:`of_examples` summed per hard cell."""
        v, code = self.of_examples(plan, batch, dtype, bounds)
        # Columns-major sums (see the fused pass): index_add along dim 1 from [C', B].
        sums = torch.zeros(v.shape[1], plan.hard_cells, dtype=dtype, device=batch.device)
        sums = sums.index_add(1, code, v.t().contiguous())
        return sums.t().reshape(-1)

    def of_examples(self, plan: _Plan, batch: Batch, dtype: torch.dtype,
                    bounds: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Per example, the leaves' value columns ``[B, C]`` (times the soft memberships'
        products where the plan has soft factors) and the hard cell code ``[B]``."""
        v = self.values(batch, dtype, bounds)
        code, soft_w = self.cell_codes(plan, batch, dtype)
        if soft_w is not None:
            v = (soft_w[:, :, None] * v[:, None, :]).reshape(batch.size, -1)
        return v, code

    def values(self, batch: Batch, dtype: torch.dtype, bounds: bool) -> torch.Tensor:
        """``[B, C]``: the weight, then per indicator (hit, upper, lower surrogate) and per
        group loss its value, each times the example's weight (mixtures: their expectation)."""
        b = batch.size
        w = (batch.weights.to(dtype) if batch.weights is not None
             else torch.ones(b, dtype=dtype, device=batch.device))
        cols = [w]
        scores = batch.scores.to(dtype) if batch.scores is not None else None
        if scores is not None:
            # Detected on the device; raised at logging intervals / whole-split evaluation.
            self.buffers["nonfinite_seen"].logical_or_(  # type: ignore[union-attr]
                ~torch.isfinite(scores).all())
        for ind in self.indicators:
            if scores is None:
                p = batch.probabilities.to(dtype)  # type: ignore[union-attr]
                cols += [w * p, w * p, w * p]
                continue
            margin = scores - ind.threshold if ind.threshold else scores
            hit = (margin > 0) if ind.strict else (margin >= 0)
            if not bounds:
                # true values only: the surrogate columns stay in the layout, as zeros
                hit = hit.to(dtype)
                if batch.mixture_weights is not None:
                    hit = batch.mixture_weights.to(dtype) @ hit
                zero = torch.zeros_like(w)
                cols += [w * hit, zero, zero]
                continue
            up, lo = self.surrogate.bounds(margin)
            if batch.mixture_weights is not None:
                # expectations over the members as products q [R] @ [R, B]: no [R, B]
                # temporary beyond the bounds themselves
                q = batch.mixture_weights.to(dtype)
                hit, up, lo = q @ hit.to(dtype), q @ up, q @ lo
            cols += [w * hit.to(dtype), w * up, w * lo]
        for loss in self.losses:
            if scores is None:
                raise RatesError(f"group loss {loss.name!r} needs scores, not probabilities")
            if batch.mixture_weights is not None:
                # every member's per-example losses in one call (the examples are
                # independent): [R·B] over the labels repeated, then q @ [R, B]
                members = scores.shape[0]
                each = loss(scores.reshape(-1), batch.labels.to(dtype).repeat(members))
                per = batch.mixture_weights.to(dtype) @ each.reshape(members, -1)
            else:
                per = loss(scores, batch.labels.to(dtype))
            cols.append(w * per)
        return torch.stack(cols, dim=1)

    @staticmethod
    def cell_codes(plan: _Plan, batch: Batch, dtype: torch.dtype
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The hard factors' mixed-radix cell code ``[B]`` and the soft factors' membership
        products ``[B, S]`` (None without soft factors)."""
        b = batch.size
        code = torch.zeros(b, dtype=torch.long, device=batch.device)
        soft_w: torch.Tensor | None = None
        for f in plan.factors:
            if f.soft:
                g = batch.groups[f.name[6:]].to(dtype)
                # "no value" takes 1 − Σ memberships unclamped, so every row weighs 1 in an
                # unmasked subset even when memberships are adversary weights above 1 (DRO)
                full = torch.cat([g, 1.0 - g.sum(1, keepdim=True)], dim=1)
                soft_w = full if soft_w is None else (soft_w[:, :, None] * full[:, None, :]
                                                      ).reshape(b, -1)
                continue
            if f.name == "label":
                x = batch.labels.long()
            elif f.name == "baseline":
                x = (batch.baseline_scores > 0).long()  # type: ignore[operator]
            elif f.name == "source":
                x = batch.sources.long()  # type: ignore[union-attr]
            else:
                x = batch.groups[f.name[6:]].long()
            code = code * f.size + x
        return code, soft_w
