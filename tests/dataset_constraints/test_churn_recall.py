"""problem=churn_recall (paper 001, Section 4.2's churn scenario): ``baseline_<metric>`` and
``baseline_<metric>_<source>`` names, the catalog entry and its data config, a run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.problems import ProblemError, ProblemSpec, load_problem
from fairgames.train.helpers import baseline_values


def _spec(bound: str) -> ProblemSpec:
    return ProblemSpec("cr", 'error(source="d1")', {"recall": f'tpr(source="d2") >= {bound}'})


def test_baseline_names_are_parsed_with_and_without_a_source():
    spec = _spec("baseline_tpr_d2")
    assert spec.needs_baseline()
    assert spec.baseline_metrics(["d1", "d2", "d3"]) == {"baseline_tpr_d2": 'tpr(source="d2")'}
    assert _spec("baseline_recall").baseline_metrics([]) == {"baseline_recall": "recall()"}


def test_an_unknown_baseline_metric_or_source_is_refused_naming_the_known_ones():
    with pytest.raises(ProblemError, match=r"'baseline_tpr_d9' names no metric.*d1, d2"):
        _spec("baseline_tpr_d9").baseline_metrics(["d1", "d2"])


def test_a_missing_baseline_value_is_refused_at_build():
    with pytest.raises(ProblemError, match=r"reads 'baseline_tpr_d2'.*baseline model"):
        _spec("baseline_tpr_d2").build(None, {}, sources=["d1", "d2"])


def test_baseline_values_against_numpy_on_one_source():
    rng = np.random.default_rng(0)
    from fairgames.data import TabularDataset
    n = 400
    x = torch.tensor(rng.normal(size=(n, 2)), dtype=torch.float32)
    y = torch.tensor(rng.integers(0, 2, n), dtype=torch.float32)
    src = torch.tensor(rng.integers(0, 3, n), dtype=torch.int64)
    y[src == 2] = 0.0
    ds = TabularDataset(x, y, "binary", {"g": torch.zeros(n, dtype=torch.int64)}, {"g": ["a"]},
                        ["a", "b"], "y", sources=src, source_names=["d1", "d2", "d3"],
                        unlabeled=("d3",))
    scores = torch.tensor(rng.normal(size=n), dtype=torch.float32)
    got = baseline_values({"baseline_tpr_d2": 'tpr(source="d2")', "baseline_ppr_d3":
                           'ppr(source="d3")'}, ds, "g", scores)
    s, yy, ss = scores.numpy() > 0, y.numpy(), src.numpy()
    pos2 = (ss == 1) & (yy == 1)
    assert got["baseline_tpr_d2"] == pytest.approx(s[pos2].mean(), abs=1e-6)
    assert got["baseline_ppr_d3"] == pytest.approx(s[ss == 2].mean(), abs=1e-6)


def test_the_catalog_entry_states_the_scenario():
    spec = load_problem("churn_recall")
    assert spec.needs_baseline() and spec.tolerance_kind == "bound"
    assert spec.baseline_metrics(["d1", "d2", "d3"]) == {"baseline_tpr_d2": 'tpr(source="d2")'}
    built = spec.build(None, {}, {"baseline_tpr_d2": 0.6}, sources=["d1", "d2", "d3"],
                       unlabeled=["d3"])
    assert sorted(c.name for c in built.constraints) == ["churn", "recall"]


# --------------------------------------------------------------------------- runs
def _hard(model, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        if hasattr(model, "predict_proba"):
            return model.predict_proba(x).numpy()
        return (model(x).reshape(-1) > 0).float().numpy()


def test_a_default_run_meets_recall_and_churn_on_train(train_run):
    """``problem=churn_recall data=adult_churn`` at the defaults (about 30 s): the recall
    floor is the deployed model's recall on D2, and the recommended model meets both
    constraints on train — checked against numpy on the models' own predictions."""
    from fairgames.train.data import load_splits
    result = train_run("churn_recall", "data=adult_churn", "problem=churn_recall",
                       "trainer.device=cpu", "trainer.progress=false", fast=False)
    config = result.results["config"]
    train = load_splits(config["data"], config["seed"]).train
    y, src = train.labels.numpy(), train.sources.numpy()
    base = _hard(result.extras["baseline_model"].eval(), train.features)
    pos2 = (src == 1) & (y == 1)
    floor = result.results["training"]["baseline"]["values"]["baseline_tpr_d2"]
    assert floor == pytest.approx(base[pos2].mean(), abs=1e-6)
    p = _hard(result.recommended.eval(), train.features)
    assert p[pos2].mean() >= floor - 1e-3                              # recall kept on D2
    d3 = src == 2
    churn = (p[d3] * (1 - base[d3]) + (1 - p[d3]) * base[d3]).mean()
    assert churn <= config["problem"]["tolerance"] + 1e-3               # churn on D3
    cons = result.results["solutions"]["recommended"]["train"]["constraints"]
    assert set(cons) == {"recall", "churn"}


@pytest.mark.slow
def test_a_multirun_over_the_churn_target(tmp_path):
    """``-m problem.tolerance=a,b``: one run per target, each with its own target."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "scripts/train.py", "-m", "data=adult_churn", "problem=churn_recall",
         "problem.tolerance=0.03,0.1", "trainer.steps=60", "trainer.device=cpu",
         "trainer.progress=false", f"hydra.sweep.dir={tmp_path}"],
        cwd=root, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = sorted(tmp_path.glob("*/results.json"))
    targets = sorted(json.loads(r.read_text())["config"]["problem"]["tolerance"] for r in runs)
    assert targets == [0.03, 0.1]


def test_the_example_runs_as_written(capsys):
    from pathlib import Path

    from script_loader import load_script
    example = Path(__file__).resolve().parents[2] / "examples" / "churn_recall.py"
    out = load_script(example).main(["--quick"])
    assert 0.0 < out["baseline_tpr_d2"] < 1.0
    for part in ("train", "test"):
        assert set(out[part]) == {"objective", "recall", "churn"}
        assert 0.0 <= out[part]["objective"] <= 2.0
    assert "step 28:" in capsys.readouterr().out      # every steps // 4 = 7 steps
