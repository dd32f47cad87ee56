"""Row matrices of the compiled Lagrangian, dense or sparse (CSR) by size.

A row ``A_j`` of the Lagrangian reads a few leaves (a constraint TPR(g) ≥ TPR − 0.05 reads
two), so with one constraint per group the ``[M, K]`` matrix holds ``≈ 2M`` non-zeros among
``M·K`` entries: at K = 10 000 the dense matrix (and its transpose, positive and negative
parts) is gigabytes and every step's mat-vecs read all of it. At or above
:data:`SPARSE_ENTRIES` entries (``M·K``) the rows are stored as CSR and the mat-vecs cost
O(nnz); below, dense as before (the same kernels, so small problems replay bit for bit).

The CSR parts are plain buffers (``crow``, ``col``, ``val``) of a module, so ``.to()``,
``deepcopy`` and checkpoints treat them like any tensor; the CSR view is made per call
(a few µs, no copy).

Example:
    >>> import torch
    >>> m = RowMatrix([{0: 1.0, 2: -1.0}, {1: 2.0}], 3, sparse=True)
    >>> m.mv(torch.tensor([1.0, 2.0, 3.0])).tolist(), m.t().mv(torch.tensor([1.0, 1.0])).tolist()
    ([-2.0, 4.0], [1.0, 2.0, -1.0])
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch

SPARSE_ENTRIES = 1 << 18
"""``M·K`` at or above which a row matrix is stored sparse (about K ≥ 512 with one row per
leaf): below it, a dense mat-vec is as fast and keeps the recorded trajectories exact."""

Row = Mapping[int, float] | Sequence[float]

_RECORDING = [False]


@contextmanager
def recordable_products(modules: Iterable[torch.nn.Module] = ()) -> Iterator[None]:
    """Sparse row matrices multiply by a gather and an ``index_add`` of their COO entries
    (O(nnz), the same products up to the summation order) instead of a CSR mat-vec: a
    graph recorder (``make_fx``, for :meth:`ConstrainedOptimizer.capture`) cannot trace
    sparse tensors, dense device ops it can. The sparse row matrices among ``modules`` get
    their entries' rows made first (a recording would otherwise make them on every replay)."""
    for m in modules:
        if isinstance(m, RowMatrix) and m.sparse:
            m.entry_rows()
    previous, _RECORDING[0] = _RECORDING[0], True
    try:
        yield
    finally:
        _RECORDING[0] = previous


def is_sparse_size(rows: int, cols: int) -> bool:
    """Whether an ``[rows, cols]`` row matrix is stored sparse (:data:`SPARSE_ENTRIES`)."""
    return rows * cols >= SPARSE_ENTRIES


def entries(rows: Sequence[Row]) -> tuple[list[int], list[int], list[float]]:
    """``(row, col, value)`` of every entry: a mapping row's own entries, a list row's
    non-zeros."""
    r: list[int] = []
    c: list[int] = []
    v: list[float] = []
    for j, row in enumerate(rows):
        items = row.items() if isinstance(row, Mapping) else (
            (i, x) for i, x in enumerate(row) if x != 0.0)
        for i, x in items:
            r.append(j)
            c.append(int(i))
            v.append(float(x))
    return r, c, v


def dense_rows(rows: Sequence[Row], cols: int) -> torch.Tensor:
    """The ``[M, cols]`` float32 matrix of ``rows`` (a list row as given, a mapping row's
    entries on zeros)."""
    if all(not isinstance(row, Mapping) for row in rows):
        return torch.tensor(list(rows), dtype=torch.float32).reshape(len(rows), cols)
    out = torch.zeros(len(rows), cols)
    for j, row in enumerate(rows):
        if isinstance(row, Mapping):
            if row:
                out[j, list(row)] = torch.tensor(list(row.values()), dtype=torch.float32)
        else:
            out[j] = torch.tensor(list(row), dtype=torch.float32)
    return out


