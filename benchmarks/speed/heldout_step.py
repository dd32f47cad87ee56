"""What the two-dataset game costs per training step: ``Engine.train_step`` with the
multipliers on θ's own batches (``trainer.constraint_split=train``), on the validation split
(``validation``) and on a held-out half of the training rows (``holdout``).

Adult with paper 000's preprocessing (the ``000`` recipe; ``--quick``: synthetic data of the
same width), F-measure parity with Algorithm 3 (ratio slacks), a linear model and a 2-layer MLP
of width 64, full batch and minibatches of 1 024 rows. Each step of the held-out columns also
scores the held-out data at the current θ without gradients (all of it full-batch, a
1 024-row minibatch otherwise) and passes it to ``ConstrainedOptimizer.record_heldout``. There
is no goal: the table says what the option costs.

Usage::

    python -m benchmarks.speed.heldout_step                 # → results/heldout_step.json
    python -m benchmarks.speed.heldout_step --quick         # smoke run; writes nothing unless --out
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.harness.blocks import timed
from benchmarks.harness.machine import machine
from benchmarks.harness.results import write_run
from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem, get_preset
from fairgames.problems import load_problem
from fairgames.train import BatchSettings, Engine, GameData, LogSettings, SnapshotSettings
from fairgames.train.data import constraint_holdout, load_splits

RESULTS = Path(__file__).resolve().parents[1] / "results"

SPLITS = ("train", "validation", "holdout")


def _engine(splits, protected: str, model_name: str, batch_size: int | None,
            constraint_split: str) -> Engine:
    train = splits.train
    built = load_problem("fmeasure_parity").build(protected, train.group_names, None,
                                                  train.group_counts(protected))
    torch.manual_seed(0)
    d = train.num_features
    model = (torch.nn.Linear(d, 1) if model_name == "linear" else
             torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    copt = ConstrainedOptimizer(Problem(built.objective, built.constraints),
                                torch.optim.SGD(model.parameters(), lr=0.05),
                                preset=get_preset("algorithm3"))
    heldout = None
    if constraint_split == "validation":
        heldout = splits.validation
    elif constraint_split == "holdout":
        theta_rows, held_rows = constraint_holdout(train, protected, 0.5, seed=0)
        train, heldout = train.subset(theta_rows), train.subset(held_rows)
    return Engine(model, copt, GameData(train, protected, heldout=heldout), steps=10**9,
                  batches=BatchSettings(size=batch_size), logging=LogSettings(every=10**9),
                  snapshots=SnapshotSettings(every=10**9))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: synthetic data, few steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the JSON (default results/heldout_step.json, "
                             "nothing for --quick)")
    a = parser.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.quick:
        splits, protected, data = make_synthetic(n=3000, d=20, seed=0), "group", "synthetic"
        steps, repeats = 5, 3
    else:
        splits = load_splits({"name": "adult", "protected": "sex", "paper": "000"}, seed=0)
        protected, data, steps, repeats = "sex", "adult (paper 000 recipe)", 40, 5
    rows = []
    for model_name in ("linear", "mlp"):
        for batch_size in (None, 1024):
            row = {"model": model_name, "batch": "full" if batch_size is None else batch_size}
            # the three columns' blocks interleaved (step_overhead.timed), so that a slow
            # phase of a shared machine weighs on each alike
            columns = {split: _engine(splits, protected, model_name, batch_size,
                                      split).train_step for split in SPLITS}
            row.update(timed(columns, steps, repeats, device="cpu"))
            rows.append(row)

    result = {"data": data, "rows_train": len(splits.train),
              "rows_validation": len(splits.validation), "features": splits.train.num_features,
              "problem": "fmeasure_parity, algorithm3",
              "unit": "ms per step (median of interleaved blocks)",
              "machine": machine(torch.device("cpu"), a.threads), "table": rows}
    print(f"{data}: {len(splits.train)} training rows, {len(splits.validation)} validation "
          f"rows; ms per step (constraint_split = train / validation / holdout)")
    print("| model | batch | train | validation | holdout |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['train']:.2f} | {r['validation']:.2f} | "
              f"{r['holdout']:.2f} |")
    out = a.out if a.out is not None else (None if a.quick else RESULTS / "heldout_step.json")
    if out is not None:
        write_run(out, result, newline=True)
        print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
