"""The fused evaluator: every leaf of a problem, true and surrogate, in one pass over a batch.

How the pass stays flat as the number of leaves K grows:

1. The model-independent *factors* that subsets and events read (label, baseline prediction,
   source, each hard group attribute) define a partition of the examples into cells; an example's
   cell is a mixed-radix code computed with a few integer ops. Soft attributes (memberships
   ``[B, G]``) spread each example over ``G + 1`` virtual cells (the last one is "no value").
2. Per example the pass forms a few columns: the weight ``w``, and ``w·ŷ_z`` for each distinct
   prediction indicator (true 0/1, surrogate upper, surrogate lower) and ``w·loss`` for each
   group loss. One ``index_add_`` sums them per cell: cost ``O(B · columns)``, not ``O(B · K)``.
3. Each event is affine in ``ŷ_z`` with coefficients fixed per cell (see ``events.py``), so each
   leaf's numerator is a fixed sparse combination of the cell sums, and each subset's
   denominator a sum of cells' weights: one sparse matrix product compiled once per batch
   layout (applied as a gather, a multiply and an ``index_add``, whose cost and overhead are
   O(non-zeros) forward and backward, unlike a sparse COO matmul). The surrogate rows take the
   upper bound for positive coefficients and the lower bound for negative ones, so
   ``upper ≥ true ≥ lower`` leaf by leaf for bound surrogates.

Denominators: in training mode a subset whose weight in the minibatch is (near) zero uses a
running estimate of its proportion (an exponential moving average with bias correction, floored
as TensorFlow Constrained Optimization does), so no NaN appears and no exception is raised
mid-step; the running state is a buffer (``state_dict``) and is updated only in training mode.
Whole splits are evaluated exactly in float64 by :meth:`RateEvaluator.evaluate_split`, where a
subset with no example is an :class:`EmptySubsetError` naming it.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, RateEvaluator, true_positive_rate, group
    >>> tpr = true_positive_rate(group("g", "b"))
    >>> ev = RateEvaluator([tpr])
    >>> batch = Batch(scores=torch.tensor([1.0, -1.0, 2.0]), labels=torch.tensor([1.0, 1.0, 1.0]),
    ...               groups={"g": torch.tensor([1, 1, 0])}, group_values={"g": ["a", "b"]})
    >>> float(tpr.evaluate(ev(batch)))
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batch import Batch
from .errors import EmptySubsetError, NonFiniteScoresError, RatesError
from .events import DEFAULT_INDICATOR, Indicator
from .expressions import Constraint, Expression, Leaf, LeafLookup, leaves_of
from .losses import Loss
from .subsets import And, BaselineIs, Everything, GroupIs, LabelIs, Not, Or, SourceIs, Subset
from .surrogates import Surrogate

# A plan over more cells than this is refused: the per-step cell sums would dominate the pass.
MAX_CELLS = 1 << 24


@dataclass
class LeafValues(LeafLookup):
    """Values of every leaf of an evaluator: ``true`` (0/1 rates, no gradient), and the
    differentiable surrogate bounds ``upper`` and ``lower``, each ``[K]`` in leaf order.
    ``proportions`` are the subsets' weights relative to the batch (``[K]``, per leaf)."""

    true: torch.Tensor
    upper: torch.Tensor
    lower: torch.Tensor
    index: dict[tuple, int]
    proportions: torch.Tensor | None = None

    def position(self, leaf: Leaf) -> int:
        try:
            return self.index[leaf.key]
        except KeyError:
            raise KeyError(f"leaf {leaf} was not registered with this evaluator") from None

    def true_value(self, leaf: Leaf) -> torch.Tensor:
        return self.true[self.position(leaf)]

    def bounds(self, leaf: Leaf) -> tuple[torch.Tensor, torch.Tensor]:
        i = self.position(leaf)
        return self.lower[i], self.upper[i]


@dataclass
class _Factor:
    name: str          # "label", "baseline", "source", "group:<attr>"
    size: int          # number of cell values (soft: G + 1)
    soft: bool = False


