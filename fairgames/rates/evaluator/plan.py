"""A compiled plan: the cell layout of a batch and the sparse matrix that maps its per-cell
column sums to every leaf's numerators and every subset's weight (:class:`_Plan`), with the
float32 linear maps the passes apply (:class:`_Rows`, :class:`_FusedPlan`).
:mod:`.compile` builds them once per batch layout."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# A plan whose matrix has at most this many entries is applied as a dense mat-vec.
DENSE_LIMIT = 1 << 15


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