class RowMatrix(torch.nn.Module):
    """An ``[M, K]`` matrix given by rows (mappings col → value, or dense lists), stored
    dense or as CSR (``sparse=None``: by :func:`is_sparse_size`), with :meth:`mv`,
    :meth:`t`, :meth:`positive`, :meth:`negative` and :meth:`dense`."""

    def __init__(self, rows: Sequence[Row], cols: int, *, sparse: bool | None = None
                 ) -> None:
        super().__init__()
        self.shape = (len(rows), int(cols))
        self.sparse = is_sparse_size(*self.shape) if sparse is None else bool(sparse)
        if self.sparse:
            r, c, v = entries(rows)
            self._set_coo(torch.tensor(r, dtype=torch.long), torch.tensor(c, dtype=torch.long),
                          torch.tensor(v, dtype=torch.float32))
        else:
            self.register_buffer("matrix", dense_rows(rows, cols), persistent=False)

    def _set_coo(self, r: torch.Tensor, c: torch.Tensor, v: torch.Tensor) -> None:
        crow, col, val = _csr(r, c, v, self.shape)
        self.register_buffer("crow", crow, persistent=False)
        self.register_buffer("col", col, persistent=False)
        self.register_buffer("val", val, persistent=False)

    def _derived(self, shape: tuple[int, int], dense: torch.Tensor | None,
                 coo: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> RowMatrix:
        out = RowMatrix.__new__(RowMatrix)
        torch.nn.Module.__init__(out)
        out.shape, out.sparse = shape, self.sparse
        if coo is not None:
            out._set_coo(*coo)
        else:
            out.register_buffer("matrix", dense, persistent=False)
        return out

    def _coo(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.entry_rows(), self.col, self.val

    def entry_rows(self) -> torch.Tensor:
        """Each stored entry's row (CSR keeps only the row starts), cached while the buffers
        stay the same tensors: the recordable product's ``index_add`` target. Made before a
        step is recorded, so that the recording reads it as a constant."""
        key = (self.crow.device, self.crow.data_ptr())
        cached = self.__dict__.get("_entry_rows")
        if cached is None or cached[0] != key:
            rows = torch.repeat_interleave(
                torch.arange(self.shape[0], device=self.crow.device), self.crow.diff())
            self.__dict__["_entry_rows"] = cached = (key, rows)
        return cached[1]

    def __getstate__(self) -> dict:
        # the cached CSR view cannot be copied (torch has no storage for it): made again
        return {k: v for k, v in self.__dict__.items() if k not in ("_csr_view", "_entry_rows")}

    @property
    def nnz(self) -> int:
        return int(self.val.numel()) if self.sparse else int(self.matrix.count_nonzero())

    def csr(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The CSR view (kept while the buffers stay the same tensors: making one costs
        ≈ 0.2 ms at K = 10 000)."""
        dtype = self.val.dtype if dtype is None else dtype
        key = (dtype, self.val.device, self.val.data_ptr(), self.crow.data_ptr())
        cached = self.__dict__.get("_csr_view")
        if cached is None or cached[0] != key:
            val = self.val if dtype == self.val.dtype else self.val.to(dtype)
            view = torch.sparse_csr_tensor(self.crow, self.col, val, self.shape,
                                           check_invariants=False)
            self.__dict__["_csr_view"] = cached = (key, view)
        return cached[1]

    def mv(self, x: torch.Tensor) -> torch.Tensor:
        """``A @ x`` [M] (in ``x``'s precision)."""
        if not self.sparse:
            return torch.mv(self.matrix if x.dtype == self.matrix.dtype
                            else self.matrix.to(x.dtype), x)
        if _RECORDING[0]:
            out = torch.zeros(self.shape[0], dtype=x.dtype, device=x.device)
            return out.index_add_(0, self.entry_rows(), self.val.to(x.dtype) * x[self.col])
        return torch.mv(self.csr(x.dtype), x)

    def dense(self) -> torch.Tensor:
        """The matrix as a dense tensor (``[M, K]``: for small problems and reports)."""
        return self.matrix if not self.sparse else self.csr().to_dense()

    def t(self) -> RowMatrix:
        """``Aᵀ`` [K, M], stored the same way."""
        shape = (self.shape[1], self.shape[0])
        if not self.sparse:
            return self._derived(shape, self.matrix.t().contiguous(), None)
        r, c, v = self._coo()
        return self._derived(shape, None, (c, r, v))

    def positive(self) -> RowMatrix:
        """``A⁺ = max(A, 0)``."""
        if not self.sparse:
            return self._derived(self.shape, self.matrix.clamp_min(0.0), None)
        r, c, v = self._coo()
        return self._derived(self.shape, None, (r, c, v.clamp_min(0.0)))

    def negative(self) -> RowMatrix:
        """``A⁻ = min(A, 0)``."""
        if not self.sparse:
            return self._derived(self.shape, self.matrix.clamp_max(0.0), None)
        r, c, v = self._coo()
        return self._derived(self.shape, None, (r, c, v.clamp_max(0.0)))


def _csr(r: torch.Tensor, c: torch.Tensor, v: torch.Tensor, shape: tuple[int, int]
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CSR parts of the COO entries (duplicates summed)."""
    with warnings.catch_warnings():   # torch's "sparse CSR support is in beta" notice
        warnings.simplefilter("ignore", UserWarning)
        coo = torch.sparse_coo_tensor(torch.stack([r, c]), v, shape,
                                      check_invariants=False).coalesce()
        csr = coo.to_sparse_csr()
    return csr.crow_indices(), csr.col_indices(), csr.values()
