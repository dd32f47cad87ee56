"""Plan compilation, once per batch layout: which leaves, subsets, indicators and group losses
an evaluator reads (:func:`register`), the factors whose cells the subsets need, and the
sparse matrix from per-cell column sums to every leaf's numerators and every subset's weight
(:func:`compile_plan`; see the package docstring for the method)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..batch import Batch
from ..errors import RatesError
from ..events import DEFAULT_INDICATOR, Indicator
from ..expressions import Constraint, Expression, Leaf, leaves_of
from ..losses import Loss
from ..subsets import BaselineIs, GroupIs, LabelIs, SourceIs, Subset
from .membership import _Membership
from .plan import DENSE_LIMIT, _Factor, _FusedPlan, _Plan, _Rows

# A plan over more cells than this is refused: the per-step cell sums would dominate the pass.
MAX_CELLS = 1 << 24
# The fused pass sums columns per cell by a one-hot matrix product up to this many cells
# (cells·B·columns MACs), by index_add beyond.
ONEHOT_CELLS = 8


@dataclass(frozen=True)
class Registered:
    """What an evaluator reads: its leaves (de-duplicated by structure, in first-seen order),
    their distinct subsets, each leaf's subset, and the distinct indicators and group losses
    the leaves read off the model."""

    leaves: list[Leaf]
    subsets: list[Subset]
    leaf_subset: list[int]
    indicators: list[Indicator]
    losses: list[Loss]


def register(items: Iterable[Expression | Constraint | Leaf]) -> Registered:
    """The :class:`Registered` leaves of some expressions / constraints / leaves."""
    items = list(items)
    leaves = [x for x in items if isinstance(x, Leaf)]
    others = [x for x in items if not isinstance(x, Leaf)]
    registered: dict[tuple, Leaf] = {}
    for lf in leaves + leaves_of(others):
        registered.setdefault(lf.key, lf)
    if not registered:
        raise RatesError("nothing to evaluate: the expressions have no rate or loss leaf")
    leaf_list = list(registered.values())
    subsets: dict[tuple, Subset] = {}
    for lf in leaf_list:
        subsets.setdefault(lf.where.key(), lf.where)
    subset_index = {k: i for i, k in enumerate(subsets)}
    indicators: dict[Indicator, None] = {}
    losses: dict[str, Loss] = {}
    for lf in leaf_list:
        if lf.event is not None and lf.event.depends_on_model:
            indicators.setdefault(lf.event.indicator, None)
        elif lf.loss is not None:
            losses.setdefault(lf.loss.name, lf.loss)
    return Registered(leaf_list, list(subsets.values()),
                      [subset_index[lf.where.key()] for lf in leaf_list],
                      list(indicators), list(losses.values()))


def compile_plan(reg: Registered, batch: Batch) -> _Plan:
    """The :class:`_Plan` of ``reg``'s leaves on batches laid out as ``batch``."""
    hard, soft = _factors(reg, batch)
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
    members = [membership(s) for s in reg.subsets]     # sorted cell ids per subset
    if batch.unlabeled_sources:
        _check_unlabeled(reg, batch, coords.get("source"), members)
    # Each subset's label / baseline part: the (label, baseline) pairs, 2·y + o, that some
    # cell of the subset has (group and source conditions dropped; g = b & y = 1 → y = 1).
    part = (coords.get("label", np.zeros(cells, dtype=np.int64)) * 2
            + coords.get("baseline", np.zeros(cells, dtype=np.int64)))
    projected = [np.unique(part[mem]) for mem in members]
    n_ind, n_loss = len(reg.indicators), len(reg.losses)
    columns = 1 + 3 * n_ind + n_loss
    ind_pos = {ind: j for j, ind in enumerate(reg.indicators)}
    loss_pos = {lo.name: j for j, lo in enumerate(reg.losses)}
    k = len(reg.leaves)
    tables = _leaf_tables(reg.leaves, ind_pos, loss_pos, n_ind)
    n_rows = 3 * k + len(reg.subsets) + 1
    rows, cols, vals = _entries(reg, coords, cells, members, columns, tables)
    # The fallback rows (see _Plan.fallback) read the cell sums folded into the four
    # parts ([4·columns]: O(cells) once), not the cells: K rows over the cells would
    # cost O(K·cells) per pass where groups are many.
    parts = np.arange(4)
    fb = _fallback_entries([projected[j] for j in reg.leaf_subset], parts // 2,
                           parts % 2, tables, columns)
    fold = (part[:, None] * columns + np.arange(columns)).reshape(-1)    # cell·col → part
    index = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]))
    values = torch.from_numpy(np.concatenate(vals)).to(torch.float64)
    matrix = torch.sparse_coo_tensor(
        index, values, (n_rows, cells * columns), check_invariants=True).coalesce()
    matrix = matrix.to(batch.device)
    m_rows, m_cols = matrix.indices()
    plan = _Plan(factors, hard_cells, soft_cells, columns, matrix,
                 torch.tensor(reg.leaf_subset, device=batch.device), k, len(reg.subsets),
                 m_rows, m_cols, {torch.float64: matrix.values()})
    plan.identity = reg.leaf_subset == list(range(len(reg.subsets)))
    plan.fallback = _Rows.build(*(torch.from_numpy(x).to(batch.device) for x in fb),
                                2 * k, 4 * columns)
    plan.fold = torch.from_numpy(fold).to(batch.device)
    if n_rows * cells * columns <= DENSE_LIMIT:
        plan.dense = {torch.float64: matrix.to_dense()}
    if not soft and not reg.losses and n_ind:
        plan.fused = _fused_plan(m_rows, m_cols, matrix.values(), k, n_rows, cells,
                                 columns, n_ind)
    return plan


