"""step_overhead.py's columns for two source trees of fairgames, old against new.

Each block is a fresh subprocess that imports fairgames from one tree (``PYTHONPATH``), one
torch thread, and times every column of every case with ``step_overhead.timed`` (the same
seeds, the same user-level loop — zero_grad, loss or Lagrangian, backward, step — from *this*
file's ``step_overhead.py``, so only the library differs). Blocks alternate between the trees
in pairs (old new, new old, old new, ...), so a slow phase of a shared machine weighs on both;
a column's ratio is the median over pairs of new / old, its spread the pairs' quartiles.
The clock is the process's CPU time by default (``--clock wall``: wall time, as
step_overhead.py): on a machine shared with other jobs, wall time also counts the time they
take from the benchmark, which swamps a 5 % difference.

It also counts the aten ops of one step of each column (linear model, SGD, K = 2) with a
``TorchDispatchMode`` from zero_grad to step, after warm-up, and lists the ops that differ.

Goal (issue 19): no column more than 5 % slower (every median ratio ≤ 1.05). Issue 24's
statistic is reported beside it for each tree: in every block, a column's extra time over the
plain step as a fraction of cooper's extra in the same block (median and quartiles).

Usage::

    # OLD: a worktree of the old commit
    python -m benchmarks.speed.compare_trees ../fairgames-old . --blocks 8
    python -m benchmarks.speed.compare_trees OLD NEW --blocks 2 --quick --out /tmp/c.json  # smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness.blocks import CLOCKS, timed
from benchmarks.harness.children import run_on_tree
from benchmarks.harness.machine import machine
from benchmarks.harness.results import goal, print_goals, write_run
from benchmarks.harness.stats import quartiles

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "step_overhead_compare.json"
GOAL = 1.05
FULL_CASES = [(m, k) for m in ("linear", "mlp") for k in (2, 8, 64, 1024)]
QUICK_CASES = [("linear", 2), ("mlp", 8)]


def worker(cases: list[tuple[str, int]], steps: int, repeats: int, ops: bool,
           clock: str) -> dict:
    """Run in the subprocess: ms per step of every column of every case, or op counts."""
    import torch  # noqa: PLC0415 - after the thread settings of the environment
    torch.set_num_threads(1)
    import fairgames.game  # noqa: PLC0415
    from benchmarks.speed import step_overhead as so  # noqa: PLC0415

    cpu = torch.device("cpu")
    out: dict[str, Any] = {"fairgames": str(Path(fairgames.game.__file__).parents[2])}
    if ops:
        steps_of, _ = so.make_columns("linear", 2, cpu, with_baselines=True)
        out["ops"] = {name: count_ops(step) for name, step in steps_of.items()}
        return out
    for kind, k in cases:
        steps_of, _ = so.make_columns(kind, k, cpu, with_baselines=(kind == "linear"))
        out[f"{kind}_K{k}"] = timed(steps_of, steps, repeats, clock)
    return out


def count_ops(step, warmup: int = 5) -> dict[str, int]:
    """The aten ops (overload name → calls) dispatched by one call of ``step``, after
    ``warmup`` calls (lazy state, optimizer buffers and caches are built by then)."""
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: Counter[str] = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func)] += 1
            return func(*args, **(kwargs or {}))

    for _ in range(warmup):
        step()
    with Count() as mode:
        step()
    return dict(sorted(mode.ops.items()))


def run_block(tree: Path, args: list[str]) -> dict:
    """One subprocess importing fairgames from ``tree``; its JSON answer."""
    answer = run_on_tree("benchmarks.speed.compare_trees", ["--worker", *args], tree,
                         env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    if Path(answer["fairgames"]).resolve() != tree.resolve():
        raise RuntimeError(f"worker for {tree} imported fairgames from {answer['fairgames']}")
    return answer


def summarise(blocks: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Per case and column: old and new medians, ratios of the block pairs."""
    table: dict[str, dict[str, Any]] = {}
    for case in (c for c in blocks["old"][0] if c != "fairgames"):
        for col in blocks["old"][0][case]:
            old = [b[case][col] for b in blocks["old"]]
            new = [b[case][col] for b in blocks["new"]]
            ratios = [n / o for o, n in zip(old, new, strict=True)]
            # The same ratio with each block's time divided by its own plain step (timed
            # interleaved with it): a second view, blind to a block pair's speed difference.
            plain = [b[case]["plain"] for b in blocks["new"]], [b[case]["plain"] for b in
                                                                  blocks["old"]]
            rel = [r * po / pn for r, pn, po in zip(ratios, *plain, strict=True)]
            q1, med, q3 = quartiles(ratios)
            table[f"{case}_{col}"] = {
                "old_ms": statistics.median(old), "new_ms": statistics.median(new),
                "ratio": med, "ratio_q1": q1, "ratio_q3": q3,
                "ratio_min": min(ratios), "ratio_max": max(ratios), "ratios": ratios,
                "ratio_per_plain": statistics.median(rel), "met": med <= GOAL}
    return table


