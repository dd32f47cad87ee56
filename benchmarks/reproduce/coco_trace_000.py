"""Where paper 000's COCO column differs from ours: COCO's path over λ rates and rounds.

Table 3's COCO column (:mod:`benchmarks.reproduce.reproduce_000`) runs
:class:`fairgames.baselines.COCO` for 200 rounds with a λ rate chosen on validation from {1, 5,
20}. This script asks whether a different number of rounds or λ rate would give the paper's
COCO numbers: on each data set and split it refits the same COCO (the same logistic η, the same
bound 1.1 × UncError's training error, read from the committed Table 3 cells) over a grid of λ
rates × rounds and reports

* the plug-in classifier ``η > 1/2``, COCO's first iterate (and the limit of its path when the
  error bound holds λ up);
* every (λ rate, rounds) point: test KLD sum (test error / UncError's test error) and the
  training error minus the bound (COCO's own constraint; > 0: infeasible where it is fitted),
  and the point Table 3's rule picks on validation at each number of rounds;
* PostShift of the same cells on training, a classifier of the same family (group thresholds
  on η) whose KLD shows what COCO's problem can reach under its bound;
* the plug-in classifiers of logistic η fitted with other L2 penalties (``--plugin-l2s``):
  how low a test error any unconstrained plug-in of this family reaches.

There is no goal; the tables back the COCO paragraph of
``benchmarks/results/reproduce_000.discussion.md``. Run by hand (not in CI), after the
Table 3 cells exist::

    python -m benchmarks.reproduce.coco_trace_000  # → results/coco_trace_000.{md,json}
    python -m benchmarks.reproduce.coco_trace_000 --quick         # seconds; coco_trace_000.quick.*
    python -m benchmarks.reproduce.coco_trace_000 --datasets compas --splits 1 --rounds 5 20 \\
        --out /tmp/x
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.cells import CellStore
from benchmarks.harness.children import launch_task
from benchmarks.harness.results import write
from benchmarks.reproduce import reproduce_000 as rep  # the Table 3 cells' protocol, helpers

LRS = (1.0, 5.0, 20.0, 100.0)
ROUNDS = (5, 20, 50, 200, 1000)
# L2 penalties of other logistic η whose plug-in classifier η > 1/2 is also reported: how low
# a test error any plug-in of this family reaches (the paper's Crime COCO has 0.83 × UncError's)
PLUGIN_L2S = (0.0, 1e-3, 1e-2, 1e-1, 1.0)


_STORES: dict[str, CellStore] = {}


def committed_cell(cells_dir: Path, name: str) -> dict[str, Any]:
    """The saved Table 3 cell ``name`` of ``cells_dir`` (its archives)."""
    store = _STORES.setdefault(str(cells_dir), CellStore(cells_dir))   # read archives once
    record = store.get(name)
    if record is None:
        raise SystemExit(f"missing Table 3 cell {name} in {cells_dir}: run "
                         "python -m benchmarks.reproduce.reproduce_000 first (or pass --cells)")
    return record


def trace_split(job: tuple[str, int, str, list[float], list[int], list[float]]
                ) -> dict[str, Any]:
    """COCO's grid on one split of one data set (a worker: one torch thread)."""
    dataset, split, cells_dir, lrs, rounds, plugin_l2s = job
    import torch

    from fairgames.baselines import COCO, LogisticRegression, kld
    from fairgames.data import load

    torch.set_num_threads(1)
    started = time.perf_counter()
    cells = Path(cells_dir)
    base = committed_cell(cells, f"baselines_{dataset}_s{split}")
    unc = rep.select([committed_cell(cells, rep.cell_key({"kind": "unc", "dataset": dataset,
                                                          "split": split, "theta_lr": lr}))
                      for lr in rep.PAPER_GRID], "best_iterate", lambda m: m["error"])
    unc_test_error = unc["solutions"]["best_iterate"]["test"]["error"]
    bound = base["bound"]
    attr, _ = rep.PROTECTED[dataset]
    splits = load(dataset, protected=attr, paper="000", seed=split)
    tr = splits.train
    # the same η as the Table 3 baselines cell (reproduce_000.run_baseline_cell)
    logistic = LogisticRegression().fit(tr.features, tr.labels)
    eta = {n: logistic.predict_proba(ds.features) for n, ds in splits.items()}
    p_train = float(tr.labels.double().mean())
    n_groups = len(tr.group_names[attr])

    def objective(c):
        return sum(kld(p_train, c.positive_rate(j)) for j in range(n_groups))

    def figures(g: dict[str, Any]) -> dict[str, float]:
        """The trace's numbers of one classifier from its per-split group tables."""
        return {"test_kld": rep.kld_sum(g["test"]),
                "test_ratio": g["test"]["overall"]["error"] / unc_test_error,
                "train_kld": rep.kld_sum(g["train"]),
                "train_gap": g["train"]["overall"]["error"] - bound,
                "validation_kld": rep.kld_sum(g["validation"]),
                "validation_gap": g["validation"]["overall"]["error"] - bound}

    def summary(positive_of) -> dict[str, float]:
        return figures({n: rep.metrics_of(ds, positive_of(n, ds), attr)["groups"]
                        for n, ds in splits.items()})

    out: dict[str, Any] = {
        "dataset": dataset, "split": split, "bound": bound,
        "plugin": summary(lambda n, ds: (eta[n] > 0.5).double()),
        "plugin_l2": [],
        "postshift": figures({n: base["PostShift"][n]["groups"] for n, _ in splits.items()}),
        "table_coco_lr": base["COCO"]["multiplier_lr"], "grid": []}
    for l2 in plugin_l2s:
        other = LogisticRegression(l2=l2, max_iter=500).fit(tr.features, tr.labels)
        out["plugin_l2"].append({"l2": l2, **summary(
            lambda n, ds, other=other: (other.predict_proba(ds.features) > 0.5).double())})
    for lr in lrs:
        for r in rounds:
            coco = COCO(objective, [lambda c: c.error() - bound], outer_steps=r, inner_steps=5,
                        multiplier_lr=lr).fit(eta["train"], tr.labels, tr.groups[attr],
                                              n_groups=n_groups)
            point = summary(lambda n, ds, coco=coco: coco.predict_proba(eta[n], ds.groups[attr]))
            out["grid"].append({"multiplier_lr": lr, "rounds": r, **point,
                                "final_multiplier": float(coco.multipliers[0])})
    out["wall_s"] = time.perf_counter() - started
    return out


