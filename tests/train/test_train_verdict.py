"""The verdict of a run (``fairgames.train.results.verdict``) and the constraints' bootstrap
intervals in ``results.json`` (``fairgames.train.results.intervals``): the rules on hand-made
values, a run's
intervals against a numpy bootstrap of the saved model, and the CLI's verdict lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.game.solutions import load_solution
from fairgames.models import build_model
from fairgames.train import ConfigError, fit, validate
from fairgames.train.data import load_splits
from fairgames.train.results.verdict import (
    SLACK,
    constraint_verdict,
    run_verdict,
    verdict_lines,
    what_to_try,
)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = (r"met", r"met on train, not significant on test",
             r"met on train, NOT met on test \(significant\)",
             r"NOT met on train — likely infeasible or too few steps \(.+\)",
             r"undefined on (train|test)( and test)?")


def _one_of_the_templates(text: str) -> bool:
    return sum(bool(re.fullmatch(t, text)) for t in TEMPLATES) == 1


@pytest.mark.parametrize(("sense", "train", "test", "interval", "status"), [
    ("<=", -0.02, -0.01, [-0.03, 0.01], "met"),           # met on train and test
    ("<=", -0.02, 0.01, [-0.01, 0.03], "not_significant"),  # a test miss within noise
    ("<=", SLACK, 0.01, [0.0, 0.03], "not_significant"),  # float slack on train; lo = 0
    ("<=", 2 * SLACK, -0.5, [-0.6, -0.4], "not_met"),     # train decides first
    ("<=", 0.0, 0.04, [0.01, 0.07], "missed_on_test"),    # a test violation beyond noise
    ("<=", 0.0, 0.0, None, "met"),                        # no interval: the test value
    ("<=", 0.0, 2 * SLACK, None, "missed_on_test"),
    ("==", 1e-7, 1e-7, [-0.01, 0.03], "met"),             # equality: |g| within the slack
    ("==", 1e-7, 0.01, [-0.01, 0.03], "not_significant"),  # equality: 0 in the interval
    ("==", 0.0, -0.04, [-0.07, -0.01], "missed_on_test"),
    ("==", -0.01, 0.0, [-0.01, 0.01], "not_met"),          # |g| on train
    ("<=", None, 0.01, [-0.01, 0.03], "undefined"),
    ("<=", -0.1, None, None, "undefined"),
])
def test_each_status_follows_the_documented_rule(sense, train, test, interval, status):
    v = constraint_verdict(sense, {"train": train, "validation": 0.0, "test": test},
                           {"test": interval}, "try more steps")
    assert v["status"] == status
    assert _one_of_the_templates(v["verdict"]), v["verdict"]
    assert v["train"] == train and v["test"] == interval
    assert v["values"]["validation"] == 0.0 and v["intervals"]["train"] is None
    if status == "undefined":
        assert v["verdict"] == "undefined on " + ("train" if train is None else "test")
    if status == "not_met":
        assert v["verdict"].endswith("(try more steps)")


@pytest.mark.parametrize(("sense", "train"), [("<=", 0.05), ("==", -0.05)])
def test_violated_on_train_reads_not_met_though_test_is_undefined(sense, train):
    """A group with no test row must not hide a train violation behind "undefined"."""
    v = constraint_verdict(sense, {"train": train, "validation": None, "test": None},
                           {"test": None}, "try more steps")
    assert v["status"] == "not_met"
    assert v["verdict"] == ("NOT met on train — likely infeasible or too few steps "
                            "(try more steps) (undefined on validation and test)")


def test_what_to_try_names_the_levers_and_a_tolerance_that_passes():
    results = {"training": {"steps": 500, "likely_infeasible": False},
               "config": {"trainer": {"steps": 500},
                          "problem": {"tolerance": 0.02, "tolerance_kind": "difference"}}}
    text = what_to_try(results, 0.0683)
    assert "trainer.steps=1000" in text and "trainer.tune=validation" in text
    tol = float(re.search(r"problem\.tolerance=([0-9.]+)", text).group(1))
    # g = (F1 gap) - tolerance moves one for one with it: the train value would pass
    assert 0.0683 + 0.02 - tol <= 0 < 0.0683 + 0.02 - (tol - 0.01)
    flagged = what_to_try({**results, "training": {"steps": 500, "likely_infeasible": True}},
                          0.0683)
    assert flagged.startswith("the infeasibility monitor flags it as likely infeasible")
    ratio = {"training": {"steps": 10},
             "config": {"trainer": {"epochs": 1.5},
                        "problem": {"tolerance": 1.1, "tolerance_kind": "ratio"}}}
    assert what_to_try(ratio, 0.2) == ("try trainer.epochs=3, trainer.tune=validation or a "
                                       "larger problem.tolerance")


def test_trainer_bootstrap_is_validated(compose_cfg):
    validate(compose_cfg("data=synthetic", "trainer.bootstrap=0"))
    with pytest.raises(ConfigError, match=r"trainer.bootstrap=-1: must be non-negative"):
        validate(compose_cfg("data=synthetic", "trainer.bootstrap=-1"))


@pytest.fixture(scope="module")
def boot_run(train_run):
    return train_run("verdict", "problem=equal_opportunity", "trainer.bootstrap=2000")


def _tpr_constraints(y, p, g, k, tol=0.05):
    """``tpr(group=k) >= tpr() - tol`` as ``g <= 0``: TPR − tol − TPR(k), numpy."""
    def tpr(m):
        return (p * y * m).sum() / (y * m).sum()

    return tpr(np.ones_like(y)) - tol - tpr(g == k)


def test_run_intervals_match_a_numpy_bootstrap_of_the_saved_model(boot_run):
    res = boot_run.results
    cfg = res["config"]
    test = load_splits(cfg["data"], cfg["seed"]).test
    meta = torch.load(boot_run.run_dir / "final.pt", weights_only=True)["metadata"]["model"]
    final = load_solution(boot_run.run_dir / "final.pt",
                          build_model(name=meta["name"], input_dim=meta["input_dim"],
                                      bias=meta["bias"]))
    with torch.no_grad():
        p = (final(test.features).squeeze(-1) >= 0).double().numpy()
    y, g = test.labels.double().numpy(), test.groups["group"].numpy()
    rng = np.random.default_rng(0)
    strata = g * 2 + y.astype(int)
    draws = []
    for _ in range(2000):
        idx = np.concatenate([rng.choice(np.nonzero(strata == s)[0], (strata == s).sum())
                              for s in np.unique(strata)])
        draws.append([_tpr_constraints(y[idx], p[idx], g[idx], k) for k in (0, 1)])
    draws = np.array(draws)
    for k in (0, 1):
        entry = res["solutions"]["final"]["test"]["constraints"][f"tpr[{k}]"]
        assert entry["value"] == pytest.approx(_tpr_constraints(y, p, g, k), abs=1e-9)
        lo, hi = entry["interval"]
        ref_lo, ref_hi = np.quantile(draws[:, k], [0.025, 0.975])
        sd = draws[:, k].std()
        assert lo == pytest.approx(ref_lo, abs=0.25 * sd)
        assert hi == pytest.approx(ref_hi, abs=0.25 * sd)


def test_every_solution_split_and_constraint_has_an_interval_and_the_verdict_follows(boot_run):
    res = boot_run.results
    for solution, per_split in res["solutions"].items():
        for split, metrics in per_split.items():
            for name, entry in metrics["constraints"].items():
                lo, hi = entry["interval"]
                assert lo <= hi, (solution, split, name)
                assert hi - lo < 0.5
    verdict = res["verdict"]
    assert verdict["solution"] == "recommended" and verdict["resamples"] == 2000
    judged = res["solutions"]["recommended"]
    assert set(verdict["constraints"]) == set(judged["test"]["constraints"])
    for name, v in verdict["constraints"].items():
        train = judged["train"]["constraints"][name]["value"]
        test = judged["test"]["constraints"][name]["value"]
        lo, _ = judged["test"]["constraints"][name]["interval"]
        expected = ("not_met" if train > SLACK else "met" if test <= SLACK
                    else "not_significant" if lo <= 0 else "missed_on_test")
        assert v["status"] == expected
        assert v["train"] == train
        assert v["test"] == judged["test"]["constraints"][name]["interval"]
        assert _one_of_the_templates(v["verdict"])
    report = (boot_run.run_dir / "report.md").read_text()
    assert "## Verdict" in report
    for name, v in verdict["constraints"].items():
        assert f"| {name} | {v['verdict']} |" in report


def test_bootstrap_zero_gives_no_interval_and_the_test_value_decides(tmp_path):
    splits = make_synthetic(n=900, d=3, seed=1)
    result = fit(torch.nn.Linear(3, 1), "equal_opportunity", splits, protected="group",
                 trainer={"steps": 20, "bootstrap": 0})
    res = result.results
    assert res["verdict"]["resamples"] == 0
    for per_split in res["solutions"].values():
        for metrics in per_split.values():
            assert all(e["interval"] is None for e in metrics["constraints"].values())
    for v in res["verdict"]["constraints"].values():
        assert v["test"] is None
        train, test = v["values"]["train"], v["values"]["test"]
        expected = ("not_met" if train > SLACK else "met" if test <= SLACK
                    else "missed_on_test")
        assert v["status"] == expected
    assert "no interval: trainer.bootstrap=0" in verdict_lines(res["verdict"])[0]


def test_the_cli_prints_one_verdict_line_per_constraint_and_exits_0(tmp_path):
    out = subprocess.run(
        [sys.executable, "scripts/train.py", "data=synthetic", "data.n=1500", "trainer=smoke",
         "trainer.steps=30", "problem=demographic_parity", "trainer.bootstrap=1000",
         f"run_dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    lines = out.stdout.strip().splitlines()
    head = lines.index("verdict for the recommended model (test: 95 % bootstrap interval, "
                       "1000 resamples):")
    body = lines[head + 1:]
    assert len(body) == len(res["verdict"]["constraints"]) == 4
    for line, (name, v) in zip(body, res["verdict"]["constraints"].items(), strict=True):
        assert line.startswith(f"  {name}: {v['verdict']}. train g = ")


def test_a_problem_without_constraints_says_so():
    lines = verdict_lines({"solution": "stochastic", "resamples": 1000, "constraints": {}})
    assert lines[1:] == ["  (the problem has no constraint)"]


def _one_violated(problem: dict, name: str, train_g: float) -> dict:
    """``results.json``'s parts :func:`run_verdict` reads, one constraint violated on train."""
    entry = {"train": {"constraints": {name: {"value": train_g}}},
             "test": {"constraints": {name: {"value": train_g}}}}
    return {"training": {"steps": 500, "likely_infeasible": False},
            "config": {"trainer": {"steps": 500}, "problem": problem},
            "solutions": {"recommended": entry}}


