"""Turn a sweep into a fairness–accuracy frontier: ``python scripts/frontier.py SWEEP_DIR``.

Reads every ``results.json`` under ``SWEEP_DIR`` (e.g. the ``multirun/...`` directory of
``python scripts/train.py -m problem.tolerance=0.01,0.02,0.05 seed=0,1,2``) and writes, next
to it (or to ``--out``):

* ``runs.csv`` — one row per run, solution and split;
* ``frontier.csv`` and ``frontier.md`` — means and standard deviations over seeds per
  tolerance and solution, on ``--split`` (default test);
* ``frontier.png`` — achieved unfairness against ``--metric`` (error or objective).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fairgames.train.sweep import collect, frontier, plot_frontier, to_markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="directory holding the runs of a sweep")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--split", default="test", choices=["train", "validation", "test"])
    parser.add_argument("--metric", default="error", choices=["error", "objective"])
    args = parser.parse_args(argv)
    try:
        rows = collect(args.sweep_dir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or args.sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    table = frontier(rows, args.split)
    rows.to_csv(out / "runs.csv", index=False)
    table.to_csv(out / "frontier.csv", index=False)
    md = to_markdown(table)
    (out / "frontier.md").write_text(md + "\n")
    plot_frontier(table, out / "frontier.png", args.metric)
    print(md)
    print(f"\nwrote {out / 'frontier.csv'}, {out / 'frontier.md'}, {out / 'frontier.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
