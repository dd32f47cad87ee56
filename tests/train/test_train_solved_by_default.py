"""Solved by default (issue 20): the headline command meets its constraint on train, and the
catalog matrix (benchmarks/reproduce/solved_by_default.py) passes cell by cell."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SLACK = 1e-6     # float rounding of a mixture's weights on a constraint's boundary


@functools.cache
def _bench():
    """benchmarks.reproduce.solved_by_default, imported on first use (collection reads its
    cells too)."""
    from benchmarks.reproduce import solved_by_default
    return solved_by_default


def test_every_problem_documents_data_sets_the_matrix_runs():
    bench = _bench()
    data = {p.stem for p in (ROOT / "configs" / "data").glob("*.yaml")}
    problems = sorted(p.stem for p in (ROOT / "configs" / "problem").glob("*.yaml"))
    cells = bench.matrix_cells()
    for name in problems:
        declared = yaml.safe_load((ROOT / "configs" / "problem" / f"{name}.yaml").read_text())
        assert declared["data_sets"], name
        assert set(declared["data_sets"]) <= data, name
        assert [d for p, d in cells if p == name] == declared["data_sets"]


def test_the_headline_command_recommends_a_solution_feasible_on_train(tmp_path):
    """`scripts/train.py problem=fmeasure_parity data=adult` at 300 steps (the default is
    500), seed 0: the recommended solution meets F1 parity on train, and the verdict says so."""
    from fairgames.train import run

    bench = _bench()
    cfg = bench.compose(["problem=fmeasure_parity", "data=adult", "seed=0",
                         "trainer.steps=300", "trainer.progress=false"])
    res = run(cfg, tmp_path / "run").results
    rec = res["solutions"]["recommended"]
    assert rec["train"]["constraints"]["f1_parity"]["value"] <= SLACK
    assert res["verdict"]["constraints"]["f1_parity"]["status"] in ("met", "not_significant")
    assert res["training"]["surrogate"] == "sigmoid"          # auto, for F-measure parity
    # Not a near-constant model: the F-measure of predicting everyone positive is 2p / (1 + p)
    # (p ≈ 0.24 on Adult, so ≈ 0.39); the recommended one does much better.
    assert 1.0 - rec["test"]["objective"] > 0.6


def test_judge_compares_with_the_reference_outputs_that_meet_the_constraints():
    bench = _bench()

    def sol(train_violation, train_objective, test_objective):
        return {"train": {"max_violation": train_violation, "objective": train_objective},
                "test": {"max_violation": 0.0, "objective": test_objective}}

    row = {"recommended": "recommended", "likely_infeasible": False,
           "solutions": {"recommended": sol(0.0, 0.30, 0.31)}}
    # the reference's final model misses the constraint: not a bar; its stochastic one is
    ref = {"solutions": {"final": sol(0.05, 0.20, 0.21), "stochastic": sol(0.0, 0.35, 0.36)}}
    judged = bench.judge(row, ref)
    assert judged["objective_bar"] == 0.35 and judged["passed"]
    assert judged["test_delta"] == pytest.approx(0.31 - 0.36)
    ref["solutions"]["stochastic"] = sol(0.0, 0.25, 0.26)      # a better feasible output
    assert not bench.judge(row, ref)["passed"]
    row["solutions"]["recommended"] = sol(0.01, 0.10, 0.10)    # misses on train
    assert not bench.judge(row, None)["passed"]


def _matrix_params():
    return [pytest.param(*cell, id=":".join(cell)) for cell in _bench().matrix_cells()]


@pytest.mark.slow
@pytest.mark.parametrize(("problem", "data"), _matrix_params())
def test_the_catalog_matrix_cell_is_solved_by_default(problem, data):
    """Every catalog problem on every data set it documents, with the defaults: the
    recommended solution meets the constraints on train (or the run reports the problem
    likely infeasible), and its train objective is no worse than the better of the pre-issue
    code's final and stochastic models that met them (benchmarks/results/
    solved_by_default_before.json). A cell that misses fails here; the misses measured so far
    are in benchmarks/results/solved_by_default.discussion.md with their figures."""
    import json

    bench = _bench()
    reference = {(c["problem"], c["data"]): c for c in json.loads(
        (ROOT / "benchmarks" / "results" / "solved_by_default_before.json").read_text())["cells"]}
    row = bench.run_cell(problem, data, 0, ["trainer.progress=false"])
    # a problem added after the reference was taken has none: judged on train feasibility
    judged = bench.judge(row, reference.get((problem, data)))
    assert judged["passed"], (judged, row["solutions"]["recommended"])
