"""What every benchmark script shares, one module per job.

* :mod:`~benchmarks.harness.threads` — the thread count, set before torch or numpy loads
  (import it first);
* :mod:`~benchmarks.harness.machine` — the machine record and a wall + CPU stopwatch;
* :mod:`~benchmarks.harness.blocks` — the interleaved-block timer;
* :mod:`~benchmarks.harness.stats` — quartiles;
* :mod:`~benchmarks.harness.results` — goals and the one result writer (JSON + its summary);
* :mod:`~benchmarks.harness.report` — the generated ``<stem>.md`` of a result JSON;
* :mod:`~benchmarks.harness.cells` — the per-cell archives of the reproductions.

Nothing here imports torch at import time, so that :mod:`~benchmarks.harness.threads` can
still set the thread variables when imported first.
"""
