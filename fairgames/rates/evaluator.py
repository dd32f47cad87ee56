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

A training pass (scores ``[B]``, hard factors, no group loss) runs as ONE autograd node
(:class:`_FusedPass`): its forward forms the columns without recording a graph (the surrogate's
slopes come from :meth:`Surrogate.bounds_with_slopes`), and its backward maps the bounds'
gradients back to the scores with the transposed matrix, one gather by cell and the saved
slopes. Small plans apply the matrix as a dense mat-vec. The per-example cell codes are cached
while the batch reuses the same label / group tensors (a full-batch loop pays them once).
Mixtures, probabilities, soft groups, group losses and differentiable weights take the general
pass, whose graph autograd records op by op; both give the same values.

Empty subsets: a subset is empty in a batch exactly when its weight there is 0 (no row, or
only rows of weight 0); a tiny weight is not empty and gets its exact rate. An empty subset's
leaves read a running estimate of their *rate* — a bias-corrected exponential moving average
of the leaf's values over the batches where its subset was not empty — true, upper and lower
alike, so the multipliers see no made-up value and θ gets no gradient from them (the
surrogate leaf is that detached estimate). Before a leaf's first observation the estimate is
the batch's rate of the same event on the subset's label / baseline part: TPR of an empty
group reads the batch's TPR, its FP proportion the batch's FP proportion (0 when that part is
empty too), so a parity constraint on an absent group reads as no difference. No NaN appears
and no exception is raised mid-step; the count of empty subsets is ``LeafValues.empty_subsets``
(a device scalar). The running states are buffers (``state_dict``) updated only in training
mode. Whole splits are evaluated exactly in float64 by :meth:`RateEvaluator.evaluate_split`,
where a subset with no example is an :class:`EmptySubsetError` naming it.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batch import Batch
from .errors import EmptySubsetError, NonFiniteScoresError, RatesError
from .events import DEFAULT_INDICATOR, Indicator
from .expressions import Constraint, Expression, Leaf, LeafLookup, leaves_of
from .losses import Loss
from .subsets import And, BaselineIs, Everything, GroupIs, LabelIs, Not, Or, SourceIs, Subset
from .surrogates import Surrogate, sign_correct_sum, sign_split

# A plan over more cells than this is refused: the per-step cell sums would dominate the pass.
MAX_CELLS = 1 << 24
# A plan whose matrix has at most this many entries is applied as a dense mat-vec.
DENSE_LIMIT = 1 << 15
# The fused pass sums columns per cell by a one-hot matrix product up to this many cells
# (cells·B·columns MACs), by index_add beyond.
ONEHOT_CELLS = 8

Reduce = Callable[[torch.Tensor], torch.Tensor]
"""``reduce=`` of a training pass: maps this process's flat per-cell sums to the sums over
every process of a data-parallel game (one collective; :mod:`fairgames.game.distributed`)."""


class LeafValues(LeafLookup):
    """Values of every leaf of an evaluator: ``true`` (0/1 rates, no gradient), and the
    differentiable surrogate bounds ``upper`` and ``lower``, each ``[K]`` in leaf order.
    ``proportions`` are the subsets' weights relative to the batch (``[K]``, per leaf).
    ``flat_bounds``, when set, is ``[upper, lower]`` as one differentiable ``[2K]`` tensor: a
    consumer can take both bounds in one op, and ``upper`` / ``lower`` are then its views,
    made on first access. ``subset_weights`` (whole splits only) are the subsets' total
    weights ``[K]`` (per leaf; the row counts of an unweighted split). ``empty_subsets`` is
    the number of subsets with no weight in the batch (a device scalar; see the module
    docstring for what their leaves read)."""

    def __init__(self, true: torch.Tensor, upper: torch.Tensor | None,
                 lower: torch.Tensor | None, index: dict[tuple, int],
                 proportions: torch.Tensor | None = None,
                 flat_bounds: torch.Tensor | None = None,
                 subset_weights: torch.Tensor | None = None,
                 empty_subsets: torch.Tensor | None = None) -> None:
        if (upper is None or lower is None) and flat_bounds is None:
            raise ValueError("give upper and lower, or flat_bounds")
        self.true = true
        self._upper, self._lower = upper, lower
        self.index = index
        self.proportions = proportions
        self.flat_bounds = flat_bounds
        self.subset_weights = subset_weights
        self.empty_subsets = empty_subsets

    @property
    def upper(self) -> torch.Tensor:
        if self._upper is None:
            assert self.flat_bounds is not None
            self._upper = self.flat_bounds[: self.true.shape[0]]
        return self._upper

    @property
    def lower(self) -> torch.Tensor:
        if self._lower is None:
            assert self.flat_bounds is not None
            self._lower = self.flat_bounds[self.true.shape[0]:]
        return self._lower

    def __repr__(self) -> str:
        return (f"LeafValues(true={self.true!r}, upper={self.upper!r}, lower={self.lower!r}, "
                f"proportions={self.proportions!r})")

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
    matrix: torch.Tensor            # sparse [3K + M + 1, cells·columns] (coalesced, float64;
                                    # the last row sums the total weight)
    leaf_subset: torch.Tensor       # [K] subset index of each leaf
    n_leaves: int
    n_subsets: int
    rows: torch.Tensor              # the matrix's non-zeros: row ids, column ids, values
    cols: torch.Tensor
    values: dict[torch.dtype, torch.Tensor]   # values cast once per dtype
    dense: dict[torch.dtype, torch.Tensor] | None = None   # the matrix, when small
    identity: bool = False          # leaf i reads subset i (no gather of the denominators)
    fused: _FusedPlan | None = None  # hard factors only and no group loss: the fused pass
    fallback: _Rows | None = None   # part sums → [2K]: each leaf's true numerator and subset
                                    # weight on its subset's label / baseline part
    fold: torch.Tensor | None = None  # [cells·columns]: the part·columns entry of each sum
    zeros: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] | None = None

    def fallback_rates(self, sums: torch.Tensor) -> torch.Tensor:
        """Each leaf's true rate ``[K]`` on its subset's label / baseline part (0 where that
        part has no weight): an empty subset's value before any observation."""
        assert self.fallback is not None and self.fold is not None
        zeros = self._zeros(sums)
        flat = sums if sums.dim() == 1 else sums.reshape(-1)
        # out of place on cached zeros: the same sums, in the same order, as zeros + index_add_
        out = self.fallback(torch.index_add(zeros[0], 0, self.fold, flat))
        num, den = out.split(self.n_leaves)
        # where den = 0 the quotient is discarded (0/0), as a guarded division's would be
        return torch.where(den > 0, num / den, zeros[1])

    def _zeros(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached zeros ``[4·columns]`` and a 0-d zero of ``like``'s dtype (plan's device)."""
        if self.zeros is None:
            self.zeros = {}
        z = self.zeros.get(like.dtype)
        if z is None:      # never written: read as constants (also by a recorded step)
            z = self.zeros[like.dtype] = (
                torch.zeros(4 * self.columns, dtype=like.dtype, device=like.device),
                torch.zeros((), dtype=like.dtype, device=like.device))
        return z

    def apply(self, sums: torch.Tensor) -> torch.Tensor:
        """``matrix @ sums``: a dense mat-vec for a small matrix; otherwise gather the
        non-zeros' columns, scale, and add them up per row."""
        if self.dense is not None:
            mat = self.dense.get(sums.dtype)
            if mat is None:
                mat = self.dense[sums.dtype] = self.dense[torch.float64].to(sums.dtype)
            return torch.mv(mat, sums)
        vals = self.values.get(sums.dtype)
        if vals is None:
            vals = self.values[sums.dtype] = self.values[torch.float64].to(sums.dtype)
        out = torch.zeros(self.matrix.shape[0], dtype=sums.dtype, device=sums.device)
        return out.index_add(0, self.rows, vals * sums.index_select(0, self.cols))

    def apply_many(self, sums: torch.Tensor) -> torch.Tensor:
        """``matrix @ sums.T`` for ``n`` cell-sum vectors ``[n, cells·columns]`` (float64):
        ``[rows, n]``, one product for all of them."""
        if self.dense is not None:
            return self.dense[torch.float64].to(sums.dtype) @ sums.t()
        vals = self.values[torch.float64].to(sums.dtype)
        picked = sums.index_select(1, self.cols) * vals                    # [n, non-zeros]
        out = torch.zeros(sums.shape[0], self.matrix.shape[0], dtype=sums.dtype,
                          device=sums.device)
        return out.index_add_(1, self.rows, picked).t()


