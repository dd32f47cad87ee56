"""The machine record every result carries, and a stopwatch of wall and CPU time.

The record names the CPU, the thread count, torch's version, the device and the git commit
(``FAIRGAMES_GIT`` where the tree has no ``.git``, e.g. a copy on a lent GPU machine), and the
thread variables the process started with (:mod:`benchmarks.harness.threads`).

Example:
    >>> with Stopwatch() as t:
    ...     _ = sum(range(1000))
    >>> t.wall_s >= 0 and t.cpu_s >= 0
    True
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import threads as _threads


class Stopwatch:
    """Wall-clock and process CPU seconds of a ``with`` block (``wall_s``, ``cpu_s``).

    Both, because on a shared machine wall time also counts what other jobs take from the
    process, while CPU time of a one-thread process does not."""

    def __enter__(self) -> Stopwatch:
        self.wall_s, self.cpu_s = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall_s = time.perf_counter() - self.wall_s
        self.cpu_s = time.process_time() - self.cpu_s


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """The short commit of the benchmarks' tree, else ``$FAIRGAMES_GIT``, else ``unknown``."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("FAIRGAMES_GIT", "unknown")


def machine(device: Any = "cpu", threads: int | None = None) -> dict[str, Any]:
    """The record: cpu, threads (torch's count when not given), torch, device, git, and the
    thread variables of the environment."""
    import torch  # here, not at the top: threads.py must run before torch loads

    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"cpu": cpu_name(), "threads": threads or torch.get_num_threads(),
            "torch": torch.__version__, "device": name, "git": git_commit(),
            "thread_env": _threads.environment()}