def extra_vs_cooper(blocks: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Issue 24's statistic per tree: in every block with cooper's column, a column's extra
    time over the plain step divided by cooper's extra (both timed in that block), as the
    median over blocks with its quartiles."""
    out: dict[str, dict[str, Any]] = {}
    for side, side_blocks in blocks.items():
        for case in (c for c in side_blocks[0] if c != "fairgames"):
            if "cooper" not in side_blocks[0][case]:
                continue
            for col in ("eval", "game", "lagrangian", "floor"):
                r = [(b[case][col] - b[case]["plain"]) / (b[case]["cooper"] - b[case]["plain"])
                     for b in side_blocks]
                q1, med, q3 = quartiles(r)
                out[f"{side}_{case}_{col}"] = {"median": med, "q1": q1, "q3": q3, "blocks": r}
    return out


def op_diff(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    """new − old calls per op, the ops whose count changed."""
    return {op: new.get(op, 0) - old.get(op, 0) for op in sorted(set(old) | set(new))
            if new.get(op, 0) != old.get(op, 0)}


def compare(old: Path, new: Path, n_blocks: int, cases: list[tuple[str, int]], steps: int,
            repeats: int, clock: str) -> dict[str, Any]:
    spec = ["--cases", *[f"{m}:{k}" for m, k in cases], "--steps", str(steps),
            "--repeats", str(repeats), "--clock", clock]
    trees = {"old": old, "new": new}
    blocks: dict[str, list[dict]] = {"old": [], "new": []}
    started = time.perf_counter()
    for i in range(n_blocks):
        for side in (("old", "new") if i % 2 == 0 else ("new", "old")):
            blocks[side].append(run_block(trees[side], spec))
        print(f"  block pair {i + 1}/{n_blocks} done ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr)
    ops = {side: run_block(tree, ["--ops"])["ops"] for side, tree in trees.items()}
    # aten ops proper; "all" adds the profiler's record_function enter/exit pairs
    # (torch.optim's step and zero_grad hooks), which the dispatch mode sees too.
    counts = {side: {col: {"aten": sum(n for op, n in c.items() if op.startswith("aten.")),
                           "all": sum(c.values())} for col, c in o.items()}
              for side, o in ops.items()}
    return {"columns": summarise(blocks), "extra_vs_cooper_extra": extra_vs_cooper(blocks),
            "ops_per_step": counts,
            "op_diff": {col: op_diff(ops["old"][col], ops["new"][col]) for col in ops["new"]},
            "ops": ops, "wall_s": time.perf_counter() - started}


def print_table(result: dict[str, Any]) -> None:
    head = f"{'column':26} {'old ms':>8} {'new ms':>8} {'new/old':>8} {'q1':>6} {'q3':>6} " \
           f"{'min':>6} {'max':>6} {'/plain':>7}"
    print(head)
    print("-" * len(head))
    for name, r in result["columns"].items():
        print(f"{name:26} {r['old_ms']:8.3f} {r['new_ms']:8.3f} {r['ratio']:8.3f} "
              f"{r['ratio_q1']:6.3f} {r['ratio_q3']:6.3f} {r['ratio_min']:6.3f} "
              f"{r['ratio_max']:6.3f} {r['ratio_per_plain']:7.3f}"
              f"{'' if r['met'] else '  > 1.05'}")
    if result["extra_vs_cooper_extra"]:
        print("\nextra over plain / cooper's extra (per block, median [q1, q3]):")
        for name, r in result["extra_vs_cooper_extra"].items():
            print(f"  {name:28} {r['median']:6.3f} [{r['q1']:.3f}, {r['q3']:.3f}]")
    print("\naten ops per step (linear, SGD, K = 2; zero_grad to step, after warm-up):")
    print("  (aten ops; in brackets with the profiler's record_function enter/exit ops)")
    for col, new in result["ops_per_step"]["new"].items():
        old = result["ops_per_step"]["old"][col]
        print(f"  {col:12} old {old['aten']:>4} ({old['all']:>3})  "
              f"new {new['aten']:>4} ({new['all']:>3})  "
              f"changed: {result['op_diff'][col] or 'none'}")
    print()
    print_goals(result["goals"], show=("worst",))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, help="OLD NEW: two source trees")
    parser.add_argument("--blocks", type=int, default=8, help="block pairs (old + new)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per inner block")
    parser.add_argument("--repeats", type=int, default=3,
                        help="inner blocks per subprocess (step_overhead.timed's median)")
    parser.add_argument("--quick", action="store_true", help="cases linear K=2 and mlp K=8")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: process CPU time (default, robust to a shared machine's "
                             "load); wall: wall time")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default {RESULTS.relative_to(ROOT)}; --quick writes "
                             "only to an explicit --out")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ops", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", nargs="*", default=[], help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.worker:
        cases = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cases]
        print(json.dumps(worker(cases, a.steps, a.repeats, a.ops, a.clock)))
        return
    if len(a.trees) != 2:
        parser.error("give two source trees: OLD NEW")
    cases = QUICK_CASES if a.quick else FULL_CASES
    result = compare(a.trees[0], a.trees[1], a.blocks, cases, a.steps, a.repeats, a.clock)
    worst = max(result["columns"], key=lambda c: result["columns"][c]["ratio"])
    # every column's ratio at most GOAL: the worst one's is
    result["goals"] = {"every_ratio_new_over_old": goal(
        result["columns"][worst]["ratio"], GOAL, worst=worst,
        statistic="median over block pairs of new/old")}
    result["config"] = {"old": str(a.trees[0]), "new": str(a.trees[1]), "blocks": a.blocks,
                        "cases": [f"{m}_K{k}" for m, k in cases], "steps": a.steps,
                        "repeats": a.repeats, "threads": 1, "clock": a.clock,
                        "order": "block pairs alternate: old new, new old, ..."}
    result["machine"] = machine("cpu", 1)
    for side, tree in zip(("old", "new"), a.trees, strict=True):
        rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=False).stdout.strip()
        result["config"][f"{side}_commit"] = rev or None
    print_table(result)
    out = a.out or (None if a.quick else RESULTS)
    if out is not None:
        write_run(out, result, indent=1)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
