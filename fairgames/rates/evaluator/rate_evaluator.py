"""The public evaluator, :class:`RateEvaluator`: an ``nn.Module`` that registers the leaves,
holds the running-estimate buffers and the compiled plans (one per batch layout), and hands
each job to its collaborators — :mod:`.compile` (plans), :mod:`.columns` (columns and cell
codes), :mod:`.estimates` (running estimates), :mod:`.layout` and :mod:`.fused` (the fused
pass), :mod:`.whole_split` (exact evaluation)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from ..batch import Batch
from ..errors import NonFiniteScoresError
from ..events import Indicator
from ..expressions import Constraint, Expression, Leaf
from ..losses import Loss
from ..subsets import Subset
from ..surrogates import Surrogate, sign_correct_sum
from .columns import Columns
from .compile import compile_plan, register
from .estimates import RunningEstimates
from .fused import FusedRunner, Reduce, _FusedBound, _FusedPass, _takes_fused_pass
from .layout import Constants, Layouts
from .leaf_values import LeafValues
from .plan import _Plan
from .whole_split import exact_values, split_sums, values_of_sums


class RateEvaluator(torch.nn.Module):
    """Evaluates all leaves of some expressions / constraints on a :class:`Batch` in one pass.

    Args:
        items: expressions, constraints or leaves whose leaves are registered (de-duplicated by
            structure, in first-seen order).
        surrogate: the θ-player's stand-in for the indicator (``"hinge"`` by default).
        denominator: ``"batch"`` (default) divides by the subset's weight in the batch;
            ``"running"`` divides by the running estimate of the subset's proportion times
            the batch's weight (a ratio of expectations, as TFCO does; the batch's weight
            while the subset has never been seen). Either way an empty subset's leaves read
            their running rate estimates (see the package docstring).
        decay: decay of the running proportion and rate estimates.
    """

    def __init__(self, items: Iterable[Expression | Constraint | Leaf],
                 surrogate: Surrogate | str = "hinge", *, denominator: str = "batch",
                 decay: float = 0.99) -> None:
        super().__init__()
        reg = register(items)
        self.leaves: list[Leaf] = reg.leaves
        self.index = {lf.key: i for i, lf in enumerate(self.leaves)}
        surrogate = surrogate if isinstance(surrogate, Surrogate) else Surrogate(surrogate)
        if denominator not in ("batch", "running"):
            raise ValueError(f"denominator must be 'batch' or 'running', got {denominator!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay}")
        self.subsets: list[Subset] = reg.subsets
        self._leaf_subset = reg.leaf_subset
        self.indicators: list[Indicator] = reg.indicators
        self.losses: list[Loss] = reg.losses
        self._registered = reg
        self._register_buffers(len(self.subsets), len(self.leaves))
        self._plans: dict[tuple, _Plan] = {}
        # The collaborators read the buffers through the buffer dict (the same dict for the
        # module's life: .to() and load_state_dict replace or fill its entries).
        constants = Constants()
        self._layouts = Layouts(len(self.indicators))
        self._columns = Columns(self.indicators, self.losses, surrogate, self._buffers)
        self._running = RunningEstimates(self._buffers, decay, denominator, len(self.subsets),
                                         constants)
        self._fused = FusedRunner(self.indicators, surrogate, self._buffers, self._layouts,
                                  self._running, constants)

    def _register_buffers(self, m: int, k: int) -> None:
        """The running estimates over ``m`` subsets and ``k`` leaves and the non-finite flags."""
        # The running estimates are views of one float64 vector, so that the non-finite
        # guard (fairgames.game.finite) saves and restores them in one op each.
        estimates = torch.zeros(m + 1 + 2 * k, dtype=torch.float64)
        estimates[m] = 1.0
        estimates[m + 1 + k:] = 1.0
        self.register_buffer("running_average", estimates[:m])
        self.register_buffer("running_decay_power", estimates[m])
        # Each leaf's running rate (the leaf values of an empty subset): a moving average
        # over the batches where its subset had weight, and decay^(those batches).
        self.register_buffer("rate_average", estimates[m + 1: m + 1 + k])
        self.register_buffer("rate_decay_power", estimates[m + 1 + k:])
        self.register_buffer("nonfinite_seen", torch.zeros((), dtype=torch.bool))
        # The fused pass adds each batch's score sum here (one op; NaN/inf stick) instead of
        # testing every score; check_finite and state_dict fold it into nonfinite_seen.
        self.register_buffer("_score_total", torch.zeros((), dtype=torch.float64),
                             persistent=False)

    @property
    def surrogate(self) -> Surrogate:
        """The θ-player's stand-in for the indicator."""
        return self._columns.surrogate

    @surrogate.setter
    def surrogate(self, value: Surrogate) -> None:
        self._columns.surrogate = self._fused.surrogate = value

    @property
    def decay(self) -> float:
        """The decay of the running proportion and rate estimates."""
        return self._running.decay

    @decay.setter
    def decay(self, value: float) -> None:
        self._running.decay = value

    @property
    def denominator(self) -> str:
        """``"batch"`` or ``"running"`` (see the class docstring)."""
        return self._running.denominator

    @denominator.setter
    def denominator(self, value: str) -> None:
        self._running.denominator = value

    def forget_layout(self) -> None:
        """Forget the fused pass's cached batch layout and column views, so that the next pass
        recomputes them from the batch (a recorded step does, to see data copied into the
        same tensors on every replay)."""
        self._layouts.forget()

    # ------------------------------------------------------------------ compile
    def _plan(self, batch: Batch) -> _Plan:
        sig = batch.signature()
        plan = self._plans.get(sig)
        if plan is None:
            plan = compile_plan(self._registered, batch)
            self._plans[sig] = plan
        return plan

    # ------------------------------------------------------------------ the pass
    def cell_sums(self, batch: Batch, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The per-cell column sums ``[cells · columns]`` of a batch (additive over chunks)."""
        plan = self._plan(batch)
        with torch.autocast(device_type=batch.device.type, enabled=False):
            return self._columns.cell_sums(plan, batch, dtype)

    def hard_cells(self, batch: Batch) -> int:
        """The number of cells of the hard factors (label, baseline, source, hard groups)
        that :meth:`example_columns` assigns ``batch``'s examples to."""
        return self._plan(batch).hard_cells

    def example_columns(self, batch: Batch, dtype: torch.dtype = torch.float64, *,
                        bounds: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Each example's contribution to the cell sums: columns ``[B, C']`` (weight, the
        indicators' true / upper / lower values times the weight, the group losses, spread
        over the soft cells: ``C' = soft cells · columns``) and its hard cell ``[B]``. The
        cell sums of :meth:`cell_sums` are their per-cell totals; a reweighting of the
        examples (a bootstrap resample's counts) is a weighted total of the same columns.
        A mixture's example carries its expected prediction ``Σ_r q_r 1[s_r > z]``.
        ``bounds=False`` leaves the surrogate columns at zero (for true values only: rows
        with the same labels, groups and predictions then have the same columns).

        Example:
            >>> import torch
            >>> from fairgames.rates import positive_prediction_rate
            >>> ev = RateEvaluator([positive_prediction_rate()])
            >>> v, code = ev.example_columns(Batch(scores=torch.tensor([1.0, -1.0]),
            ...                                    labels=torch.tensor([1.0, 0.0])))
            >>> v[:, :2].tolist(), code.tolist()     # [weight, weight·1[s ≥ 0]]
            ([[1.0, 1.0], [1.0, 0.0]], [0, 0])
        """
        plan = self._plan(batch)
        with torch.autocast(device_type=batch.device.type, enabled=False):
            return self._columns.of_examples(plan, batch, dtype, bounds)

    def forward(self, batch: Batch, *, update: bool | None = None,
                reduce: Reduce | None = None) -> LeafValues:
        """One fused pass on a (mini)batch. ``update`` defaults to ``self.training``.
        ``reduce`` (a data-parallel game's collective) turns the batch's per-cell sums into
        the global batch's before any division; the gradient stays this shard's."""
        plan = self._plan(batch)
        update = self.training if update is None else update
        device_type = batch.device.type
        if torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type=device_type, enabled=False):
                return self._forward(plan, batch, update, reduce)
        return self._forward(plan, batch, update, reduce)

    def _forward(self, plan: _Plan, batch: Batch, update: bool,
                 reduce: Reduce | None = None) -> LeafValues:
        k = plan.n_leaves
        if _takes_fused_pass(plan, batch):
            layout = self._layouts.layout(plan, batch)
            true, bounds = _FusedPass.apply(batch.scores, self._fused, layout, update,
                                            reduce)
            return LeafValues(true, None, None, self.index, layout.prop, bounds,
                              empty_subsets=layout.n_empty)
        sums = self._columns.cell_sums(plan, batch, torch.float32)
        if reduce is not None:
            # the global sums' values, this shard's gradient (the other ranks' sums are
            # constants here; see fairgames.game.distributed for θ's gradient)
            sums = reduce(sums.detach()) + (sums - sums.detach())
        out = plan.apply(sums)
        den, prop, empty, n_empty = self._running.denominators(plan, out, update)
        values = self._running.fill_empty(out[: 3 * k].view(3, k) / den, empty,
                                          plan.fallback_rates(sums.detach()), update)
        return LeafValues(values[0].detach(), values[1], values[2], self.index, prop,
                          empty_subsets=n_empty)

    def combination_bound(self, batch: Batch, costs: Callable[[torch.Tensor], torch.Tensor],
                          *, update: bool | None = None, reduce: Reduce | None = None
                          ) -> tuple[torch.Tensor, LeafValues]:
        """The sign-correct surrogate ``Σ_k c⁺_k·upper_k + c⁻_k·lower_k`` of ``⟨c, R⟩`` (an
        upper bound for bound surrogates; paper 000 eq. (4)) at leaf costs ``c = costs(true)``
        ``[K]``, computed from the batch's TRUE rates inside the pass. Returns the scalar
        (differentiable in the scores, first order) and the :class:`LeafValues` (here without
        gradient).

        On the fused pass this is ONE autograd node whose forward also forms the per-example
        gradient, so the backward is a single multiply; otherwise it is the dot of the costs'
        positive / negative parts with the bounds of :meth:`forward`. ``reduce``: as in
        :meth:`forward`.

        Example:
            >>> import torch
            >>> from fairgames.rates import Batch, RateEvaluator, positive_prediction_rate
            >>> ev = RateEvaluator([positive_prediction_rate()])
            >>> s = torch.tensor([0.5, -2.0], requires_grad=True)
            >>> value, leaves = ev.combination_bound(
            ...     Batch(scores=s, labels=torch.tensor([1.0, 0.0])), lambda t: 2.0 * t.new_ones(1))
            >>> float(value.detach()), float(leaves.true[0])  # 2·mean(relu(1 + s)), mean(s > 0)
            (1.5, 0.5)
        """
        plan = self._plan(batch)
        update = self.training if update is None else update
        device_type = batch.device.type
        if torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type=device_type, enabled=False):
                return self._combination_bound(plan, batch, costs, update, reduce)
        return self._combination_bound(plan, batch, costs, update, reduce)

    def _combination_bound(self, plan: _Plan, batch: Batch,
                           costs: Callable[[torch.Tensor], torch.Tensor], update: bool,
                           reduce: Reduce | None = None) -> tuple[torch.Tensor, LeafValues]:
        if _takes_fused_pass(plan, batch):
            layout = self._layouts.layout(plan, batch)
            value, true, bounds = _FusedBound.apply(batch.scores, self._fused, layout, update,
                                                    costs, reduce)
            return value, LeafValues(true, None, None, self.index, layout.prop, bounds,
                                     empty_subsets=layout.n_empty)
        values = self._forward(plan, batch, update, reduce)
        with torch.no_grad():
            c = costs(values.true)
        return sign_correct_sum(c, values.upper, values.lower), values


    # ------------------------------------------------------------------ whole splits
    @torch.no_grad()
    def evaluate_split(self, batches: Iterable[Batch], *, empty: str = "raise",
                       bounds: bool = True) -> LeafValues:
        """Exact values over a whole split given in chunks (float64 counts; syncs; no update).
        ``bounds=False`` leaves the surrogate bounds at zero (true values only: a mixture's
        members then cost no surrogate evaluation).

        Raises :class:`EmptySubsetError` naming every subset with no example (with
        ``empty="nan"`` their leaves are NaN instead: a report's table of rates that may be
        undefined), and :class:`NonFiniteScoresError` if any score is NaN or infinite.
        :class:`fairgames.rates.exact.ExactEvaluator` is the reporting front end.
        """
        if empty not in ("raise", "nan"):
            raise ValueError(f"empty must be 'raise' or 'nan', got {empty!r}")
        plan, total = split_sums(batches, self._plan, self._columns, bounds)
        return exact_values(plan, total, self.subsets, self.index, empty)

    @torch.no_grad()
    def leaf_values_of_sums(self, batch: Batch, sums: torch.Tensor) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
        """True leaf values of ``n`` reweightings of a split at once: from their cell sums
        ``[n, cells·columns]`` (float64; e.g. bootstrap counts times
        :meth:`example_columns`) of a split laid out as ``batch``, each leaf's true value
        ``[K, n]`` (NaN where its subset has no weight) and its subset's weight ``[K, n]``.

        Example:
            >>> import torch
            >>> from fairgames.rates import positive_prediction_rate
            >>> ev = RateEvaluator([positive_prediction_rate()])
            >>> b = Batch(scores=torch.tensor([1.0, -1.0]), labels=torch.tensor([1.0, 0.0]))
            >>> v, code = ev.example_columns(b)
            >>> counts = torch.tensor([[1.0, 1.0], [2.0, 0.0]], dtype=torch.float64)
            >>> true, weight = ev.leaf_values_of_sums(b, counts @ v)   # one cell: code 0
            >>> true.tolist(), weight.tolist()
            ([[0.5, 1.0]], [[2.0, 2.0]])
        """
        return values_of_sums(self._plan(batch), sums)

    def _fold_nonfinite(self) -> None:
        """Fold the fused passes' score sum into ``nonfinite_seen`` (device ops, no sync)."""
        self.nonfinite_seen.logical_or_(~torch.isfinite(self._score_total))
        self._score_total.zero_()

    def check_finite(self) -> None:
        """Raise if any training pass since the last reset saw a NaN/inf score (syncs)."""
        self._fold_nonfinite()
        if bool(self.nonfinite_seen):
            self.nonfinite_seen.zero_()
            raise NonFiniteScoresError("the model produced NaN or infinite scores during "
                                       "training (detected on the device since the last check)")

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # type: ignore[no-untyped-def]
        self._fold_nonfinite()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict, prefix, *args):  # type: ignore[no-untyped-def]
        missing = [n for n in ("rate_average", "rate_decay_power") if prefix + n not in state_dict]
        super()._load_from_state_dict(state_dict, prefix, *args)
        for name in missing:      # a state saved before the rate estimates: none observed
            args[2].remove(prefix + name)          # missing_keys
            getattr(self, name).fill_(0.0 if name == "rate_average" else 1.0)
        self._score_total.zero_()

    def extra_repr(self) -> str:
        return (f"leaves={len(self.leaves)}, subsets={len(self.subsets)}, "
                f"surrogate={self.surrogate.kind}, denominator={self.denominator}")