def tabulate(results: list[dict[str, Any]], lrs: list[float], rounds: list[int]) -> str:
    lines = ["# COCO's path on paper 000's Table 3 problem", "",
             "Generated by `python -m benchmarks.reproduce.coco_trace_000`; discussion in "
             "`benchmarks/results/reproduce_000.discussion.md` (COCO). min Σ_G KLD s.t. "
             "error ≤ 1.1 × UncError's "
             "training error, the bound and η of the committed Table 3 cells. Entry: test "
             "KLD sum (test error / UncError's test error) [training error − bound], mean "
             "over the splits; the committed COCO column is 200 rounds at the λ rate chosen "
             "on validation.", ""]
    for ds in dict.fromkeys(r["dataset"] for r in results):
        rows = [r for r in results if r["dataset"] == ds]
        n = len(rows)

        def mean(values: list[float]) -> float:
            return sum(values) / len(values)

        def entry(points: list[dict[str, float]]) -> str:
            return (f"{mean([p['test_kld'] for p in points]):.3f} "
                    f"({mean([p['test_ratio'] for p in points]):.2f}) "
                    f"[{mean([p['train_gap'] for p in points]):+.3f}]")

        paper_kld, paper_ratio = rep.PAPER_T3[ds]["COCO"]
        lines += [f"## {ds} ({n} split(s))", "",
                  f"- paper's COCO: {paper_kld:.3f} ({paper_ratio:.2f}); paper's PostShift: "
                  f"{rep.PAPER_T3[ds]['PostShift'][0]:.3f} "
                  f"({rep.PAPER_T3[ds]['PostShift'][1]:.2f})",
                  f"- plug-in η > 1/2 (COCO's first iterate): {entry([r['plugin'] for r in rows])}",
                  *[f"- plug-in η > 1/2 of a logistic η with L2 penalty {l2:g}: "
                    f"{entry([p for r in rows for p in r.get('plugin_l2', []) if p['l2'] == l2])}"
                    for l2 in dict.fromkeys(p["l2"] for r in rows
                                            for p in r.get("plugin_l2", []))],
                  f"- PostShift (same η, group thresholds): "
                  f"{entry([r['postshift'] for r in rows])}",
                  f"- λ rates chosen for the committed column: "
                  f"{[r['table_coco_lr'] for r in rows]}", "",
                  "| λ rate | " + " | ".join(f"{r} rounds" for r in rounds) + " |",
                  "|---|" + "---|" * len(rounds)]
        for lr in lrs:
            cells = [entry([p for r in rows for p in r["grid"]
                            if p["multiplier_lr"] == lr and p["rounds"] == k]) for k in rounds]
            lines.append(f"| {lr:g} | " + " | ".join(cells) + " |")
        # the committed column's rule at every number of rounds: per split, the λ rate whose
        # COCO is best on validation (feasible first), among the committed grid's rates and
        # among all the rates run
        committed = [lr for lr in lrs if lr in rep.COCO_LRS]
        for label, allowed in (("chosen on validation from the committed rates", committed),
                               ("chosen on validation from all rates", lrs)):
            if not allowed or (allowed is lrs and lrs == committed):
                continue
            cells = [entry([chosen(r, k, allowed) for r in rows]) for k in rounds]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def chosen(result: dict[str, Any], rounds: int, lrs: list[float]) -> dict[str, float]:
    """The grid point of one split that Table 3's rule picks among ``lrs`` at ``rounds``."""
    from fairgames.game.solutions import best_iterate

    points = [p for p in result["grid"] if p["rounds"] == rounds and p["multiplier_lr"] in lrs]
    return points[best_iterate([p["validation_kld"] for p in points],
                               [[p["validation_gap"]] for p in points])]