@dataclass
class _Rows:
    """A float32 linear map ``[n_in] → [n_out]`` given by non-zeros ``(row, col, value)``:
    a dense mat-vec when small, else gather, scale and ``index_add`` (O(non-zeros))."""

    n_out: int
    dense: torch.Tensor | None
    rows: torch.Tensor
    cols: torch.Tensor
    vals: torch.Tensor

    @staticmethod
    def build(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, n_out: int,
              n_in: int) -> _Rows:
        vals = vals.to(torch.float32)
        dense = None
        if n_out * n_in <= DENSE_LIMIT:
            dense = torch.zeros(n_out, n_in, dtype=torch.float32, device=vals.device)
            dense.index_put_((rows, cols), vals, accumulate=True)
        return _Rows(n_out, dense, rows, cols, vals)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            return torch.mv(self.dense, x)
        out = torch.zeros(self.n_out, dtype=x.dtype, device=x.device)
        return out.index_add_(0, self.rows, self.vals * x.index_select(0, self.cols))


@dataclass
class _FusedPlan:
    """The fused pass's view of a plan (hard factors only, no group loss): the leaf rows
    ``[3K]`` and the subset-weight rows ``[M + 1]`` of the matrix, and ``back``, the bounds'
    rows transposed onto the ``2J`` upper / lower columns of every cell (``[2J·cells]``, row
    ``2j + side`` of cell ``c`` at ``(2j + side)·cells + c``)."""

    leaf: _Rows
    den: _Rows
    back: _Rows
    onehot: bool        # sum per cell with a (weighted) one-hot matrix product


