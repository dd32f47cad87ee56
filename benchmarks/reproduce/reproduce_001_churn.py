"""TFCO's churn example on Adult, a public stand-in for paper 001's proprietary Figure 3
(issue 47, Goals (a)).

Adult with paper 001's recipe (``data.paper=001``: the official split, bucketed one-hot, sex
kept: 32 561 / 16 281 rows). Per seed, three CLI runs (``fairgames.train.run``, defaults
otherwise):

* the **teacher**: our network with one hidden layer of 10 units, trained unconstrained
  (``problem=error model=mlp model.hidden=[10]``) — the deployed model;
* the **unconstrained student**: a linear model, ``problem=error``;
* the **student**: a linear model, ``problem=churn problem.tolerance=0.025
  problem.baseline_path=<the teacher's run>``: min error s.t. churn against the teacher's
  predictions ≤ 2.5 %.

Figures: each run's recommended solution (what the library hands a user) on the test split,
its error and its churn against the teacher (``results.json``'s churn constraint value plus
the tolerance); their means over the seeds. Goals (issue 47): mean test churn ≤ 2.5 %, and the
student's mean test error within +0.002 of the unconstrained student's. TFCO's own run (one
run, its teacher and encoding: test error 0.1410, churn violation +0.0029) is recorded
beside ours, not compared.

Usage::

    python -m benchmarks.reproduce.reproduce_001_churn              # 5 seeds → results/
    python -m benchmarks.reproduce.reproduce_001_churn --seeds 0 --steps 100 --out /tmp/x.json

Example:
    >>> churn_of({"value": -0.004}, 0.025)
    0.021
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.machine import machine
from benchmarks.harness.results import goal, print_goals, write_run
from benchmarks.reproduce.solved_by_default import compose

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "results" / "reproduce_001_churn.json"
TARGET = 0.025                     # TFCO's churn bound
ERROR_SLACK = 0.002                # issue 47's "within +0.002 of our unconstrained student"
TFCO = {"test_error": 0.1410, "churn_violation": 0.0029,
        "source": "TFCO's churn example on Adult (one run, its own teacher and encoding)"}
DATA = ["data=adult", "data.paper=001", "data.validation_fraction=0.2",
        "trainer.progress=false", "trainer.plots=false"]


def churn_of(constraint: dict[str, Any], tolerance: float) -> float:
    """The churn rate of a ``churn() <= tolerance`` constraint record (value = churn − tol)."""
    return round(constraint["value"] + tolerance, 12)


def _run(overrides: Sequence[str], run_dir: Path) -> dict[str, Any]:
    from fairgames.train import run

    return run(compose([*DATA, *overrides]), run_dir).results


def one_seed(seed: int, steps: int | None, root: Path) -> dict[str, Any]:
    """The teacher, the unconstrained student and the churn-constrained student of a seed."""
    extra = [f"seed={seed}"] + ([f"trainer.steps={steps}"] if steps else [])
    started = time.perf_counter()
    teacher_dir = root / f"teacher{seed}"
    teacher = _run(["problem=error", "model=mlp", "model.hidden=[10]", *extra], teacher_dir)
    free = _run(["problem=error", "model=linear", *extra], root / f"free{seed}")
    student = _run(["problem=churn", "model=linear", f"problem.tolerance={TARGET}",
                    f"problem.baseline_path={teacher_dir}", *extra], root / f"student{seed}")
    rec = student["solutions"]["recommended"]
    return {"seed": seed,
            "teacher_test_error": teacher["solutions"]["final"]["test"]["error"],
            "unconstrained_test_error": free["solutions"]["recommended"]["test"]["error"],
            "student_test_error": rec["test"]["error"],
            "student_test_churn": churn_of(rec["test"]["constraints"]["churn"], TARGET),
            "student_train_churn": churn_of(rec["train"]["constraints"]["churn"], TARGET),
            "student_solution": student["training"].get("recommended", {}).get("solution"),
            "seconds": round(time.perf_counter() - started, 1)}


def summary(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, float], dict[str, Any]]:
    """Mean figures over the seeds and the issue's two goals."""
    mean = {k: statistics.fmean(r[k] for r in rows)
            for k in ("teacher_test_error", "unconstrained_test_error", "student_test_error",
                      "student_test_churn", "student_train_churn")}
    figures = {f"mean_{k}": round(v, 5) for k, v in mean.items()}
    gap = mean["student_test_error"] - mean["unconstrained_test_error"]
    figures["mean_error_gap"] = round(gap, 5)
    goals = {"mean_test_churn": goal(round(mean["student_test_churn"], 5), TARGET),
             "error_gap_to_unconstrained": goal(round(gap, 5), ERROR_SLACK)}
    return figures, goals


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=1500,
                    help="trainer.steps of every model (the protocol; the CLI's 500 has not "
                         "settled this game: reproduce_001_churn.discussion.md)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one_seed(s, args.steps, Path(tmp)) for s in args.seeds]
    figures, goals = summary(rows)
    figures["seconds"] = round(time.perf_counter() - started, 1)
    print_goals(goals)
    write_run(args.out, {"figures": figures, "goals": goals, "tfco": TFCO, "seeds": rows,
                         "machine": machine(),
                         "config": {"data": DATA, "target": TARGET, "steps": args.steps,
                                    "teacher": "mlp hidden=[10], problem=error",
                                    "student": "linear, problem=churn"}},
              argv=None if argv is None else list(argv))
    return 0 if all(g["met"] for g in goals.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
