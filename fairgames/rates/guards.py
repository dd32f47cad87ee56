"""A guard proving that code makes no host-device synchronisation.

On CPU there is no device to wait for, so syncs are caught where they start: every
``.item()``, ``bool(tensor)``, ``int(tensor)`` or data-dependent shape reads a scalar through
``aten._local_scalar_dense`` (and ``nonzero``/``unique`` through their own ops). The guard is a
``TorchDispatchMode`` that raises on those ops, and on ops whose output size depends on values
(indexing with a boolean mask, ``repeat_interleave`` without ``output_size``): on CPU these run
``nonzero`` below the dispatch mode, where the guard cannot see it. On a GPU, combine it with
``torch.cuda.set_sync_debug_mode("error")``.

Example:
    >>> import torch
    >>> with no_host_sync():
    ...     y = torch.ones(3) * 2          # fine
    >>> try:
    ...     with no_host_sync():
    ...         _ = float(torch.ones(1).sum())
    ... except RuntimeError as e:
    ...     print("caught")
    caught
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SYNCING_OPS = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::unique_consecutive",
    "aten::_unique2",
    "aten::masked_select",
    "aten::is_nonzero",
    "aten::equal",
}


def _data_dependent_size(name: str, args: tuple, kwargs: dict) -> bool:
    """Ops that sync only for some arguments (their CPU kernels call nonzero internally)."""
    if name == "aten::index" and len(args) > 1:
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                   for i in args[1])
    if name == "aten::repeat_interleave":
        repeats = args[1] if len(args) > 1 else (args[0] if args else None)
        return isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None
    return False


class NoHostSync(TorchDispatchMode):
    """Raise ``RuntimeError`` on any op that copies a data-dependent value to the host.

    Example:
        >>> import torch
        >>> x = torch.tensor([1.0, -2.0])
        >>> with NoHostSync():
        ...     y = x.clamp(min=0) * 2           # no sync: fine
        >>> try:
        ...     with NoHostSync():
        ...         _ = x[x > 0]                 # boolean mask: data-dependent size
        ... except RuntimeError as e:
        ...     print(e)
        host-device sync: aten::index was called inside no_host_sync()
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in _SYNCING_OPS or _data_dependent_size(name, args, kwargs or {}):
            raise RuntimeError(f"host-device sync: {name} was called inside no_host_sync()")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Context manager form of :class:`NoHostSync` (plus CUDA's sync debug mode on a GPU).

    Example:
        >>> import torch
        >>> with no_host_sync():
        ...     total = torch.ones(3).sum()      # stays a tensor: no sync
        >>> float(total)
        3.0
    """
    cuda = torch.cuda.is_available()
    previous = torch.cuda.get_sync_debug_mode() if cuda else 0
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        with NoHostSync():
            yield
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(previous)
