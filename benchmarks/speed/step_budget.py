"""θ's step budget on the time-to-quality problems: steps × Adam step size × batch size.

The study behind :func:`fairgames.game.default_budget` (issue 20): fairgames' CLI job on
Adult (official split, protected attribute sex, ``problem.tolerance=0.02`` as in
``benchmarks/speed/time_to_quality.py``) for each setting and seed, scored with that benchmark's
definitions (test error, pairwise test gap, one-sided train violation) and timed the same way
(process CPU seconds of ``run(cfg)``, one torch thread).

Usage::

    python -m benchmarks.speed.step_budget --settings 500:0.01 200:0.025 150:0.05 \
        --seeds 0 1 2 3 4 --out results/step_budget.json
    # a setting is steps:lr[:override;override...], e.g. 300:0.02:trainer.batch_size=4096
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.results import write_run
from benchmarks.speed import time_to_quality as ttq  # the job, its scoring and timing

FEASIBLE_BELOW = ttq.FEASIBLE_BELOW


def one_setting(problem: str, seed: int, splits: Any, setting: str) -> dict[str, Any]:
    """One CLI job at ``setting`` (``steps:lr[:override;...]``), scored."""
    steps, lr, *extra = setting.split(":")
    overrides = [f"problem.tolerance={ttq.TOLERANCE}", f"trainer.steps={steps}",
                 f"optimizer.lr={lr}", *(extra[0].split(";") if extra and extra[0] else [])]
    out = ttq.run_fairgames(problem, seed, splits, overrides)
    data = ttq.as_numpy(splits, splits.metadata["protected"])
    scores = ttq.score(out["p"], data, ttq.PROBLEMS[problem])
    return {"problem": problem, "seed": seed, "setting": setting, "cpu_s": out["cpu_s"],
            "fit_s": out["fit_s"], "solution": out["solution"],
            **{k: scores[k] for k in ("test_error", "test_gap", "train_violation")}}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per problem and setting: means over seeds, the largest train violation, how many
    seeds meet the constraint on train."""
    keys = sorted({(r["problem"], r["setting"]) for r in rows}, key=str)
    out = []
    for problem, setting in keys:
        rs = [r for r in rows if (r["problem"], r["setting"]) == (problem, setting)]
        out.append({
            "problem": problem, "setting": setting, "seeds": len(rs),
            **{k: statistics.mean(r[k] for r in rs)
               for k in ("test_error", "test_gap", "cpu_s")},
            "train_violation_max": max(r["train_violation"] for r in rs),
            "feasible_seeds": sum(r["train_violation"] <= FEASIBLE_BELOW for r in rs)})
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", nargs="+", default=["500:0.01", "200:0.025"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from fairgames.train.data import load_splits  # noqa: PLC0415

    rows = []
    for i, seed in enumerate(args.seeds):
        splits = load_splits(ttq.data_config(), seed)
        if i == 0:    # untimed: lazy imports, first-call costs
            ttq.run_fairgames(next(iter(ttq.PROBLEMS)), seed, splits, ["trainer.steps=20"])
        for problem in ttq.PROBLEMS:
            for setting in args.settings:
                rows.append(one_setting(problem, seed, splits, setting))
                print(json.dumps(rows[-1]), flush=True)
    table = summarize(rows)
    for t in table:
        print(f"{t['problem']:20} {t['setting']:40} error {t['test_error']:.4f} gap "
              f"{t['test_gap']:.4f} train viol max {t['train_violation_max']:+.4f} feasible "
              f"{t['feasible_seeds']}/{t['seeds']} cpu {t['cpu_s']:.2f} s")
    if args.out is not None:
        write_run(args.out, {"summary": table, "runs": rows}, argv, indent=1,
              newline=True)
    return table


if __name__ == "__main__":
    main()
