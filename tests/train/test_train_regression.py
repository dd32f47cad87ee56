"""A real-valued target reported end to end: a bounded-group-loss run on synthetic regression
data writes a schema-valid ``results.json`` (schema 2) and a ``report.md`` whose MSE, MAE and
per-group losses equal numpy's recomputation from the saved solutions."""

from __future__ import annotations

import copy
import json

import jsonschema
import numpy as np
import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.game.solutions import StochasticModel, load_solution
from fairgames.problems import ProblemSpec
from fairgames.train import fit, load_schema

SPEC = ProblemSpec("bounded_group_loss", 'group_loss("squared")',
                   {"bgl": 'for g in groups: group_loss("squared", group=g) <= tolerance'},
                   tolerance=0.05, tolerance_kind="bound")


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("regression")
    splits = make_synthetic(n=900, d=4, label_kind="real", label_noise=0.1, seed=3)
    result = fit(torch.nn.Linear(4, 1), SPEC, splits, protected="group",
                 trainer={"steps": 30, "log_every": 10, "snapshot_every": 5}, run_dir=run_dir)
    return result, splits


def _numpy_metrics(y: np.ndarray, s: np.ndarray, q: np.ndarray | None = None) -> dict:
    """MSE, MAE, mean prediction and mean label of scores ``s`` ``[N]`` (or of a mixture
    ``[R, N]`` with weights ``q``: each the expectation over the members)."""
    s2 = s[None] if q is None else s
    q = np.ones(1) if q is None else q
    return {"mse": float(q @ ((s2 - y) ** 2).mean(1)), "mae": float(q @ np.abs(s2 - y).mean(1)),
            "mean_prediction": float(q @ s2.mean(1)), "mean_label": float(q.sum() * y.mean())}


def test_regression_results_are_schema_valid_and_equal_numpy(regression_run):
    result, splits = regression_run
    res = json.loads((result.run_dir / "results.json").read_text())
    jsonschema.validate(res, load_schema())
    assert res["schema_version"] == 3
    final = load_solution(result.run_dir / "final.pt", torch.nn.Linear(4, 1))
    mix = load_solution(result.run_dir / "stochastic.pt", torch.nn.Linear(4, 1))
    assert isinstance(mix, StochasticModel)
    for name, ds in splits.items():
        y, g = ds.labels.double().numpy(), ds.groups["group"].numpy()
        with torch.no_grad():
            s = final(ds.features).squeeze(-1).double().numpy()
            members = mix.scores(ds.features).double().numpy()
        # the run evaluates a mixture with float32 weights (solutions.py; their sum is 1 to
        # float32 precision, hence the mean label's 1e-6), so the reference does too
        q = mix.weights.float().double().numpy()
        for solution, (scores, weights) in (("final", (s, None)),
                                            ("stochastic", (members, q))):
            m = res["solutions"][solution][name]
            assert m["label_kind"] == "real" and "error" not in m
            ref = _numpy_metrics(y, scores, weights)
            assert m["mse"] == pytest.approx(ref["mse"], rel=1e-9)
            assert m["mae"] == pytest.approx(ref["mae"], rel=1e-9)
            assert m["objective"] == pytest.approx(ref["mse"] / 2, rel=1e-9)   # ½(y − s)²
            for k, v in enumerate(ds.group_names["group"]):
                cols = (slice(None), g == k) if weights is not None else g == k
                group_ref = _numpy_metrics(y[g == k], scores[cols], weights)
                row = m["groups"][f"group={v}"]
                assert row["count"] == (g == k).sum()
                assert row["mean_label"] == pytest.approx(y[g == k].mean(), rel=1e-6)
                for key in ("mse", "mae", "mean_prediction", "mean_label"):
                    assert row[key] == pytest.approx(group_ref[key], rel=1e-9, abs=1e-12)
                c = m["constraints"][f"bgl[{v}]"]
                assert c["value"] == pytest.approx(group_ref["mse"] / 2 - 0.05, rel=1e-9)
                assert c["violation"] == pytest.approx(max(c["value"], 0.0), abs=1e-12)


def test_regression_report_lists_losses_not_rates(regression_run):
    result, _ = regression_run
    report = (result.run_dir / "report.md").read_text()
    assert ("| solution | split | objective | mse | mae | ks_disparity | grid_disparity | "
            "max violation |") in report
    assert "## Per-group losses: final, test split" in report
    assert "| group | count | share | mean_label | mean_prediction | mse | mae |" in report
    mse = result.results["solutions"]["final"]["test"]["mse"]
    assert "| final | test | " in report and f"{mse:.4f}" in report
    assert "tpr" not in report and "fmeasure" not in report
    # the logged history's table is the regression one too
    assert set(result.engine.history[-1]["groups"]["overall"]) == {
        "count", "share", "mean_label", "mean_prediction", "mse", "mae"}


def test_the_schema_tells_the_label_kinds_apart(regression_run):
    result, _ = regression_run
    schema = load_schema()
    bad = copy.deepcopy(result.results)
    bad["solutions"]["final"]["test"]["error"] = 0.1      # a regression block with an error
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(result.results)
    bad["solutions"]["final"]["test"]["label_kind"] = "binary"   # losses under a binary kind
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(result.results)
    bad["schema_version"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
