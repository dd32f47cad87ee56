"""The cost of a many-group run's evaluation and report (issue 24, part 2).

The case is ``tests/train/test_train_large_game.py``'s: a table whose columns ``a × b`` cross
into ``--groups`` ≈ 1 110 groups (24 rows each, half positive), ``problem=equal_opportunity``
(one constraint a group, so the default preset switches to ``lagrangian``), a 4-step
``trainer=smoke`` run without bootstrap, plots or TensorBoard. Per run: ``run_s`` (the whole
``run()``), ``report_s`` (evaluating the solutions, choosing the recommended one, checking
and writing ``results.json`` and the report: the pipeline's ``solutions`` and ``report``
stages, ``RunResult.extras["stage_seconds"]``) and ``validate_s`` (the schema check alone), in
wall-clock seconds. The candidates' scores on every split are the method's stage since the
pipeline has stages; a tree from before them (``--before``) is timed by wrapping its
``_report``, which scored them too.

``--before DIR`` runs the same case on another source tree (e.g. ``git archive <commit>``
unpacked), alternating with this one: the before/after columns.

Usage::

    python -m benchmarks.speed.report_cost --before /tmp/base    # → results/report_cost.json
    python -m benchmarks.speed.report_cost --quick               # 120 groups; writes nothing
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.harness.children import run_on_tree
from benchmarks.harness.results import write_run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "report_cost.json"
SHORT = ["trainer=smoke", "trainer.steps=4", "trainer.log_every=4", "trainer.snapshot_every=2",
         "trainer.bootstrap=0", "trainer.checkpoint_every=0", "trainer.plots=false",
         "trainer.tensorboard=false", "problem=equal_opportunity"]


def table(path: Path, a: int, b: int) -> None:
    """The crossed table: ``a·b`` cells of 24 rows, half of them positive."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    cell = np.repeat(np.arange(a * b), 24)
    y = np.tile(np.arange(24) % 2, a * b)
    pd.DataFrame({"x": rng.normal(size=len(cell)) + y, "a": [f"a{c // b}" for c in cell],
                  "b": [f"b{c % b}" for c in cell], "y": y}).to_csv(path, index=False)


def case(path: Path, run_dir: Path) -> dict[str, float]:
    """One run in this process, its phases timed."""
    import importlib
    import warnings

    from hydra import compose, initialize_config_dir

    import fairgames.train.config  # noqa: F401  (registers the schema)

    # the module (``fairgames.train.run`` the attribute is the function)
    run_module = importlib.import_module("fairgames.train.run")

    timed: dict[str, float] = {"report_s": 0.0, "validate_s": 0.0}

    def timing(key: str, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timed[key] += time.perf_counter() - start
        return wrapper

    staged = not hasattr(run_module, "_report")     # a tree with the pipeline's stage clock
    if not staged:
        run_module._report = timing("report_s", run_module._report)
        run_module.validate_results = timing("validate_s", run_module.validate_results)
    overrides = ["data=table", f"data.path={path}", "data.target=y", "data.protected=a*b",
                 "data.numerical=[x]", "data.categorical=[]", *SHORT]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    result = run_module.run(cfg, run_dir=run_dir)
    run_s = time.perf_counter() - start
    if staged:
        stages = result.extras["stage_seconds"]
        timed = {"report_s": stages["solutions"] + stages["report"],
                 "validate_s": stages["validate"]}
    return {"run_s": run_s, **timed}


def spawn(tree: Path, path: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        return run_on_tree("benchmarks.speed.report_cost", ["--case", str(path),
                           str(Path(tmp) / "run")], tree, cwd=tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="another source tree to compare with")
    ap.add_argument("--a", type=int, default=37)
    ap.add_argument("--b", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="12 × 10 groups, writes nothing")
    ap.add_argument("--case", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(case(*args.case)))
        return
    a, b = (12, 10) if args.quick else (args.a, args.b)
    trees = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crossed.csv"
        table(path, a, b)
        for _ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(spawn(tree, path))
                print(name, runs[name][-1], flush=True)
    out = {"groups": a * b, "constraints": a * b, "steps": 4, "runs": runs,
           "machine": "shared 2-core CPU, wall clock; other sessions running beside it"}
    if not args.quick:
        write_run(RESULTS, out, newline=True)
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
