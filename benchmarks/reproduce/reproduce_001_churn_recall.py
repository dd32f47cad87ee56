"""Paper 001's churn scenario on Adult against the bias-shifted baseline, a public stand-in for
its proprietary Figure 3 (issue 47, Goals (b)).

The scenario, fixed before measuring: ``data=adult_churn`` (Adult's official training split cut
into d1 30 %, d2 30 %, unlabeled d3 40 %, each split 60/20/20; the default encoding), linear
models, seed 0 and the CLI's defaults but ``trainer.steps=4000`` (``STEPS``: chosen after
seeing the tightest target violated at 500 and 1500 steps). The deployed model is the one
``problem=churn_recall`` trains first: unconstrained, on a seeded 25 % of the labeled training
rows (``problem.baseline_fraction``). Per seed:

* the **unconstrained model**: ``problem=error`` with the scenario's objective,
  ``error(source="d1") + fp(source="d2")``, no constraint;
* the **bias-shifted baseline** (the paper's thresholded SVM): the unconstrained model with its
  threshold moved until its recall on D2's training rows is at least the deployed model's
  (:func:`fairgames.dataset_constraints.bias_shift.recall_shift`); its churn on D3 (train) is
  the reference churn;
* **ours**: ``problem=churn_recall`` at each target ``problem.tolerance`` = 25 %, 50 %, 75 % and
  100 % of the reference churn, so the churn constraint binds; the recommended solution.

Every figure is computed here, by numpy, from each model's predictions (a stochastic solution's
expected ones): the objective (errors on D1 + false positives on D2, each a share of its
source's rows), recall on D2 and churn on D3 against the deployed model, on train and test.
Goals (issue 47, as the paper claims), at every target: ours beats the bias-shifted baseline on
both churn and the objective on test, and meets the recall floor on train; and (the problem's
own constraint) ours meets the churn target on train. The deployed model's own figures are
reported: it is feasible at every target (churn 0, recall equal to the floor).

Usage::

    python -m benchmarks.reproduce.reproduce_001_churn_recall              # → results/
    python -m benchmarks.reproduce.reproduce_001_churn_recall --steps 60 --out /tmp/x.json

Example:
    >>> import numpy as np
    >>> figures_of(np.array([1.0, 0.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0, 1.0]),
    ...            np.array([0, 1, 1, 2]), np.array([1.0, 0.0, 0.0, 1.0]))
    {'objective': 0.5, 'recall_d2': nan, 'churn_d3': 1.0}
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.harness.machine import machine
from benchmarks.harness.results import goal, print_goals, write_run
from benchmarks.reproduce.solved_by_default import compose

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "results" / "reproduce_001_churn_recall.json"
SHARES = (0.25, 0.5, 0.75, 1.0)          # targets as shares of the bias-shifted churn
OBJECTIVE = 'error(source="d1") + fp(source="d2")'
DATA = ["data=adult_churn", "model=linear", "trainer.progress=false", "trainer.plots=false"]
SLACK = 1e-9                             # "meets" up to rounding
# The CLI's 500 full-batch steps leave the tightest target (25 %) violated on train (measured:
# churn 0.031 vs 0.015 at 500 steps, 0.027 at 1500); 4000 steps meet it (an LP mixture).
STEPS = 4000


def figures_of(p: np.ndarray, y: np.ndarray, src: np.ndarray,
               base: np.ndarray) -> dict[str, float]:
    """The scenario's figures of predictions ``p`` (0/1 or probabilities) against labels
    ``y``, source ids ``src`` (0 = d1, 1 = d2, 2 = d3) and the deployed model's 0/1
    predictions ``base``."""
    d1, d2, d3 = (src == i for i in range(3))
    err1 = float((p[d1] * (1 - y[d1]) + (1 - p[d1]) * y[d1]).mean())
    fp2 = float((p[d2] * (1 - y[d2])).mean())
    pos2 = d2 & (y == 1)
    recall = float(p[pos2].mean()) if pos2.any() else float("nan")
    churn = float((p[d3] * (1 - base[d3]) + (1 - p[d3]) * base[d3]).mean())
    return {"objective": round(err1 + fp2, 6), "recall_d2": round(recall, 6),
            "churn_d3": round(churn, 6)}


def _predict(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        if hasattr(model, "predict_proba"):            # a stochastic solution: expected
            return model.predict_proba(x).double().numpy()
        return (model(x).reshape(-1) > 0).double().numpy()


def _run(overrides: Sequence[str], run_dir: Path):
    from fairgames.train import run

    return run(compose([*DATA, *overrides]), run_dir)


def _figures(model, splits, base_model) -> dict[str, dict[str, float]]:
    out = {}
    for part in ("train", "test"):
        ds = getattr(splits, part)
        base = _predict(base_model, ds.features)
        out[part] = figures_of(_predict(model, ds.features), ds.labels.double().numpy(),
                               ds.sources.numpy(), base)
    return out


def one_seed(seed: int, steps: int | None, root: Path) -> dict[str, Any]:
    """The deployed model, the bias-shifted baseline and ours at each target, for a seed."""
    from fairgames.dataset_constraints.bias_shift import BiasShifted, recall_shift
    from fairgames.train.data import load_splits

    extra = [f"seed={seed}"] + ([f"trainer.steps={steps}"] if steps else [])
    started = time.perf_counter()
    free = _run(["problem=error", f"problem.objective='{OBJECTIVE}'", *extra], root / "free")
    config = free.results["config"]
    splits = load_splits(config["data"], config["seed"])
    train = splits.train
    # the deployed model: the one every churn_recall run of this seed trains first (seeded);
    # a first run at the loosest target gives it and its recall on D2
    loose = _run(["problem=churn_recall", "problem.tolerance=1.0", *extra], root / "loose")
    deployed = loose.extras["baseline_model"].eval()
    floor = loose.results["training"]["baseline"]["values"]["baseline_tpr_d2"]
    d2 = train.sources == 1
    with torch.no_grad():
        scores = free.model.eval()(train.features).reshape(-1)
    shift = recall_shift(scores[d2], train.labels[d2], floor)
    shifted = BiasShifted(free.model.eval(), shift.shift)
    row: dict[str, Any] = {"seed": seed, "deployed_recall_d2_train": round(floor, 6),
                           "deployed_fraction": config["problem"]["baseline_fraction"],
                           "deployed": _figures(deployed, splits, deployed),
                           "unconstrained": _figures(free.model.eval(), splits, deployed),
                           "bias_shifted": _figures(shifted, splits, deployed),
                           "shift": round(shift.shift, 6), "ours": []}
    reference = row["bias_shifted"]["train"]["churn_d3"]
    for share in SHARES:
        target = round(share * reference, 6)
        ours = _run(["problem=churn_recall", f"problem.tolerance={target}", *extra],
                    root / f"ours{share}")
        assert ours.results["training"]["baseline"]["values"]["baseline_tpr_d2"] == floor
        row["ours"].append({"share": share, "target": target,
                            "solution": ours.results["training"]["recommended"]["solution"],
                            **_figures(ours.recommended.eval(), splits, deployed)})
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def summary_figures(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Flat figures for the generated report: per seed, the deployed model's, the
    unconstrained model's and the bias-shifted baseline's test objective and churn, and ours'
    target, train churn, train recall and test objective and churn at each target share."""
    out: dict[str, float] = {}
    for r in rows:
        s = f"s{r['seed']}_"
        out[s + "deployed_recall_d2_train"] = r["deployed_recall_d2_train"]
        for k in ("deployed", "unconstrained", "bias_shifted"):
            for f in ("objective", "churn_d3", "recall_d2"):
                out[f"{s}{k}_test_{f}"] = r[k]["test"][f]
        for o in r["ours"]:
            p = f"{s}ours{int(round(o['share'] * 100))}_"
            out[p + "target"] = o["target"]
            for part in ("train", "test"):
                for f in ("objective", "churn_d3", "recall_d2"):
                    out[f"{p}{part}_{f}"] = o[part][f]
    return out


