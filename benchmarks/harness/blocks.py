"""The interleaved-block timer: milliseconds per step of several columns, block by block.

Round r times every column's r-th block, so a slow phase of a shared machine weighs on every
column alike instead of on one. Each block starts with a few untimed steps, so that it is not
charged for the caches the previous column's block left cold. The clock is wall time
(``"wall"``) or the process's CPU time (``"cpu"``, blind to the time other processes of a
shared machine take; meaningful with one thread on the CPU).

Example:
    >>> out = timed({"a": lambda: None, "b": lambda: None}, steps=5, repeats=2, clock="cpu")
    >>> sorted(out), all(v >= 0 for v in out.values())
    (['a', 'b'], True)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def _syncer(device: Any) -> Callable[[], None]:
    """A CUDA device's synchronisation (timed blocks must include the queued kernels)."""
    if device is None or getattr(device, "type", str(device)) != "cuda":
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize(device)


def blocks(columns: Mapping[str, Callable[[], None]], steps: int, repeats: int,
           clock: str | Callable[[], float] = "wall", device: Any = None,
           block_warmup: int | None = None) -> dict[str, list[float]]:
    """Per column, the mean ms per step of each of its ``repeats`` blocks of ``steps`` steps.

    Every column first runs ``max(5, steps // 5)`` untimed steps; each block is preceded by
    ``block_warmup`` (default ``max(3, steps // 10)``) untimed steps of its column."""
    tick = CLOCKS[clock] if isinstance(clock, str) else clock
    sync = _syncer(device)
    warm = max(3, steps // 10) if block_warmup is None else block_warmup
    for step in columns.values():
        for _ in range(max(5, steps // 5)):
            step()
    sync()
    out: dict[str, list[float]] = {name: [] for name in columns}
    for _ in range(repeats):
        for name, step in columns.items():
            for _ in range(warm):
                step()
            sync()
            t0 = tick()
            for _ in range(steps):
                step()
            sync()
            out[name].append((tick() - t0) / steps * 1e3)
    return out


def timed(columns: Mapping[str, Callable[[], None]], steps: int, repeats: int,
          clock: str | Callable[[], float] = "wall", device: Any = None) -> dict[str, float]:
    """Per column, the median over its blocks of the mean ms per step (:func:`blocks`)."""
    return {name: statistics.median(b)
            for name, b in blocks(columns, steps, repeats, clock, device).items()}
