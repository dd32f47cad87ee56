"""Run directories written by an older fairgames (commit 6874b69) still work.

``fixtures/run_dirs_6874b69/`` (its README says how it was made) holds a finished run and the
same run stopped at step 17 of 30 with a checkpoint, and ``expected.json``: what the
uninterrupted run gave at 6874b69 (its results, and its solutions' outputs on 20 test rows).
Only entry points that stay put are used: ``fairgames.load_run``, ``scripts/train.py`` and
``fairgames.data.make_synthetic``. Every comparison is exact: at 6874b69 a resumed run's
results equal the uninterrupted run's bit for bit (one torch thread, CPU).

``python tests/train/test_train_old_run_dirs.py --write-expected`` rewrites ``expected.json``
from ``finished/``; run it only with the code that wrote the fixtures (6874b69).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import fairgames
from fairgames.data import make_synthetic

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "run_dirs_6874b69"
EXPECTED = FIXTURES / "expected.json"
SOLUTIONS = ("recommended", "best_iterate", "final", "stochastic")
SPLITS = ("train", "validation", "test")
# the data of the runs (results.json config.data, with the run's seed 0), and the rows checked
DATA = {"n": 400, "d": 3, "n_groups": 2, "group_proportions": [0.7, 0.3], "separability": 1.0,
        "group_shift": 1.0, "label_noise": 0.0, "seed": 0}
ROWS = 20   # rows 12-14: the mixtures' members disagree (predict_proba strictly in (0, 1))


def rows() -> Any:
    """The first ``ROWS`` rows of the synthetic test split the runs were trained beside."""
    return make_synthetic(**DATA).test.features[:ROWS]


def outputs(run_dir: Path) -> dict[str, Any]:
    """Every solution of ``run_dir`` (through ``fairgames.load_run``) on :func:`rows`: whether
    it is a mixture, its weights, its members' scores and ``predict_proba``."""
    run = fairgames.load_run(run_dir)
    assert sorted(run.solutions) == sorted(SOLUTIONS)
    x = rows()
    return {name: {"mixture": run.solutions[name].is_mixture,
                   "weights": run.solutions[name].weights.tolist(),
                   "scores": run.solutions[name].scores(x).tolist(),
                   "predict_proba": run.solutions[name].predict_proba(x).tolist()}
            for name in SOLUTIONS}


def numbers(results: dict[str, Any]) -> dict[str, Any]:
    """What a run's ``results.json`` must reproduce: every solution's objective, error and
    constraint values and violations on each split, and the game's end state."""
    training = results["training"]
    return {
        "solutions": {name: {split: {
            "objective": m["objective"], "error": m["error"],
            "constraints": {c: [v["value"], v["violation"]] for c, v in m["constraints"].items()}}
            for split, m in results["solutions"][name].items()} for name in SOLUTIONS},
        "training": {
            "steps": training["steps"], "multipliers": training["multipliers"],
            "objective_weight": training["objective_weight"],
            "snapshots": training["snapshots"]["steps"],
            "best_iterate": training["best_iterate"],
            "stochastic": {k: training["stochastic"][k] for k in ("steps", "weights")},
            "recommended": {k: training["recommended"][k]
                            for k in ("solution", "steps", "members", "weights")}}}


def write_expected() -> None:
    """``expected.json`` from ``finished/`` (only with the fairgames that wrote it)."""
    results = json.loads((FIXTURES / "finished" / "results.json").read_text())
    EXPECTED.write_text(json.dumps({
        "commit": "6874b69",
        "data": {"make_synthetic": DATA, "split": "test", "rows": ROWS,
                 "features": rows().tolist()},
        "outputs": outputs(FIXTURES / "finished"),
        "results": numbers(results)}, indent=1) + "\n")


def expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text())


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_the_rows_regenerate():
    """The synthetic rows the predictions are checked on are the ones recorded."""
    want = expected()["data"]
    assert want["make_synthetic"] == DATA and want["rows"] == ROWS
    assert rows().tolist() == want["features"]


def test_an_old_finished_run_loads_and_predicts_as_it_did(tmp_path):
    run_dir = tmp_path / "finished"                   # elsewhere than where it was written
    shutil.copytree(FIXTURES / "finished", run_dir)
    want = expected()
    assert outputs(run_dir) == want["outputs"]
    for name in ("recommended", "stochastic"):        # mixtures, randomised on some rows
        assert want["outputs"][name]["mixture"]
        assert any(0 < p < 1 for p in want["outputs"][name]["predict_proba"])
    run = fairgames.load_run(run_dir)
    assert numbers(run.results) == want["results"]
    assert files(run_dir) == files(FIXTURES / "finished")   # loading writes nothing


def test_an_old_stopped_run_resumes_to_the_uninterrupted_results(tmp_path):
    run_dir = tmp_path / "stopped"
    shutil.copytree(FIXTURES / "stopped", run_dir)
    before = files(FIXTURES / "stopped")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get(
               "PYTHONPATH")])])}                # this checkout's fairgames, not another one
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"),
                           f"trainer.resume={run_dir}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    want = expected()
    assert numbers(results) == want["results"]
    assert results["config"]["trainer"]["resume"] == str(run_dir)
    assert outputs(run_dir) == want["outputs"]        # the resumed run's solution files
    # the run's own .hydra/ record is kept, and the fixture itself is left alone
    assert {k: v for k, v in files(run_dir).items() if k.startswith(".hydra")} == {
        k: v for k, v in before.items() if k.startswith(".hydra")}
    assert files(FIXTURES / "stopped") == before


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-expected"]:
        sys.exit("usage: python tests/train/test_train_old_run_dirs.py --write-expected")
    write_expected()
