"""Turn a sweep into a fairness–accuracy frontier: ``python scripts/frontier.py SWEEP_DIR``.

Reads every ``results.json`` under ``SWEEP_DIR`` (e.g. the ``multirun/...`` directory of
``python scripts/train.py -m problem.tolerance=0.01,0.02,0.05 seed=0,1,2``) and writes, next
to it (or to ``--out``):

* ``runs.csv`` — one row per run, solution and split;
* ``frontier.csv`` and ``frontier.md`` — means and standard deviations over seeds per
  tolerance and solution, on ``--split`` (default test), with ``on_envelope``: the rows on
  the lower convex envelope of (unfairness, ``--metric``) per algorithm and solution, chosen
  on train (paper 003's protocol) and read on ``--split``;
* ``frontier.png`` — achieved unfairness against ``--metric`` (error, objective / loss, mse,
  mae) on the split its title names, for the recommended solution (``--solutions all``: every
  solution), the envelopes dashed; ``--panels train,test`` draws one panel per split.

``--unfairness`` is the x axis: ``ks`` (the exact KS disparity regression runs report; the
default where the runs have it), ``grid`` (the grid's worst gap) or ``constraints`` (the
largest constraint value + tolerance; the default otherwise). For a regression sweep::

    python scripts/train.py -m problem=sp_regression data=law problem.tolerance=0.01,0.05,0.1
    python scripts/frontier.py multirun/... --metric mse --panels train,test
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fairgames.train.files import write_text
from fairgames.train.sweeps.sweep import (
    UNFAIRNESS,
    collect,
    default_metric,
    default_unfairness,
    frontier,
    plot_frontier,
    to_markdown,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="directory holding the runs of a sweep")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--split", default="test", choices=["train", "validation", "test"])
    parser.add_argument("--metric", default=None,
                        choices=["error", "objective", "loss", "mse", "mae"],
                        help="y axis (loss = objective; default: error where the runs have "
                             "it, else objective)")
    parser.add_argument("--unfairness", default=None, choices=sorted(UNFAIRNESS),
                        help="x axis (default: ks where the runs report it, else constraints)")
    parser.add_argument("--panels", default=None,
                        help="comma-separated splits drawn side by side, e.g. train,test")
    parser.add_argument("--solutions", default="recommended",
                        help="comma-separated solutions drawn (default: recommended, the one "
                             "to deploy; 'all': final, best_iterate, stochastic too)")
    args = parser.parse_args(argv)
    try:
        rows = collect(args.sweep_dir)
        unfairness = args.unfairness or default_unfairness(rows)
        metric = {"loss": "objective"}.get(args.metric, args.metric)
        table = frontier(rows, args.split, unfairness, metric)
        metric = metric or default_metric(table)
        panels = args.panels.split(",") if args.panels else [args.split]
        tables = {p: table if p == args.split else frontier(rows, p, unfairness, metric)
                  for p in panels}
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or args.sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "runs.csv", rows.to_csv(index=False))      # each whole or not at all
    write_text(out / "frontier.csv", table.to_csv(index=False))
    md = to_markdown(table)
    write_text(out / "frontier.md", md + "\n")
    solutions = None if args.solutions == "all" else args.solutions.split(",")
    plot_frontier(tables, out / "frontier.png", metric, unfairness, solutions)
    print(md)
    print(f"\nwrote {out / 'frontier.csv'}, {out / 'frontier.md'}, {out / 'frontier.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
