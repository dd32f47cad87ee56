"""The running estimates: the subsets' running proportions (the ``"running"`` denominator)
and each leaf's running rate, which an empty subset's leaves read (a bias-corrected moving
average over the batches where the subset had weight; see the package docstring), and the
leaves' denominators of both passes (:class:`RunningEstimates`)."""

from __future__ import annotations

import math

import torch

from .layout import Constants, _Layout
from .plan import _Plan


class RunningEstimates:
    """Reads and updates the evaluator's running-estimate buffers (``running_average``,
    ``running_decay_power``, ``rate_average``, ``rate_decay_power``) in ``buffers``, the
    evaluator's buffer dict (read at each call, so that ``.to()``, ``load_state_dict`` and
    a recorded step's swaps are seen; not ``nn.Module.__getattr__``: a Python call per
    buffer), with the decay and the denominator kind of the evaluator over ``n_subsets``
    subsets. Device ops only."""

    def __init__(self, buffers: dict[str, torch.Tensor | None], decay: float,
                 denominator: str, n_subsets: int, constants: Constants) -> None:
        self.buffers, self.decay, self.denominator = buffers, decay, denominator
        self.n_subsets, self.constants = n_subsets, constants
        self.scratch: dict[torch.device, torch.Tensor] = {}

    def denominators(self, plan: _Plan, out: torch.Tensor, update: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each leaf's denominator (1 where its subset is empty), proportion and emptiness
        ``[K]``, and the number of empty subsets, from the plan's output (numerators, subset
        weights, total weight); updates the running proportions when ``update``."""
        k, m = plan.n_leaves, plan.n_subsets
        average = self.buffers["running_average"]
        dens, total = out[3 * k: 3 * k + m], out[3 * k + m]
        empty = dens <= 0          # exactly: weights are non-negative, a tiny weight counts
        prop = dens / torch.where(total > 0, total, 1.0)
        if update:
            with torch.no_grad():
                average.mul_(self.decay).add_(  # type: ignore[union-attr]
                    (1.0 - self.decay) * prop.detach().double())
                self.buffers["running_decay_power"].mul_(self.decay)  # type: ignore[union-attr]
        den = torch.where(empty, 1.0, dens)
        if self.denominator == "running":
            estimate = (average / self.correction()).to(prop.dtype) * total  # type: ignore[operator]
            den = torch.where(estimate > 0, estimate, den)
        n_empty = empty.sum(dtype=torch.float32)
        if plan.identity:
            return den, prop, empty, n_empty
        i = plan.leaf_subset
        return den[i], prop[i], empty[i], n_empty

    def fill_empty(self, values: torch.Tensor, empty: torch.Tensor, fallback: torch.Tensor,
                   update: bool, unseen: torch.Tensor | None = None) -> torch.Tensor:
        """``values`` ``[3, K]`` (true, upper, lower) with each empty-subset leaf's running
        rate estimate in all three rows (a constant: θ gets no gradient from it; before the
        leaf's first observation, ``fallback``); with ``update``, the other leaves' true
        values are first folded into their estimates. ``unseen``: :meth:`unseen` of
        ``empty`` (a cached layout's). Device ops only."""
        if torch.is_grad_enabled():
            with torch.no_grad():
                estimate = self.estimates(values, empty, fallback, update, unseen)
        else:          # inside the fused pass's forward
            estimate = self.estimates(values, empty, fallback, update, unseen)
        return torch.where(empty, estimate, values)

    def estimates(self, values: torch.Tensor, empty: torch.Tensor, fallback: torch.Tensor,
                  update: bool, unseen: torch.Tensor | None) -> torch.Tensor:
        """Each leaf's running rate estimate ``[K]`` (``fallback`` before its first
        observation), after folding in ``values[0]`` with ``update`` (see fill_empty)."""
        buffers = self.buffers
        r, p = buffers["rate_average"], buffers["rate_decay_power"]
        if update:
            true = values[0]
            true = (true.detach() if true.requires_grad else true).double()
            if unseen is None:
                unseen = self.unseen(empty)
            # x·0 is 0 for a finite x, NaN for NaN or ±inf; x·NaN is NaN: one product and
            # one test give "subset not empty and value finite"
            seen = torch.mul(true, unseen).eq(0)
            torch.where(seen, torch.lerp(true, r, self.decay), r, out=r)
            torch.where(seen, p * self.decay, p, out=p)
        observed = p < 1.0
        # the quotient where not observed (r/0) is discarded by the where
        estimate = torch.div(r, torch.rsub(p, 1.0)).to(values.dtype)
        if fallback.dtype != values.dtype:
            fallback = fallback.to(values.dtype)
        return torch.where(observed, estimate, fallback)

    def unseen(self, empty: torch.Tensor) -> torch.Tensor:
        """NaN where ``empty``, else 0 (float64 ``[K]``): the mask :meth:`fill_empty`
        multiplies the true values by."""
        like = self.buffers["rate_average"]
        return torch.where(empty, self.constants(math.nan, like), self.constants(0.0, like))

    def layout_denominators(self, layout: _Layout, out: torch.Tensor) -> None:
        """Fill the layout's subset weights (1 where empty), emptiness, proportions and
        running-estimate step from the subset-weight rows ``[M + 1]`` (the last the total)."""
        plan = layout.plan
        m = plan.n_subsets
        dens, layout.total = out[:m], out[m]
        empty = dens <= 0          # exactly: weights are non-negative, a tiny weight counts
        layout.dens = torch.where(empty, 1.0, dens)
        layout.leaf_dens = layout.dens if plan.identity else layout.dens[plan.leaf_subset]
        layout.n_empty = empty.sum(dtype=torch.float32)
        prop = dens / torch.where(layout.total > 0, layout.total, 1.0)
        layout.step = (1.0 - self.decay) * prop.double()
        layout.empty = empty if plan.identity else empty[plan.leaf_subset]
        layout.unseen = self.unseen(layout.empty)
        layout.prop = prop if plan.identity else prop[plan.leaf_subset]

    def fused_denominators(self, layout: _Layout, update: bool) -> torch.Tensor:
        """Each leaf's denominator ``[K]`` (the layout's weights, 1 for an empty subset, or
        the running estimates), after the running update when ``update``."""
        buffers = self.buffers
        average = buffers["running_average"]
        if update:
            # r ← step + decay·r in one op (step = (1 − decay)·proportion)
            torch.add(layout.step, average, alpha=self.decay,  # type: ignore[arg-type]
                      out=average)
            buffers["running_decay_power"].mul_(self.decay)  # type: ignore[union-attr]
        if self.denominator == "batch":
            assert layout.leaf_dens is not None
            return layout.leaf_dens
        estimate = self.estimate_buffer(layout.total)  # type: ignore[arg-type]
        torch.div(average, self.correction(), out=estimate)
        estimate.mul_(layout.total)
        # the batch's weight while the subset has never been seen
        den = torch.where(estimate > 0, estimate, layout.dens)  # type: ignore[arg-type]
        return den if layout.plan.identity else den[layout.plan.leaf_subset]

    def correction(self) -> torch.Tensor:
        """The running estimate's bias correction ``max(1 − decay^updates, 1e-300)``, a float64
        device scalar read from ``running_decay_power`` (the same float64 products as a host
        copy would hold, so eager steps are unchanged), so that a captured step
        (:mod:`fairgames.game.capture`) reads the current power instead of a recorded one."""
        return torch.rsub(self.buffers["running_decay_power"], 1.0).clamp_min_(1e-300)

    def estimate_buffer(self, like: torch.Tensor) -> torch.Tensor:
        """A reused float32 ``[M]`` scratch vector on ``like``'s device."""
        buf = self.scratch.get(like.device)
        if buf is None:
            buf = self.scratch[like.device] = torch.empty(
                self.n_subsets, dtype=torch.float32, device=like.device)
        return buf
