"""Freed heap returned to the system between reduction iterations (glibc's malloc_trim)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# In a fresh process, so that the pattern does not depend on what this one allocated before:
# row-sized temporaries from the heap (mallopt pins the mmap threshold above them, as glibc's
# adaptive threshold does once a larger block was freed), each followed by a small survivor.
PATTERN = """
import ctypes, sys
from pathlib import Path
import numpy as np
from fairgames.fair_regression.heap import release_freed_heap
def resident_mb():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20
ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 25)         # M_MMAP_THRESHOLD: 32 MB
temporaries, survivors = [], []
for _ in range(300):                                  # ≈ 72 MB of temporaries
    temporaries.append(np.ones(30_000))
    survivors.append(np.ones(512))              # 4 KB: from the top
del temporaries
before = resident_mb()
released = release_freed_heap()
print(released, before - resident_mb(), len(survivors))
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere it is a no-op")
def test_freed_row_sized_arrays_pinned_by_small_survivors_are_returned():
    """Freeing the temporaries leaves their pages resident (the survivors pin the heap's
    top); release_freed_heap gives them back."""
    out = subprocess.run([sys.executable, "-c", PATTERN], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "True" and out[2] == "300"
    assert float(out[1]) > 40, out