def summary_of(result: dict[str, Any], path: Path) -> str:
    """The summary of a committed ``coco_trace_000*.json``: its tables (``path``: unused)."""
    c = result["config"]
    return tabulate(result["results"], c["lrs"], c["rounds"]) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from fairgames.train.sweeps.launch import add_launcher_arguments

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(rep.DATASETS), choices=rep.DATASETS)
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--lrs", nargs="+", type=float, default=list(LRS))
    ap.add_argument("--rounds", nargs="+", type=int, default=list(ROUNDS))
    ap.add_argument("--plugin-l2s", nargs="*", type=float, default=list(PLUGIN_L2S),
                    help="L2 penalties of other logistic η whose plug-in classifier is reported")
    ap.add_argument("--cells", type=Path, default=rep.RESULTS / "reproduce_000.cells",
                    help="the Table 3 cells (UncError and baselines) to take bounds from")
    add_launcher_arguments(ap, jobs=2, what="splits", overrides=False)
    ap.add_argument("--work-dir", type=Path, default=rep.ROOT / "runs" / "coco_trace_000",
                    help="where the launcher's jobs keep their logs")
    ap.add_argument("--out", type=Path, default=rep.RESULTS,
                    help="folder for coco_trace_000.{md,json}")
    ap.add_argument("--tables-only", action="store_true",
                    help="rewrite the markdown from the saved JSON in --out; fit nothing")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: COMPAS, 1 split, λ rate 5, 5 and 20 rounds; writes "
                         "coco_trace_000.quick.{md,json}")
    a = ap.parse_args(argv)
    if a.quick:
        a.datasets, a.splits, a.lrs, a.rounds = ["compas"], 1, [5.0], [5, 20]
        a.plugin_l2s = [0.01]
    stem = "coco_trace_000.quick" if a.quick else "coco_trace_000"
    if a.tables_only:
        saved = a.out / f"{stem}.json"
        if not saved.exists():
            ap.error(f"--tables-only: no {saved}")
        payload = json.loads(saved.read_text())
        c = payload["config"]
        md = tabulate(payload["results"], c["lrs"], c["rounds"])
        (a.out / f"{stem}.md").write_text(md + "\n")
        print(md)
        return payload
    if a.splits < 1 or any(r < 1 for r in a.rounds) or any(lr <= 0 for lr in a.lrs):
        ap.error("--splits and --rounds must be >= 1 and --lrs positive")
    if any(not l2 >= 0 for l2 in a.plugin_l2s):
        ap.error("--plugin-l2s must be >= 0")
    jobs = [(ds, s, str(a.cells), a.lrs, a.rounds, a.plugin_l2s) for ds in a.datasets
            for s in range(a.splits)]
    for ds, s, *_ in jobs:      # fail before any work when a cell is missing
        committed_cell(a.cells, f"baselines_{ds}_s{s}")
    if a.launcher == "inline":
        results = [trace_split(j) for j in jobs]
    else:                    # one Hydra multirun (fairgames.train.sweeps.launch)
        from fairgames.train.sweeps.launch import launch

        results = launch(launch_task("benchmarks.reproduce.coco_trace_000", "trace_split"), jobs,
                         a.work_dir / "launch", a.launcher, a.jobs)
    for r in results:
        print(f"{r['dataset']} split {r['split']}: {r['wall_s']:.0f}s", flush=True)
    md = tabulate(results, a.lrs, a.rounds)
    cells = a.cells.resolve()
    payload = {"config": {"datasets": a.datasets, "splits": a.splits, "lrs": a.lrs,
                          "rounds": a.rounds, "plugin_l2s": a.plugin_l2s,
                          "cells": str(cells.relative_to(rep.ROOT)
                                       if cells.is_relative_to(rep.ROOT) else cells)},
               "results": results}
    write(a.out / f"{stem}.json", payload, markdown=md + "\n", indent=1)
    print(md)
    return payload


if __name__ == "__main__":
    main()
