"""Returning the C heap's free pages to the operating system between reduction iterations.

A reduction iteration allocates row-sized temporaries (the ``[n, N]`` costs, Newton's
``[n]`` derivatives) and keeps a few small objects (the iterate's parameters, its record).
Under glibc's adaptive mmap threshold the temporaries come from the heap once one of them has
been freed, and the small survivors allocated above them stop the heap's top from shrinking:
the freed pages stay resident. On full Adult's 22 612 rows that was ≈ 0.3 MB an LR iteration
(≈ 6 GB by a 20 000-iteration run's end); ``malloc_trim`` every 50 iterations keeps the run
flat for ≈ 0.2 % of its time (benchmarks/results/reproduce_003.discussion.md, "Full Adult:
started").

Example:
    >>> import platform
    >>> release_freed_heap() == (platform.libc_ver()[0] == "glibc")
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_heap() -> bool:
    """``malloc_trim(0)`` under glibc (every free page of the heap back to the system, not
    only its top); ``False`` where there is no glibc (nothing to do: other allocators return
    their memory themselves)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