def test_the_advice_names_the_constant_a_statement_reads_not_an_unread_tolerance():
    """Issue 55: a statement with its own constant (``- 0.02``) reads no ``tolerance``; the
    advice must not send the user to ``problem.tolerance`` (following it changes nothing)."""
    problem = {"tolerance": 0.05, "tolerance_kind": "difference",
               "constraints": {"tpr": "for g in groups: tpr(group=g) >= tpr() - 0.02"}}
    v = run_verdict(_one_violated(problem, "tpr[Female]", 0.068), {"tpr[Female]": "<="})
    text = v["constraints"]["tpr[Female]"]["verdict"]
    assert not re.search(r"problem\.tolerance=|larger problem\.tolerance", text), text
    assert "problem.constraints.tpr" in text and "0.02" in text, text
    # a statement that reads a variable: that variable is the lever
    problem = {"tolerance": 0.05, "tolerance_kind": "difference", "variables": {"eps": 0.02},
               "constraints": ["tpr(group=1) >= tpr() - eps"]}
    text = run_verdict(_one_violated(problem, "c0", 0.068),
                       {"c0": "<="})["constraints"]["c0"]["verdict"]
    assert "problem.variables.eps" in text and "problem.tolerance" not in text, text
    # an unknown constraint name (another family's row) keeps the tolerance advice
    text = run_verdict(_one_violated(problem, "other", 0.068),
                       {"other": "<="})["constraints"]["other"]["verdict"]
    assert "problem.tolerance=0.12" in text, text


