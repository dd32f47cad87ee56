"""A guard proving that code makes no host-device synchronisation.

On CPU there is no device to wait for, so syncs are caught where they start: every
``.item()``, ``bool(tensor)``, ``int(tensor)`` or data-dependent shape reads a scalar through
``aten._local_scalar_dense`` (and ``nonzero``/``unique`` through their own ops). The guard is a
``TorchDispatchMode`` that raises on those ops. On a GPU, combine it with
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
}


class NoHostSync(TorchDispatchMode):
    """Raise ``RuntimeError`` on any op that copies a data-dependent value to the host."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in _SYNCING_OPS:
            raise RuntimeError(f"host-device sync: {name} was called inside no_host_sync()")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Context manager form of :class:`NoHostSync` (plus CUDA's sync debug mode on a GPU)."""
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