def _leaf_tables(leaves: Sequence[Leaf], ind_pos: Mapping[Indicator, int],
                 loss_pos: Mapping[str, int], n_ind: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per leaf: its event's ``a`` and ``b`` tables ``[K, 2, 2]`` (zeros for a loss; ``b``
    zeros for an event that reads no model), the column of its indicator's hits and
    the column of its loss (``-1``: an event's)."""
    k = len(leaves)
    a_tab, b_tab = np.zeros((k, 2, 2)), np.zeros((k, 2, 2))
    b_col, loss_col = np.zeros(k, dtype=np.int64), np.full(k, -1, dtype=np.int64)
    for i, lf in enumerate(leaves):
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


def _factors(reg: Registered, batch: Batch) -> tuple[list[_Factor], list[_Factor]]:
    """The hard and the soft factors whose cells the subsets need (label, baseline,
    source, each group attribute), after checking that ``batch`` carries each."""
    literals = [lit for s in reg.subsets for lit in s.literals()]
    uses_label = any(isinstance(x, LabelIs) for x in literals) or any(
        lf.event is not None and lf.event.uses_label for lf in reg.leaves)
    uses_baseline = any(isinstance(x, BaselineIs) for x in literals) or any(
        lf.event is not None and lf.event.uses_baseline for lf in reg.leaves)
    uses_source = any(isinstance(x, SourceIs) for x in literals)
    attrs = list(dict.fromkeys(x.attribute for x in literals if isinstance(x, GroupIs)))
    _check_batch(reg, batch, uses_label, uses_baseline, uses_source, attrs)
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


def _check_batch(reg: Registered, batch: Batch, uses_label: bool, uses_baseline: bool,
                 uses_source: bool, attrs: Sequence[str]) -> None:
    """Refuse a batch that lacks a factor the subsets or events read."""
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
    if batch.probabilities is not None and any(i != DEFAULT_INDICATOR for i in reg.indicators):
        raise RatesError("threshold events need scores; probabilities give only P(s > 0)")


def _check_unlabeled(reg: Registered, batch: Batch, source: np.ndarray | None,
                     members: Sequence[np.ndarray]) -> None:
    """Refuse a leaf that reads labels (:attr:`Leaf.reads_labels`) over a subset that may
    hold rows of an unlabeled source (paper 001's unlabeled data sets: their labels are
    placeholders). Once per plan, on the subsets' cells: no device work."""
    names = list(batch.source_names or [])
    unlabeled = [names.index(u) for u in batch.unlabeled_sources]
    for lf, j in zip(reg.leaves, reg.leaf_subset, strict=True):
        if not lf.reads_labels or len(members[j]) == 0:
            continue
        # without a source factor a subset holds rows of every source
        held = (set(unlabeled) if source is None
                else set(np.unique(source[members[j]]).tolist()) & set(unlabeled))
        if held:
            bad = ", ".join(repr(names[i]) for i in sorted(held))
            labeled = [n for n in names if n not in batch.unlabeled_sources]
            hint = (f"where=source({labeled[0]!r}) (or & ~source({names[min(held)]!r}))"
                    if labeled else "a labeled source")
            raise RatesError(
                f"the rate {lf} reads labels, but its subset holds rows of the unlabeled "
                f"source {bad}, whose labels are placeholders: restrict it to labeled "
                f"rows, e.g. {hint}, or give that source its label column")


def _entries(reg: Registered, coords: Mapping[str, np.ndarray], cells: int,
             members: list[np.ndarray], columns: int, tables: tuple[np.ndarray, ...]
             ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The plan matrix's non-zeros ``(rows, cols, values)`` as lists of blocks: the
    leaves' true / upper / lower rows, the subsets' weight rows and the total weight."""
    y = coords.get("label", np.zeros(cells, dtype=np.int64))
    o = coords.get("baseline", np.zeros(cells, dtype=np.int64))
    k = len(reg.leaves)
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
    counts = np.array([len(members[j]) for j in reg.leaf_subset], dtype=np.int64)
    leaf = np.repeat(np.arange(k), counts)
    cell = (np.concatenate([members[j] for j in reg.leaf_subset]) if k
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
    put(3 * k + len(reg.subsets), np.arange(cells), 0, np.ones(cells))
    return rows, cols, vals


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