@pytest.mark.parametrize(("kind", "tolerance", "violation"),
                         [("difference", 0.98, 0.07), ("bound", 0.97, 0.05)])
def test_the_advice_never_suggests_a_tolerance_out_of_its_range(kind, tolerance, violation):
    """Issue 55: ``tolerance + violation`` past the kind's range (1.05 for a difference) is a
    value the run refuses; the advice says no tolerance passes and names other levers."""
    from fairgames.problems.spec import TOLERANCE_RANGES
    problem = {"tolerance": tolerance, "tolerance_kind": kind,
               "constraints": {"c": "fpr() <= tolerance"}}
    text = run_verdict(_one_violated(problem, "c", violation),
                       {"c": "<="})["constraints"]["c"]["verdict"]
    low, _, high, high_closed, _ = TOLERANCE_RANGES[kind]
    for value in re.findall(r"problem\.tolerance=([0-9.]+)", text):
        assert low <= float(value) and (float(value) <= high if high_closed
                                        else float(value) < high), text
    assert "model=mlp" in text and "no problem.tolerance" in text, text
    flagged = _one_violated(problem, "c", violation)
    flagged["training"]["likely_infeasible"] = True
    text = run_verdict(flagged, {"c": "<="})["constraints"]["c"]["verdict"]
    assert "likely infeasible: no problem.tolerance" in text and "try no " not in text, text
