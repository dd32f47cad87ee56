"""Paper reproductions (000, 003, 004) and the studies built on their cells.

Run from the repository root, e.g. ``python -m benchmarks.reproduce.reproduce_000 --quick``.
Cells are stored with :mod:`benchmarks.harness.cells`; each summary regenerates from its
archive (``--tables-only`` / ``--report-only``, or ``python -m benchmarks.harness.report``).
"""