@dataclass
class _Plan:
    factors: list[_Factor]          # hard factors first (mixed radix, last fastest), then soft
    hard_cells: int
    soft_cells: int
    columns: int
    matrix: torch.Tensor            # sparse [3K + M, cells·columns] (coalesced, float64)
    leaf_subset: torch.Tensor       # [K] subset index of each leaf
    n_leaves: int
    n_subsets: int
    rows: torch.Tensor              # the matrix's non-zeros: row ids, column ids, values
    cols: torch.Tensor
    values: dict[torch.dtype, torch.Tensor]   # values cast once per dtype

    def apply(self, sums: torch.Tensor) -> torch.Tensor:
        """``matrix @ sums``: gather the non-zeros' columns, scale, and add them up per row."""
        vals = self.values.get(sums.dtype)
        if vals is None:
            vals = self.values[sums.dtype] = self.values[torch.float64].to(sums.dtype)
        out = torch.zeros(self.matrix.shape[0], dtype=sums.dtype, device=sums.device)
        return out.index_add(0, self.rows, vals * sums.index_select(0, self.cols))


class RateEvaluator(torch.nn.Module):
    """Evaluates all leaves of some expressions / constraints on a :class:`Batch` in one pass.

    Args:
        items: expressions, constraints or leaves whose leaves are registered (de-duplicated by
            structure, in first-seen order).
        surrogate: the θ-player's stand-in for the indicator (``"hinge"`` by default).
        denominator: ``"batch"`` (default) divides by the subset's weight in the batch, falling
            back to the running estimate when the subset is (near) empty; ``"running"`` always
            divides by the running estimate (a ratio of expectations, as TFCO does).
        decay: decay of the running proportion estimates.
        floor: the smallest proportion a denominator may take.
    """

    def __init__(self, items: Iterable[Expression | Constraint | Leaf],
                 surrogate: Surrogate | str = "hinge", *, denominator: str = "batch",
                 decay: float = 0.99, floor: float = 1e-6) -> None:
        super().__init__()
        items = list(items)
        leaves = [x for x in items if isinstance(x, Leaf)]
        others = [x for x in items if not isinstance(x, Leaf)]
        registered: dict[tuple, Leaf] = {}
        for lf in leaves + leaves_of(others):
            registered.setdefault(lf.key, lf)
        if not registered:
            raise RatesError("nothing to evaluate: the expressions have no rate or loss leaf")
        self.leaves: list[Leaf] = list(registered.values())
        self.index = {lf.key: i for i, lf in enumerate(self.leaves)}
        self.surrogate = surrogate if isinstance(surrogate, Surrogate) else Surrogate(surrogate)
        if denominator not in ("batch", "running"):
            raise ValueError(f"denominator must be 'batch' or 'running', got {denominator!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay}")
        if not 0.0 < floor < 1.0:
            raise ValueError(f"floor must lie in (0, 1), got {floor}")
        self.denominator, self.decay, self.floor = denominator, decay, floor
        subsets: dict[tuple, Subset] = {}
        for lf in self.leaves:
            subsets.setdefault(lf.where.key(), lf.where)
        self.subsets: list[Subset] = list(subsets.values())
        subset_index = {k: i for i, k in enumerate(subsets)}
        self._leaf_subset = [subset_index[lf.where.key()] for lf in self.leaves]
        indicators: dict[Indicator, None] = {}
        losses: dict[str, Loss] = {}
        for lf in self.leaves:
            if lf.event is not None and lf.event.depends_on_model:
                indicators.setdefault(lf.event.indicator, None)
            elif lf.loss is not None:
                losses.setdefault(lf.loss.name, lf.loss)
        self.indicators: list[Indicator] = list(indicators)
        self.losses: list[Loss] = list(losses.values())
        m = len(self.subsets)
        self.register_buffer("running_average", torch.zeros(m, dtype=torch.float64))
        self.register_buffer("running_decay_power", torch.ones((), dtype=torch.float64))
        self.register_buffer("nonfinite_seen", torch.zeros((), dtype=torch.bool))
        self._plans: dict[tuple, _Plan] = {}

    # ------------------------------------------------------------------ compile
    def _plan(self, batch: Batch) -> _Plan:
        sig = batch.signature()
        plan = self._plans.get(sig)
        if plan is None:
            plan = self._compile(batch)
            self._plans[sig] = plan
        return plan

    def _compile(self, batch: Batch) -> _Plan:
        literals = [lit for s in self.subsets for lit in s.literals()]
        uses_label = any(isinstance(x, LabelIs) for x in literals) or any(
            lf.event is not None and lf.event.uses_label for lf in self.leaves)
        uses_baseline = any(isinstance(x, BaselineIs) for x in literals) or any(
            lf.event is not None and lf.event.uses_baseline for lf in self.leaves)
        uses_source = any(isinstance(x, SourceIs) for x in literals)
        attrs = list(dict.fromkeys(x.attribute for x in literals if isinstance(x, GroupIs)))
        if uses_label and batch.label_kind != "binary":
            raise RatesError("these rates condition on a binary label (label subsets, TPR, "
                             "error, ...) but the batch's labels are declared 'real'")
        if uses_baseline and batch.baseline_scores is None:
            raise RatesError("these rates read a baseline model's predictions (churn, win/loss) "
                             "but the batch has no baseline_scores")
        if uses_source and batch.sources is None:
            raise RatesError("these rates condition on a source data set but the batch has no "
                             "sources")
        for a in attrs:
            if a not in batch.groups:
                raise RatesError(f"unknown group attribute {a!r}; the batch has "
                                 f"{sorted(batch.groups) or 'no group attributes'}")
        if batch.probabilities is not None and any(i != DEFAULT_INDICATOR for i in self.indicators):
            raise RatesError("threshold events need scores; probabilities give only P(s > 0)")
        hard: list[_Factor] = []
        if uses_label:
            hard.append(_Factor("label", 2))
        if uses_baseline:
            hard.append(_Factor("baseline", 2))
        if uses_source:
            hard.append(_Factor("source", len(batch.source_names or [])))
        soft: list[_Factor] = []
        for a in attrs:
            n = len(batch.group_values[a])
            if batch.is_soft(a):
                soft.append(_Factor("group:" + a, n + 1, soft=True))
            else:
                hard.append(_Factor("group:" + a, n))
        factors = hard + soft
        hard_cells = math.prod(f.size for f in hard)
        soft_cells = math.prod(f.size for f in soft)
        cells = hard_cells * soft_cells
        if cells > MAX_CELLS:
            raise RatesError(f"the subsets cross {len(factors)} factors into {cells} cells "
                             f"(> {MAX_CELLS}); split the problem or merge group values")
        # Coordinates of every cell, in the flat order (hard mixed radix, then soft).
        grids = np.meshgrid(*[np.arange(f.size) for f in factors], indexing="ij")
        coords = {f.name: g.reshape(-1) for f, g in zip(factors, grids, strict=True)}

        def member(s: Subset) -> np.ndarray:
            if isinstance(s, Everything):
                return np.ones(cells, dtype=bool)
            if isinstance(s, And):
                return member(s.left) & member(s.right)
            if isinstance(s, Or):
                return member(s.left) | member(s.right)
            if isinstance(s, Not):
                return ~member(s.inner)
            if isinstance(s, LabelIs):
                return coords["label"] == int(s.value)
            if isinstance(s, BaselineIs):
                return coords["baseline"] == int(s.value)
            if isinstance(s, SourceIs):
                return coords["source"] == _resolve(s.value, batch.source_names or [], "source")
            if isinstance(s, GroupIs):
                code = _resolve(s.value, batch.group_values[s.attribute], f"group {s.attribute!r}")
                return coords["group:" + s.attribute] == code
            raise TypeError(f"unknown subset node {type(s).__name__}")

        membership = [member(s) for s in self.subsets]
        n_ind, n_loss = len(self.indicators), len(self.losses)
        columns = 1 + 3 * n_ind + n_loss
        ind_pos = {ind: j for j, ind in enumerate(self.indicators)}
        loss_pos = {lo.name: j for j, lo in enumerate(self.losses)}
        y = coords.get("label", np.zeros(cells, dtype=np.int64))
        o = coords.get("baseline", np.zeros(cells, dtype=np.int64))
        k = len(self.leaves)
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []

        def put(row: int, cell_ids: np.ndarray, col: int, v: np.ndarray) -> None:
            nz = v != 0
            if nz.any():
                rows.append(np.full(int(nz.sum()), row))
                cols.append(cell_ids[nz] * columns + col)
                vals.append(v[nz])

        for i, lf in enumerate(self.leaves):
            cell_ids = np.nonzero(membership[self._leaf_subset[i]])[0]
            if lf.loss is not None:
                c = 1 + 3 * n_ind + loss_pos[lf.loss.name]
                ones = np.ones(len(cell_ids))
                for block in range(3):
                    put(block * k + i, cell_ids, c, ones)
                continue
            ev = lf.event
            assert ev is not None
            a = np.asarray(ev.a)[y[cell_ids], o[cell_ids]]
            for block in range(3):
                put(block * k + i, cell_ids, 0, a)
            if ev.depends_on_model:
                b = np.asarray(ev.b)[y[cell_ids], o[cell_ids]]
                j = 1 + 3 * ind_pos[ev.indicator]
                put(i, cell_ids, j, b)                                    # true
                put(k + i, cell_ids, j + 1, np.where(b > 0, b, 0.0))      # upper: b⁺·up
                put(k + i, cell_ids, j + 2, np.where(b < 0, b, 0.0))      #        b⁻·lo
                put(2 * k + i, cell_ids, j + 2, np.where(b > 0, b, 0.0))  # lower: b⁺·lo
                put(2 * k + i, cell_ids, j + 1, np.where(b < 0, b, 0.0))  #        b⁻·up
        for m, mem in enumerate(membership):
            cell_ids = np.nonzero(mem)[0]
            put(3 * k + m, cell_ids, 0, np.ones(len(cell_ids)))
        index = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]))
        values = torch.from_numpy(np.concatenate(vals)).to(torch.float64)
        matrix = torch.sparse_coo_tensor(
            index, values, (3 * k + len(self.subsets), cells * columns),
            check_invariants=True).coalesce()
        matrix = matrix.to(batch.device)
        rows, cols = matrix.indices()
        return _Plan(factors, hard_cells, soft_cells, columns, matrix,
                     torch.tensor(self._leaf_subset, device=batch.device), k, len(self.subsets),
                     rows, cols, {torch.float64: matrix.values()})

    # ------------------------------------------------------------------ the pass
    def cell_sums(self, batch: Batch, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The per-cell column sums ``[cells · columns]`` of a batch (additive over chunks)."""
        plan = self._plan(batch)
        with torch.autocast(device_type=batch.device.type, enabled=False):
            return self._cell_sums(plan, batch, dtype)

    def _cell_sums(self, plan: _Plan, batch: Batch, dtype: torch.dtype) -> torch.Tensor:
        b = batch.size
        w = (batch.weights.to(dtype) if batch.weights is not None
             else torch.ones(b, dtype=dtype, device=batch.device))
        cols = [w]
        scores = batch.scores.to(dtype) if batch.scores is not None else None
        if scores is not None:
            # Detected on the device; raised at logging intervals / whole-split evaluation.
            self.nonfinite_seen.logical_or_(~torch.isfinite(scores).all())
        for ind in self.indicators:
            if scores is None:
                p = batch.probabilities.to(dtype)  # type: ignore[union-attr]
                cols += [w * p, w * p, w * p]
                continue
            margin = scores - ind.threshold if ind.threshold else scores
            hit = (margin > 0) if ind.strict else (margin >= 0)
            up, lo = self.surrogate.bounds(margin)
            if batch.mixture_weights is not None:
                q = batch.mixture_weights.to(dtype)[:, None]
                hit, up, lo = (q * hit).sum(0), (q * up).sum(0), (q * lo).sum(0)
            cols += [w * hit.to(dtype), w * up, w * lo]
        for loss in self.losses:
            if scores is None:
                raise RatesError(f"group loss {loss.name!r} needs scores, not probabilities")
            if batch.mixture_weights is not None:
                q = batch.mixture_weights.to(dtype)
                per = sum(q[r] * loss(scores[r], batch.labels.to(dtype))
                          for r in range(scores.shape[0]))
            else:
                per = loss(scores, batch.labels.to(dtype))
            cols.append(w * per)
        v = torch.stack(cols, dim=1)  # [B, C]
        code = torch.zeros(b, dtype=torch.long, device=batch.device)
        soft_w: torch.Tensor | None = None
        for f in plan.factors:
            if f.soft:
                g = batch.groups[f.name[6:]].to(dtype)
                full = torch.cat([g, (1.0 - g.sum(1, keepdim=True)).clamp_min(0.0)], dim=1)
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
        if soft_w is not None:
            v = (soft_w[:, :, None] * v[:, None, :]).reshape(b, -1)
        sums = torch.zeros(plan.hard_cells, v.shape[1], dtype=dtype, device=batch.device)
        sums.index_add_(0, code, v)
        return sums.reshape(-1)

    def _combine(self, plan: _Plan, sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = plan.apply(sums)
        k = plan.n_leaves
        return out[: 3 * k], out[3 * k:]

    def forward(self, batch: Batch, *, update: bool | None = None) -> LeafValues:
        """One fused pass on a (mini)batch. ``update`` defaults to ``self.training``."""
        plan = self._plan(batch)
        with torch.autocast(device_type=batch.device.type, enabled=False):
            sums = self._cell_sums(plan, batch, torch.float32)
            nums, dens = self._combine(plan, sums)
            total = sums.reshape(-1, plan.columns)[:, 0].sum()
            prop = dens / total
            running = self.running_average
            power = self.running_decay_power
            if self.training if update is None else update:
                with torch.no_grad():
                    running.mul_(self.decay).add_((1.0 - self.decay) * prop.detach().double())
                    power.mul_(self.decay)
            estimate = (running / (1.0 - power).clamp_min(1e-300)).to(prop.dtype)
            estimate = estimate.clamp_min(self.floor)
            if self.denominator == "running":
                den = estimate * total
            else:
                den = torch.where(prop > self.floor, dens, estimate * total)
            den = den[plan.leaf_subset]
            k = plan.n_leaves
            true = (nums[:k] / den).detach()
            return LeafValues(true, nums[k:2 * k] / den, nums[2 * k:] / den, self.index,
                              prop[plan.leaf_subset])

    # ------------------------------------------------------------------ whole splits
    @torch.no_grad()
    def evaluate_split(self, batches: Iterable[Batch]) -> LeafValues:
        """Exact values over a whole split given in chunks (float64 counts; syncs; no update).

        Raises :class:`EmptySubsetError` naming every subset with no example, and
        :class:`NonFiniteScoresError` if any score is NaN or infinite.
        """
        total: torch.Tensor | None = None
        plan: _Plan | None = None
        for batch in batches:
            batch.check_values()
            p = self._plan(batch)
            if plan is not None and p is not plan:
                raise RatesError("all chunks of a split must share one layout (groups, sources)")
            plan = p
            with torch.autocast(device_type=batch.device.type, enabled=False):
                s = self._cell_sums(p, batch, torch.float64)
            total = s if total is None else total + s
        if plan is None or total is None:
            raise RatesError("evaluate_split got no batch")
        nums, dens = self._combine(plan, total)
        empty = (dens <= 0).nonzero().flatten().tolist()
        if empty:
            names = ", ".join(str(self.subsets[i]) for i in empty)
            raise EmptySubsetError(f"no example (with positive weight) in subset(s): {names}")
        den = dens[plan.leaf_subset]
        k = plan.n_leaves
        n_all = total.reshape(-1, plan.columns)[:, 0].sum()
        return LeafValues(nums[:k] / den, nums[k:2 * k] / den, nums[2 * k:] / den, self.index,
                          dens[plan.leaf_subset] / n_all)

    def check_finite(self) -> None:
        """Raise if any training pass since the last reset saw a NaN/inf score (syncs)."""
        if bool(self.nonfinite_seen):
            self.nonfinite_seen.zero_()
            raise NonFiniteScoresError("the model produced NaN or infinite scores during "
                                       "training (detected on the device since the last check)")

    def extra_repr(self) -> str:
        return (f"leaves={len(self.leaves)}, subsets={len(self.subsets)}, "
                f"surrogate={self.surrogate.kind}, denominator={self.denominator}")


def _resolve(value: str | int, names: Sequence[str], what: str) -> int:
    if isinstance(value, str):
        if value in names:
            return list(names).index(value)
        raise RatesError(f"unknown value {value!r} of {what}; known values: {list(names)}")
    if not 0 <= value < len(names):
        raise RatesError(f"code {value} of {what} is out of range 0..{len(names) - 1} "
                         f"(values {list(names)})")
    return int(value)
