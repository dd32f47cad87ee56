"""Sparse kernels for a linear layer that sees the same mostly-zero feature matrix every step.

A full-batch game step multiplies the whole training matrix twice — the scores ``X w`` and the
weight gradient ``Xᵀ g`` — and on tabular data (one-hot columns: Adult's 105 features are 89 %
zeros) both dense products are memory-bound: once the rest of the step has pushed ``X`` out of
the cache they cost several times their in-cache time. Stored as CSR (of ``X`` and of ``Xᵀ``,
built once and kept while the same tensor comes back unchanged), the two products read only
the nonzeros. Minibatches are new tensors every step and keep the dense kernels.

The sums run in another order than the dense BLAS kernels, so scores and gradients agree with
them to rounding, not bit for bit: ``sparse_inputs="off"`` keeps the dense arithmetic (the
paper-000 protocol pins it). Each CSR row is summed by one thread, so the result does not
depend on the thread count.

Example:
    >>> import torch
    >>> cache = CsrCache()
    >>> x = torch.zeros(4096, 32); x[:, 0] = 1.0
    >>> w, b = torch.ones(1, 32, requires_grad=True), torch.zeros(1, requires_grad=True)
    >>> cache.scores(x, w, b) is None      # first sight: the dense kernels this time
    True
    >>> s = cache.scores(x, w, b); s.sum().backward(); w.grad[0, :2].tolist()
    [4096.0, 0.0]
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch

SPARSE_INPUTS = ("auto", "off")
MAX_DENSITY = 0.25          # above it the CSR pair is bigger than X and the kernels no faster
MIN_ELEMENTS = 65_536       # below it X stays in cache and the dense kernels win


def sparse_inputs_option(value: str) -> str:
    """Check a ``sparse_inputs`` option: ``"auto"`` (CSR kernels for a repeated sparse
    full batch in training) or ``"off"`` (always the dense kernels).

    Example:
        >>> sparse_inputs_option("off")
        'off'
    """
    if value not in SPARSE_INPUTS:
        raise ValueError(f"unknown sparse_inputs {value!r}; choose from {list(SPARSE_INPUTS)} "
                         "('off': the dense kernels, bit for bit as before)")
    return value


class _CsrLinear(torch.autograd.Function):
    """``X w + b`` from the CSR of ``X``; the weight gradient ``Xᵀ g`` from the CSR of ``Xᵀ``."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, bias: torch.Tensor | None,
                csr: torch.Tensor, csr_t: torch.Tensor) -> torch.Tensor:
        ctx.csr_t, ctx.has_bias = csr_t, bias is not None
        out = torch.mv(csr, weight[0])
        return out + bias if bias is not None else out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad = grad.contiguous()
        grad_weight = torch.mv(ctx.csr_t, grad).unsqueeze(0)
        grad_bias = grad.sum().reshape(1) if ctx.has_bias else None
        return grad_weight, grad_bias, None, None


PROBE_ROWS = 4096           # the density is read from the CSR of the first rows


def _csr(x: torch.Tensor) -> torch.Tensor:
    """``x`` as CSR with int32 indices where they fit (the sparse kernels' own index type)."""
    with warnings.catch_warnings():     # "sparse CSR support is in beta": these two ops are not
        warnings.simplefilter("ignore", UserWarning)
        out = x.to_sparse_csr()
        if x.numel() < 2**31:
            out = torch.sparse_csr_tensor(out.crow_indices().int(), out.col_indices().int(),
                                          out.values(), out.shape)
    return out


def _sparse_enough(x: torch.Tensor) -> bool:
    """The first rows' share of nonzeros is at most :data:`MAX_DENSITY`, read from their CSR's
    size (a shape, not a scalar read of a tensor: no host sync)."""
    probe = x[:PROBE_ROWS]
    return _csr(probe).values().numel() <= MAX_DENSITY * probe.numel()


class CsrCache:
    """The CSR pair of the last feature matrix a linear layer trained on, rebuilt when another
    tensor (or the same one modified in place) comes. Not part of the module's state: a copy
    or a pickle of the module starts empty.

    Example:
        >>> import copy
        >>> copy.deepcopy(CsrCache()).__dict__
        {'_ref': None, '_version': -1, '_pair': None, '_seen': 0}
    """

    def __init__(self) -> None:
        self._ref: weakref.ref[torch.Tensor] | None = None
        self._version = -1
        self._pair: tuple[torch.Tensor, torch.Tensor] | None = None
        self._seen = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> CsrCache:
        return CsrCache()

    def __getstate__(self) -> dict[str, Any]:
        return CsrCache().__dict__

    def scores(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
               ) -> torch.Tensor | None:
        """``x @ weightᵀ + bias`` as ``[B]`` by the CSR kernels, or ``None`` where the dense
        ones are the ones to use (the caller's): ``x`` not a large, sparse, CPU float matrix
        seen on the previous call too, or a graph the custom backward cannot serve."""
        if not _eligible(x, weight):
            return None
        if self._ref is None or self._ref() is not x or self._version != x._version:
            self._ref, self._version, self._pair, self._seen = weakref.ref(x), x._version, None, 0
        self._seen += 1
        if self._seen == 2 and _sparse_enough(x):   # the same tensor twice: a full batch
            self._pair = (_csr(x), _csr(x.t()))
        if self._pair is None:
            return None
        return _CsrLinear.apply(weight, bias, *self._pair)


def _eligible(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """A plain strided CPU float matrix with no gradient of its own, large enough to gain,
    outside graph capture (torch.compile traces the dense layer)."""
    return (x.layout == torch.strided and x.dim() == 2 and x.device.type == "cpu"
            and x.dtype in (torch.float32, torch.float64) and x.dtype == weight.dtype
            and not x.requires_grad and x.numel() >= MIN_ELEMENTS
            and type(x) is torch.Tensor and not torch.compiler.is_compiling()
            and not torch._C._functorch.is_functorch_wrapped_tensor(x))
