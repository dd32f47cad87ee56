"""The benchmark process's thread count, fixed before any numerical library is imported.

OpenMP and MKL read their thread counts once, when torch or numpy loads them; setting them
later (``torch.set_num_threads``) does not reach every pool. So the package's ``__init__``
imports this module before any script's body runs: on import it reads ``--threads N`` (or
``--threads=N``) from the command line, else the environment variable ``FAIRGAMES_BENCH_THREADS``,
and when one is given exports it as ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``OPENBLAS_NUM_THREADS``. Without either it changes nothing (the library defaults, or what
the caller's environment set). The script's own ``--threads`` option still parses as before.

Example:
    >>> requested(["--quick", "--threads", "2"]), requested(["--threads=3"]), requested([])
    (2, 3, None)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

ENV = "FAIRGAMES_BENCH_THREADS"
VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def requested(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None
              ) -> int | None:
    """The thread count asked for by ``argv`` (``--threads N``), else by ``$ENV``; or None."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--threads=") and arg.split("=", 1)[1].isdigit():
            return int(arg.split("=", 1)[1])
    value = (os.environ if environ is None else environ).get(ENV, "")
    return int(value) if value.isdigit() else None


def configure(argv: Sequence[str] | None = None) -> int | None:
    """Export the requested count to the thread variables (before torch loads); returns it."""
    n = requested(argv)
    if n:
        for name in VARIABLES:
            os.environ[name] = str(n)
    return n


def environment() -> dict[str, str | None]:
    """The thread variables as this process saw them (for the machine record)."""
    return {name: os.environ.get(name) for name in VARIABLES}


# On import: ``benchmarks/__init__.py`` imports this module, so it runs before the body of any
# ``python -m benchmarks.<sub>.<name>`` (and before that script's torch import). A test process
# has no ``--threads`` in its argv and no ``$FAIRGAMES_BENCH_THREADS``: nothing changes there.
THREADS = configure()