@dataclass
class _Layout:
    """Per-batch-layout work of the fused pass, reused while the batch's factor tensors and
    weights are the same objects at the same version: each example's cell, the one-hot
    matrix, and the subsets' weights, proportions and running-estimate step."""

    plan: _Plan
    sources: list[torch.Tensor | None]
    versions: list[int]
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
            their running rate estimates (see the module docstring).
        decay: decay of the running proportion and rate estimates.
    """

    def __init__(self, items: Iterable[Expression | Constraint | Leaf],
                 surrogate: Surrogate | str = "hinge", *, denominator: str = "batch",
                 decay: float = 0.99) -> None:
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
        self.denominator, self.decay = denominator, decay
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
        m, k = len(self.subsets), len(self.leaves)
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
        self._plans: dict[tuple, _Plan] = {}
        self._layout_cache: _Layout | None = None
        self._constants: dict[tuple, torch.Tensor] = {}
        self._scratch: dict[torch.device, torch.Tensor] = {}
        self._scratch_cols: dict[tuple, torch.Tensor] = {}
        self._column_view_cache: dict[tuple, tuple] = {}

    # ------------------------------------------------------------------ compile
    def _plan(self, batch: Batch) -> _Plan:
        sig = batch.signature()
        plan = self._plans.get(sig)
        if plan is None:
            plan = self._compile(batch)
            self._plans[sig] = plan
        return plan

    def _leaf_tables(self, ind_pos: Mapping[Indicator, int], loss_pos: Mapping[str, int],
                     n_ind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per leaf: its event's ``a`` and ``b`` tables ``[K, 2, 2]`` (zeros for a loss; ``b``
        zeros for an event that reads no model), the column of its indicator's hits and
        the column of its loss (``-1``: an event's)."""
        k = len(self.leaves)
        a_tab, b_tab = np.zeros((k, 2, 2)), np.zeros((k, 2, 2))
        b_col, loss_col = np.zeros(k, dtype=np.int64), np.full(k, -1, dtype=np.int64)
        for i, lf in enumerate(self.leaves):
            if lf.loss is not None:
                loss_col[i] = 1 + 3 * n_ind + loss_pos[lf.loss.name]
                continue
            ev = lf.event
            assert ev is not None
            a_tab[i] = ev.a
            if ev.depends_on_model:
                b_tab[i] = ev.b
                b_col[i] = 1 + 3 * ind_pos[ev.indicator]
        return a_tab, b_tab, b_col, loss_col

    def _compile(self, batch: Batch) -> _Plan:
        hard, soft = self._factors(batch)
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

        membership = _Membership(coords, cells, batch).cells
        members = [membership(s) for s in self.subsets]     # sorted cell ids per subset
        # Each subset's label / baseline part: the (label, baseline) pairs, 2·y + o, that some
        # cell of the subset has (group and source conditions dropped; g = b & y = 1 → y = 1).
        part = (coords.get("label", np.zeros(cells, dtype=np.int64)) * 2
                + coords.get("baseline", np.zeros(cells, dtype=np.int64)))
        projected = [np.unique(part[mem]) for mem in members]
        n_ind, n_loss = len(self.indicators), len(self.losses)
        columns = 1 + 3 * n_ind + n_loss
        ind_pos = {ind: j for j, ind in enumerate(self.indicators)}
        loss_pos = {lo.name: j for j, lo in enumerate(self.losses)}
        k = len(self.leaves)
        tables = self._leaf_tables(ind_pos, loss_pos, n_ind)
        n_rows = 3 * k + len(self.subsets) + 1
        rows, cols, vals = self._entries(coords, cells, members, columns, tables)
        # The fallback rows (see _Plan.fallback) read the cell sums folded into the four
        # parts ([4·columns]: O(cells) once), not the cells: K rows over the cells would
        # cost O(K·cells) per pass where groups are many.
        parts = np.arange(4)
        fb = _fallback_entries([projected[j] for j in self._leaf_subset], parts // 2,
                               parts % 2, tables, columns)
        fold = (part[:, None] * columns + np.arange(columns)).reshape(-1)    # cell·col → part
        index = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]))
        values = torch.from_numpy(np.concatenate(vals)).to(torch.float64)
        matrix = torch.sparse_coo_tensor(
            index, values, (n_rows, cells * columns), check_invariants=True).coalesce()
        matrix = matrix.to(batch.device)
        m_rows, m_cols = matrix.indices()
        plan = _Plan(factors, hard_cells, soft_cells, columns, matrix,
                     torch.tensor(self._leaf_subset, device=batch.device), k, len(self.subsets),
                     m_rows, m_cols, {torch.float64: matrix.values()})
        plan.identity = self._leaf_subset == list(range(len(self.subsets)))
        plan.fallback = _Rows.build(*(torch.from_numpy(x).to(batch.device) for x in fb),
                                    2 * k, 4 * columns)
        plan.fold = torch.from_numpy(fold).to(batch.device)
        if n_rows * cells * columns <= DENSE_LIMIT:
            plan.dense = {torch.float64: matrix.to_dense()}
        if not soft and not self.losses and n_ind:
            plan.fused = _fused_plan(m_rows, m_cols, matrix.values(), k, n_rows, cells,
                                     columns, n_ind)
        return plan

    def _factors(self, batch: Batch) -> tuple[list[_Factor], list[_Factor]]:
        """The hard and the soft factors whose cells the subsets need (label, baseline,
        source, each group attribute), after checking that ``batch`` carries each."""
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
        return hard, soft

    def _entries(self, coords: Mapping[str, np.ndarray], cells: int, members: list[np.ndarray],
                 columns: int, tables: tuple[np.ndarray, ...]
                 ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """The plan matrix's non-zeros ``(rows, cols, values)`` as lists of blocks: the
        leaves' true / upper / lower rows, the subsets' weight rows and the total weight."""
        y = coords.get("label", np.zeros(cells, dtype=np.int64))
        o = coords.get("baseline", np.zeros(cells, dtype=np.int64))
        k = len(self.leaves)
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []

        def put(row: int | np.ndarray, cell_ids: np.ndarray, col: int | np.ndarray,
                v: np.ndarray) -> None:
            nz = v != 0
            if nz.any():
                rows.append(np.broadcast_to(row, v.shape)[nz])
                cols.append(cell_ids[nz] * columns + np.broadcast_to(col, v.shape)[nz])
                vals.append(v[nz])

        # The leaves' rows, all leaves at once (entry e: leaf[e], cell[e]); the matrix is
        # coalesced afterwards, so the entries' order does not matter.
        counts = np.array([len(members[j]) for j in self._leaf_subset], dtype=np.int64)
        leaf = np.repeat(np.arange(k), counts)
        cell = (np.concatenate([members[j] for j in self._leaf_subset]) if k
                else np.zeros(0, dtype=np.int64))
        a_tab, b_tab, b_col, loss_col = tables
        is_loss = loss_col[leaf] >= 0
        ones = np.ones(int(is_loss.sum()))
        for block in range(3):
            put(block * k + leaf[is_loss], cell[is_loss], loss_col[leaf[is_loss]], ones)
        ev_leaf, ev_cell = leaf[~is_loss], cell[~is_loss]
        a = a_tab[ev_leaf, y[ev_cell], o[ev_cell]]
        for block in range(3):
            put(block * k + ev_leaf, ev_cell, 0, a)
        b = b_tab[ev_leaf, y[ev_cell], o[ev_cell]]   # 0 where the event reads no model
        j = b_col[ev_leaf]
        b_pos, b_neg = np.where(b > 0, b, 0.0), np.where(b < 0, b, 0.0)
        put(ev_leaf, ev_cell, j, b)                                          # true
        put(k + ev_leaf, ev_cell, j + 1, b_pos)                              # upper: b⁺·up
        put(k + ev_leaf, ev_cell, j + 2, b_neg)                              #        b⁻·lo
        put(2 * k + ev_leaf, ev_cell, j + 2, b_pos)                          # lower: b⁺·lo
        put(2 * k + ev_leaf, ev_cell, j + 1, b_neg)                          #        b⁻·up
        sizes = np.array([len(mem) for mem in members], dtype=np.int64)
        if len(members):
            subset_cells = np.concatenate(members)
            put(3 * k + np.repeat(np.arange(len(members)), sizes), subset_cells, 0,
                np.ones(len(subset_cells)))
        # The last row is the batch's total weight (the proportions' denominator).
        put(3 * k + len(self.subsets), np.arange(cells), 0, np.ones(cells))
        return rows, cols, vals

    # ------------------------------------------------------------------ the pass
    def cell_sums(self, batch: Batch, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The per-cell column sums ``[cells · columns]`` of a batch (additive over chunks)."""
        plan = self._plan(batch)
        with torch.autocast(device_type=batch.device.type, enabled=False):
            return self._cell_sums(plan, batch, dtype)

    def _cell_sums(self, plan: _Plan, batch: Batch, dtype: torch.dtype,
                   bounds: bool = True) -> torch.Tensor:
        v, code = self._example_columns(plan, batch, dtype, bounds)
        # Columns-major sums (see the fused pass): index_add along dim 1 from [C', B].
        sums = torch.zeros(v.shape[1], plan.hard_cells, dtype=dtype, device=batch.device)
        sums = sums.index_add(1, code, v.t().contiguous())
        return sums.t().reshape(-1)

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
            return self._example_columns(plan, batch, dtype, bounds)

    def _example_columns(self, plan: _Plan, batch: Batch, dtype: torch.dtype,
                         bounds: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Per example, the leaves' value columns ``[B, C]`` (times the soft memberships'
        products where the plan has soft factors) and the hard cell code ``[B]``."""
        v = self._value_columns(batch, dtype, bounds)
        code, soft_w = self._cell_codes(plan, batch, dtype)
        if soft_w is not None:
            v = (soft_w[:, :, None] * v[:, None, :]).reshape(batch.size, -1)
        return v, code

    def _value_columns(self, batch: Batch, dtype: torch.dtype, bounds: bool) -> torch.Tensor:
        """``[B, C]``: the weight, then per indicator (hit, upper, lower surrogate) and per
        group loss its value, each times the example's weight (mixtures: their expectation)."""
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
    def _cell_codes(plan: _Plan, batch: Batch, dtype: torch.dtype
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

    def _combine(self, plan: _Plan, sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = plan.apply(sums)
        k = plan.n_leaves
        return out[: 3 * k], out[3 * k: 3 * k + plan.n_subsets]

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
            layout = self._layout(plan, batch)
            true, bounds = _FusedPass.apply(batch.scores, self, layout, update, reduce)
            return LeafValues(true, None, None, self.index, layout.prop, bounds,
                              empty_subsets=layout.n_empty)
        sums = self._cell_sums(plan, batch, torch.float32)
        if reduce is not None:
            # the global sums' values, this shard's gradient (the other ranks' sums are
            # constants here; see fairgames.game.distributed for θ's gradient)
            sums = reduce(sums.detach()) + (sums - sums.detach())
        out = plan.apply(sums)
        den, prop, empty, n_empty = self._denominators(plan, out, update)
        values = self._fill_empty(out[: 3 * k].view(3, k) / den, empty,
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
            layout = self._layout(plan, batch)
            value, true, bounds = _FusedBound.apply(batch.scores, self, layout, update, costs,
                                                    reduce)
            return value, LeafValues(true, None, None, self.index, layout.prop, bounds,
                                     empty_subsets=layout.n_empty)
        values = self._forward(plan, batch, update, reduce)
        with torch.no_grad():
            c = costs(values.true)
        return sign_correct_sum(c, values.upper, values.lower), values

    def _denominators(self, plan: _Plan, out: torch.Tensor, update: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each leaf's denominator (1 where its subset is empty), proportion and emptiness
        ``[K]``, and the number of empty subsets, from the plan's output (numerators, subset
        weights, total weight); updates the running proportions when ``update``."""
        k, m = plan.n_leaves, plan.n_subsets
        dens, total = out[3 * k: 3 * k + m], out[3 * k + m]
        empty = dens <= 0          # exactly: weights are non-negative, a tiny weight counts
        prop = dens / torch.where(total > 0, total, 1.0)
        if update:
            with torch.no_grad():
                self.running_average.mul_(self.decay).add_(
                    (1.0 - self.decay) * prop.detach().double())
                self.running_decay_power.mul_(self.decay)
        den = torch.where(empty, 1.0, dens)
        if self.denominator == "running":
            estimate = (self.running_average / self._correction()).to(prop.dtype) * total
            den = torch.where(estimate > 0, estimate, den)
        n_empty = empty.sum(dtype=torch.float32)
        if plan.identity:
            return den, prop, empty, n_empty
        i = plan.leaf_subset
        return den[i], prop[i], empty[i], n_empty

    def _fill_empty(self, values: torch.Tensor, empty: torch.Tensor, fallback: torch.Tensor,
                    update: bool, unseen: torch.Tensor | None = None) -> torch.Tensor:
        """``values`` ``[3, K]`` (true, upper, lower) with each empty-subset leaf's running
        rate estimate in all three rows (a constant: θ gets no gradient from it; before the
        leaf's first observation, ``fallback``); with ``update``, the other leaves' true
        values are first folded into their estimates. ``unseen``: :meth:`_unseen` of
        ``empty`` (a cached layout's). Device ops only."""
        if torch.is_grad_enabled():
            with torch.no_grad():
                estimate = self._estimates(values, empty, fallback, update, unseen)
        else:          # inside the fused pass's forward
            estimate = self._estimates(values, empty, fallback, update, unseen)
        return torch.where(empty, estimate, values)

    def _estimates(self, values: torch.Tensor, empty: torch.Tensor, fallback: torch.Tensor,
                   update: bool, unseen: torch.Tensor | None) -> torch.Tensor:
        """Each leaf's running rate estimate ``[K]`` (``fallback`` before its first
        observation), after folding in ``values[0]`` with ``update`` (see _fill_empty)."""
        buffers = self._buffers     # not nn.Module.__getattr__: a Python call per buffer
        r, p = buffers["rate_average"], buffers["rate_decay_power"]
        if update:
            true = values[0]
            true = (true.detach() if true.requires_grad else true).double()
            if unseen is None:
                unseen = self._unseen(empty)
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

    def _unseen(self, empty: torch.Tensor) -> torch.Tensor:
        """NaN where ``empty``, else 0 (float64 ``[K]``): the mask :meth:`_fill_empty`
        multiplies the true values by."""
        like = self.rate_average
        return torch.where(empty, self._constant(math.nan, like), self._constant(0.0, like))

    def _layout(self, plan: _Plan, batch: Batch) -> _Layout:
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
        cached = self._layout_cache
        if (cached is not None and cached.plan is plan and len(cached.sources) == len(sources)
                and all(a is b and (a is None or a._version == v) for a, b, v in
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
        layout = _Layout(plan, sources, [x._version if x is not None else 0 for x in sources],
                         code, w, onehot)
        self._layout_cache = layout
        return layout

    def _layout_denominators(self, layout: _Layout, out: torch.Tensor) -> None:
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
        layout.unseen = self._unseen(layout.empty)
        layout.prop = prop if plan.identity else prop[plan.leaf_subset]

    def _fused_denominators(self, layout: _Layout, update: bool) -> torch.Tensor:
        """Each leaf's denominator ``[K]`` (the layout's weights, 1 for an empty subset, or
        the running estimates), after the running update when ``update``."""
        buffers = self._buffers     # not nn.Module.__getattr__: a Python call per buffer
        average = buffers["running_average"]
        if update:
            # r ← step + decay·r in one op (step = (1 − decay)·proportion)
            torch.add(layout.step, average, alpha=self.decay,  # type: ignore[arg-type]
                      out=average)
            buffers["running_decay_power"].mul_(self.decay)  # type: ignore[union-attr]
        if self.denominator == "batch":
            assert layout.leaf_dens is not None
            return layout.leaf_dens
        estimate = self._estimate_buffer(layout.total)  # type: ignore[arg-type]
        torch.div(average, self._correction(), out=estimate)
        estimate.mul_(layout.total)
        # the batch's weight while the subset has never been seen
        den = torch.where(estimate > 0, estimate, layout.dens)  # type: ignore[arg-type]
        return den if layout.plan.identity else den[layout.plan.leaf_subset]

    def _correction(self) -> torch.Tensor:
        """The running estimate's bias correction ``max(1 − decay^updates, 1e-300)``, a float64
        device scalar read from ``running_decay_power`` (the same float64 products as a host
        copy would hold, so eager steps are unchanged), so that a captured step
        (:mod:`fairgames.game.capture`) reads the current power instead of a recorded one."""
        return torch.rsub(self._buffers["running_decay_power"], 1.0).clamp_min_(1e-300)

    def _estimate_buffer(self, like: torch.Tensor) -> torch.Tensor:
        """A reused float32 ``[M]`` scratch vector on ``like``'s device."""
        buf = self._scratch.get(like.device)
        if buf is None:
            buf = self._scratch[like.device] = torch.empty(
                len(self.subsets), dtype=torch.float32, device=like.device)
        return buf

    def _columns(self, columns: int, like: torch.Tensor) -> torch.Tensor:
        """A reused ``[C, B]`` float32 buffer whose row 0 holds ones (the other rows are
        overwritten by every pass; it never leaves the pass)."""
        key = (columns, like.shape[0], like.device)
        buf = self._scratch_cols.get(key)
        if buf is None:
            buf = self._scratch_cols[key] = torch.empty(columns, like.shape[0],
                                                        dtype=torch.float32, device=like.device)
            buf[0] = 1.0
        return buf

    def _column_views(self, columns: int, like: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor,
                                 list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
        """:meth:`_columns`' buffer, its transpose and, per indicator, its rows (hits, the
        ``[2, B]`` bounds, the lower bound): views made once per buffer, not per pass.
        A recorded step (:mod:`fairgames.game.capture`) drops them first, so that the views
        it reads are made in its graph from the buffer, not read as other constants."""
        key = (columns, like.shape[0], like.device)
        views = self._column_view_cache.get(key)
        if views is None:
            cols = self._columns(columns, like)
            rows = [(cols[r], cols[r + 1: r + 3], cols[r + 2])
                    for r in range(1, 1 + 3 * len(self.indicators), 3)]
            views = self._column_view_cache[key] = (cols, cols.t(), rows)
        return views

    def _constant(self, value: float, like: torch.Tensor, size: int | None = None
                  ) -> torch.Tensor:
        """A cached constant (a scalar, or a vector of ``size``) on ``like``'s device/dtype."""
        key = (value, size, like.device, like.dtype)
        out = self._constants.get(key)
        if out is None:
            shape = () if size is None else (size,)
            out = self._constants[key] = torch.full(shape, value, dtype=like.dtype,
                                                    device=like.device)
        return out

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
        total: torch.Tensor | None = None
        plan: _Plan | None = None
        for batch in batches:
            batch.check_values()
            p = self._plan(batch)
            if plan is not None and p is not plan:
                raise RatesError("all chunks of a split must share one layout (groups, sources)")
            plan = p
            with torch.autocast(device_type=batch.device.type, enabled=False):
                s = self._cell_sums(p, batch, torch.float64, bounds)
            total = s if total is None else total + s
        if plan is None or total is None:
            raise RatesError("evaluate_split got no batch")
        nums, dens = self._combine(plan, total)
        if empty == "raise":
            missing = (dens <= 0).nonzero().flatten().tolist()
            if missing:
                raise empty_subset_error([self.subsets[i] for i in missing])
        weights = dens[plan.leaf_subset]
        den = torch.where(weights > 0, weights, torch.full_like(weights, math.nan))
        k = plan.n_leaves
        n_all = total.reshape(-1, plan.columns)[:, 0].sum()
        return LeafValues(nums[:k] / den, nums[k:2 * k] / den, nums[2 * k:] / den, self.index,
                          weights / n_all, subset_weights=weights,
                          empty_subsets=(dens <= 0).sum(dtype=torch.float64))

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
        plan = self._plan(batch)
        out = plan.apply_many(sums)
        k = plan.n_leaves
        weights = out[3 * k: 3 * k + plan.n_subsets][plan.leaf_subset]
        den = torch.where(weights > 0, weights, torch.full_like(weights, math.nan))
        return out[:k] / den, weights

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


def empty_subset_error(subsets: Sequence[Subset]) -> EmptySubsetError:
    """The error of a whole-split evaluation whose ``subsets`` have no example."""
    names = ", ".join(str(x) for x in subsets)
    return EmptySubsetError(f"no example (with positive weight) in subset(s): {names}")


def _takes_fused_pass(plan: _Plan, batch: Batch) -> bool:
    """Whether a training pass on ``batch`` runs as one fused autograd node: hard factors and
    no group loss (``plan.fused``), scores (not probabilities) of one model, and weights that
    need no gradient. Otherwise the general, op-by-op pass runs."""
    return (plan.fused is not None and batch.scores is not None
            and batch.mixture_weights is None
            and (batch.weights is None or not batch.weights.requires_grad))


def _fused_values(ev: RateEvaluator, layout: _Layout, s: torch.Tensor, update: bool,
                  reduce: Reduce | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused pass's forward, outside autograd: ``values`` ``[3, K]`` (true, upper, lower),
    each leaf's denominator ``[K]`` and the surrogate's slopes ``[2J, B]`` (see
    :class:`_FusedPass`). ``reduce`` makes the cell sums the global batch's (the backward
    then maps the global denominators onto this shard's examples)."""
    plan = layout.plan
    fused = plan.fused
    assert fused is not None
    ev._buffers["_score_total"].add_(s.sum())  # type: ignore[union-attr]  (no __getattr__)
    cols, cols_t, rows = ev._column_views(plan.columns, s)    # [C, B]; row 0 holds ones
    slopes = []
    for ind, (hit, bounds, lower) in zip(ev.indicators, rows, strict=True):
        margin = s - ind.threshold if ind.threshold else s
        torch.heaviside(margin, ev._constant(0.0 if ind.strict else 1.0, s), out=hit)
        slopes.append(ev.surrogate.fill_bounds(margin, bounds, lower))
    if layout.onehot is not None:
        sums = torch.mm(layout.onehot, cols_t)           # [cells, C]
    else:
        # Summed along dim 1 of a [C, cells] buffer from the contiguous [C, B] columns: on
        # CPU, index_add along dim 0 from the [B, C] view is 10-20x slower when few cells
        # take many rows each (2.4 ms against 0.2 ms at 20 cells, B = 65 536).
        src = cols if layout.weights is None else cols * layout.weights
        sums = torch.zeros(plan.columns, plan.hard_cells, device=s.device)
        sums.index_add_(1, layout.code, src)
        sums = sums.t()
    flat = sums.reshape(-1)
    if reduce is not None:
        flat = reduce(flat)
    if layout.dens is None or reduce is not None:
        # (reduced: the global subset weights change with the other ranks' shards even while
        # this rank's layout is cached)
        # The subsets' weights read only the ones column, but one product over all sums:
        # a NaN/inf score would make them NaN (0·NaN), and the layout is cached for the
        # next batch with the same label/group tensors (a skipped non-finite step).
        ev._layout_denominators(layout, fused.den(torch.nan_to_num(flat)))
    den = ev._fused_denominators(layout, update)
    # An empty subset's leaves read their running estimates; θ's gradient through them is
    # already 0 (their cells hold no row of positive weight, and den is 1 there).
    values = ev._fill_empty(fused.leaf(flat).view(3, plan.n_leaves) / den, layout.empty,  # type: ignore[arg-type]
                            plan.fallback_rates(flat), update, layout.unseen)
    slope = slopes[0] if len(slopes) == 1 else torch.cat(slopes, dim=0)
    return values, den, slope


def _bounds_to_scores(layout: _Layout, g_bounds: torch.Tensor, den: torch.Tensor,
                      slope: torch.Tensor) -> torch.Tensor:
    """``d⟨g, [upper, lower]⟩ / d scores`` ``[B]`` for a gradient ``g_bounds`` ``[2K]`` of the
    bounds: divided by the denominators, through the transposed bound rows onto each cell's
    upper / lower columns, gathered per example (with its weight), times the slopes."""
    plan = layout.plan
    assert plan.fused is not None
    if g_bounds.dim() != 2:
        g_bounds = g_bounds.reshape(2, plan.n_leaves)
    if g_bounds.dtype != torch.float32:
        g_bounds = g_bounds.to(torch.float32)
    g = (g_bounds / den).view(-1)
    per_cell = plan.fused.back(g).view(-1, plan.hard_cells)     # [2J, cells]
    if layout.onehot is not None:
        per = torch.mm(per_cell, layout.onehot)                # [2J, B], weighted
    else:
        per = per_cell.index_select(1, layout.code)
        if layout.weights is not None:
            per = per * layout.weights
    return per.mul_(slope).sum(0)        # per is this call's own product: in place


def _fused_plan(rows: torch.Tensor, cols: torch.Tensor, vals64: torch.Tensor, k: int,
                n_rows: int, cells: int, columns: int, n_ind: int) -> _FusedPlan:
    """The fused pass's view of a plan's coalesced matrix (rows, cols, float64 values): its
    leaf rows, its subset-weight rows, and the bounds' rows transposed onto the upper /
    lower columns of every cell."""
    leaf, den = rows < 3 * k, rows >= 3 * k
    # bounds' rows → (2j + side)·cells + cell for the upper / lower columns only
    col, cell = cols % columns, cols // columns
    side = col - 2 - 3 * ((col - 1) // 3)          # 0: upper, 1: lower, <0: hit, w
    back = (rows >= k) & leaf & (col > 0) & (side >= 0)
    back_cols = (2 * ((col - 1) // 3) + side) * cells + cell
    return _FusedPlan(
        leaf=_Rows.build(rows[leaf], cols[leaf], vals64[leaf], 3 * k, cells * columns),
        den=_Rows.build(rows[den] - 3 * k, cols[den], vals64[den], n_rows - 3 * k,
                        cells * columns),
        back=_Rows.build(back_cols[back], rows[back] - k, vals64[back],
                         2 * n_ind * cells, 2 * k),
        onehot=cells <= ONEHOT_CELLS)


class _FusedPass(torch.autograd.Function):
    """The training pass as one autograd node (see the module docstring).

    Forward, outside autograd: the columns ``[1, 1[s > z], upper, lower]`` per indicator as
    rows of a ``[C, B]`` buffer, their weighted sums per cell (one one-hot product or one
    ``index_add``), the leaf rows of the matrix, and the denominators (the subsets' weights
    come from the cached layout). Outputs ``true`` [K] (no gradient) and
    ``bounds = [upper, lower]`` [2K]. Backward: the bounds' gradient divided by the
    denominators, through the transposed bound rows onto each cell's upper / lower columns,
    gathered per example (with its weight) and multiplied by the saved slopes.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, ev: RateEvaluator,  # type: ignore[override]
                layout: _Layout, update: bool, reduce: Reduce | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        s = scores if scores.dtype == torch.float32 else scores.to(torch.float32)
        values, den, slope = _fused_values(ev, layout, s, update, reduce)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(den, slope)
            ctx.layout, ctx.score_dtype = layout, scores.dtype
        true, bounds = values.view(-1).split([layout.plan.n_leaves, 2 * layout.plan.n_leaves])
        ctx.mark_non_differentiable(true)
        return true, bounds

    @staticmethod
    def backward(ctx, _g_true: torch.Tensor | None,  # type: ignore[override]
                 g_bounds: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        if g_bounds is None or not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        _first_order_only()
        den, slope = ctx.saved_tensors
        grad = _bounds_to_scores(ctx.layout, g_bounds, den, slope)
        return grad.to(ctx.score_dtype), None, None, None, None


class _FusedBound(torch.autograd.Function):
    """``Σ c⁺·upper + c⁻·lower`` at costs ``c = costs(true)`` as one autograd node whose
    forward also forms the per-example gradient (so its backward is one multiply).

    The costs may depend on the batch's true rates (linearised ratios, ratio slacks), which
    is why they are a callback run inside the pass. Outputs the scalar, ``true`` [K] and
    ``bounds`` [2K] (the latter two without gradient). First-order only.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, ev: RateEvaluator,  # type: ignore[override]
                layout: _Layout, update: bool,
                costs: Callable[[torch.Tensor], torch.Tensor], reduce: Reduce | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # true and bounds take no gradient: no zeros made for them in the backward
        ctx.set_materialize_grads(False)
        s = scores if scores.dtype == torch.float32 else scores.to(torch.float32)
        values, den, slope = _fused_values(ev, layout, s, update, reduce)
        k = layout.plan.n_leaves
        true, bounds = values.view(-1).split([k, 2 * k])
        c = costs(true)
        split = sign_split(c)                           # [2, K]
        value = torch.dot(split.view(-1), bounds)       # paper 000 eq. (4): c⁺ᵀ·up + c⁻ᵀ·lo
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(_bounds_to_scores(layout, split, den, slope))
            ctx.score_dtype = scores.dtype
        ctx.mark_non_differentiable(true, bounds)
        return value, true, bounds

    @staticmethod
    def backward(ctx, g_value: torch.Tensor, _g_true: torch.Tensor | None,  # type: ignore[override]
                 _g_bounds: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        if g_value is None or not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        _first_order_only()
        (grad,) = ctx.saved_tensors
        return (grad * g_value).to(ctx.score_dtype), None, None, None, None, None


class _Membership:
    """Each subset's cells as sorted cell ids, in time and memory O(its cells): never a
    ``[subsets, cells]`` mask (10 000 groups make 20 000 cells and 10 000 subsets)."""

    def __init__(self, coords: Mapping[str, np.ndarray], cells: int, batch: Batch) -> None:
        self.coords, self.n, self.batch = coords, cells, batch
        self._groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._positions: dict[str, dict[str, int]] = {}

    def literal(self, s: Subset) -> tuple[str, int]:
        """The factor a literal reads and the code it asks for."""
        if isinstance(s, LabelIs):
            return "label", int(s.value)
        if isinstance(s, BaselineIs):
            return "baseline", int(s.value)
        if isinstance(s, SourceIs):
            return "source", _resolve(s.value, self.batch.source_names or [], "source")
        if isinstance(s, GroupIs):
            names = self.batch.group_values[s.attribute]
            if s.attribute not in self._positions:   # name → code once: K lookups, not K²
                self._positions[s.attribute] = {
                    n: i for i, n in reversed(list(enumerate(names)))}
            return "group:" + s.attribute, _resolve(
                s.value, names, f"group {s.attribute!r}", self._positions[s.attribute])
        raise TypeError(f"unknown subset node {type(s).__name__}")

    def of_value(self, factor: str, code: int) -> np.ndarray:
        """The cells whose ``factor`` coordinate is ``code`` (sorted)."""
        if factor not in self._groups:
            c = self.coords[factor]
            order = np.argsort(c, kind="stable")
            starts = np.concatenate([[0], np.cumsum(np.bincount(c))])
            self._groups[factor] = (order, starts)
        order, starts = self._groups[factor]
        if not 0 <= code < len(starts) - 1:
            return np.zeros(0, dtype=np.int64)
        return order[starts[code]:starts[code + 1]]

    def cells(self, s: Subset) -> np.ndarray:
        """The sorted cell ids of subset ``s``."""
        if isinstance(s, Everything):
            return np.arange(self.n)
        if _is_literal(s):
            return self.of_value(*self.literal(s))
        if isinstance(s, And):
            left, right = _is_literal(s.left), _is_literal(s.right)
            if not (left or right):
                return np.intersect1d(self.cells(s.left), self.cells(s.right),
                                      assume_unique=True)
            if left and right:     # the smaller literal's cells, filtered by the other
                lo, ro = self.of_value(*self.literal(s.left)), self.of_value(
                    *self.literal(s.right))
                ids, test = (lo, s.right) if len(lo) <= len(ro) else (ro, s.left)
            else:
                test, other = (s.left, s.right) if left else (s.right, s.left)
                ids = self.cells(other)
            factor, code = self.literal(test)
            return ids[self.coords[factor][ids] == code]
        if isinstance(s, Or):
            return np.union1d(self.cells(s.left), self.cells(s.right))
        if isinstance(s, Not):
            return np.setdiff1d(np.arange(self.n), self.cells(s.inner), assume_unique=True)
        raise TypeError(f"unknown subset node {type(s).__name__}")


def _fallback_entries(hits: Sequence[np.ndarray], py: np.ndarray, po: np.ndarray,
                      tables: tuple[np.ndarray, ...], columns: int) -> list[np.ndarray]:
    """``(rows, cols, vals)`` of the fallback rows (see ``_Plan.fallback``), all leaves at
    once, in the order a loop over the leaves makes them — per leaf: its ``a`` (or loss)
    entries, its ``b`` entries, its weight entries, each over its parts — since
    ``index_add`` sums a row's entries in that order."""
    a_tab, b_tab, b_col, loss_col = tables
    k = len(hits)
    leaf = np.repeat(np.arange(k), [len(h) for h in hits])
    hit = np.concatenate(hits) if k else np.zeros(0, dtype=np.int64)
    loss = loss_col[leaf] >= 0
    y, o = py[hit], po[hit]
    first = np.where(loss, 1.0, a_tab[leaf, y, o])
    second = np.where(loss, 0.0, b_tab[leaf, y, o])          # 0 for an event without model
    rows = np.concatenate([leaf, leaf, k + leaf])
    base = hit * columns
    cols = np.concatenate([base + np.where(loss, loss_col[leaf], 0), base + b_col[leaf], base])
    vals = np.concatenate([first, second, np.ones(len(hit))])
    kind = np.repeat(np.arange(3), len(hit))
    order = np.argsort(np.concatenate([leaf, leaf, leaf]) * 3 + kind, kind="stable")
    keep = order[vals[order] != 0]
    return [rows[keep].astype(np.int64), cols[keep].astype(np.int64), vals[keep]]


def _is_literal(s: Subset) -> bool:
    return isinstance(s, (LabelIs, BaselineIs, SourceIs, GroupIs))


def _first_order_only() -> None:
    """The fused nodes' backward is built from constants of the forward (the slopes, the
    per-example gradient): a graph of it (``create_graph=True``: a gradient penalty, a
    Hessian-vector product) would give a second derivative without the surrogate's
    curvature, silently wrong. Grad mode is on in a backward only under ``create_graph``."""
    if torch.is_grad_enabled():
        raise RatesError("the fused rate pass is first-order: differentiating its gradient "
                         "(backward/grad with create_graph=True, e.g. a gradient penalty) is "
                         "not supported")


def _resolve(value: str | int, names: Sequence[str], what: str,
             positions: Mapping[str, int] | None = None) -> int:
    if isinstance(value, str):
        if positions is not None and value in positions:
            return positions[value]
        if value in names:
            return list(names).index(value)
        raise RatesError(f"unknown value {value!r} of {what}; known values: {list(names)}")
    if not 0 <= value < len(names):
        raise RatesError(f"code {value} of {what} is out of range 0..{len(names) - 1} "
                         f"(values {list(names)})")
    return int(value)
