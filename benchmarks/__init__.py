"""fairgames' benchmarks: speed measurements and paper reproductions, with one harness.

Run from the repository root as modules, e.g.::

    python -m benchmarks.speed.step_overhead --quick
    python -m benchmarks.reproduce.reproduce_000 --tables-only --steps 1500
    python -m benchmarks.harness.report benchmarks/results/step_overhead.json

``benchmarks.harness`` holds what every script shares (threads, machine record, the
interleaved-block timer, quartiles, the result writer and its summaries, the cell store);
``benchmarks.speed`` the timing scripts; ``benchmarks.reproduce`` the paper reproductions and
the studies built on their cells. Results live flat in ``benchmarks/results/``. The package is
not shipped in the wheel (``[tool.setuptools.packages.find]`` includes ``fairgames*`` only).
"""

# First, before any script's body imports torch or numpy: the thread variables (--threads).
from benchmarks.harness import threads  # noqa: E402, F401