def evaluate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals over every seed and target: ours minus the bias-shifted baseline on
    test churn and test objective (worst case; < 0 beats it), and ours' recall on D2 minus
    the deployed model's on train (worst case; ≥ 0 meets the floor); ours' train churn minus
    the target (worst case; ≤ 0 meets it)."""
    churn, objective, recall, over = [], [], [], []
    for r in rows:
        bs = r["bias_shifted"]["test"]
        for o in r["ours"]:
            over.append((o["train"]["churn_d3"] - o["target"], r["seed"], o["share"]))
            churn.append((o["test"]["churn_d3"] - bs["churn_d3"], r["seed"], o["share"]))
            objective.append((o["test"]["objective"] - bs["objective"], r["seed"], o["share"]))
            recall.append((o["train"]["recall_d2"] - r["deployed_recall_d2_train"], r["seed"],
                           o["share"]))

    def worst(items, at_most=True):
        v, seed, share = max(items) if at_most else min(items)
        return {"seed": seed, "share": share, "value": round(v, 6)}

    w_c, w_o, w_r, w_t = (worst(churn), worst(objective), worst(recall, at_most=False),
                          worst(over))
    return {
        "test_churn_minus_bias_shifted": goal(w_c["value"], 0.0, worst=w_c, strict=True) | {
            "met": w_c["value"] < 0.0},
        "test_objective_minus_bias_shifted": goal(w_o["value"], 0.0, worst=w_o, strict=True) | {
            "met": w_o["value"] < 0.0},
        "train_recall_minus_deployed": goal(w_r["value"], -SLACK, at_most=False, worst=w_r),
        # not one of the goals, but the problem's own constraint: reported honestly
        "train_churn_minus_target": goal(w_t["value"], SLACK, worst=w_t)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--steps", type=int, default=STEPS, help="trainer.steps")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one_seed(s, args.steps, Path(tmp) / str(s)) for s in args.seeds]
    goals = evaluate(rows)
    print_goals(goals)
    figures = {**summary_figures(rows), "seconds": round(time.perf_counter() - started, 1)}
    write_run(args.out, {"figures": figures,
                         "goals": goals, "seeds": rows, "machine": machine(),
                         "config": {"data": DATA, "objective": OBJECTIVE, "shares": SHARES,
                                    "steps": args.steps, "torch_threads":
                                    torch.get_num_threads()}},
              argv=None if argv is None else list(argv))
    return 0 if all(g["met"] for g in goals.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
