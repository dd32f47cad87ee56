"""What a run leaves for people to read: ``train.log`` holds the run's log, Hydra's record
lands in ``run_dir``, per-group tables carry counts and between-group difference and ratio
summaries (checked against fairlearn's ``MetricFrame``) and export as CSV, and the dynamics
plot names its split, draws the bound, smooths minibatch curves and marks infinite values."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from fairlearn.metrics import MetricFrame, count, false_positive_rate, selection_rate
from sklearn.metrics import accuracy_score, precision_score, recall_score

from fairgames.data import from_frame
from fairgames.train import fit

ROOT = Path(__file__).resolve().parents[2]


def test_run_dir_holds_the_hydra_record_and_the_log(tmp_path):
    run_dir = tmp_path / "out" / "run"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "trainer=smoke",
                           "data=synthetic", "data.n=600", "trainer.bootstrap=0",
                           f"run_dir={run_dir}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert not (tmp_path / "runs").exists()              # no stray runs/<date>/... record
    log = (run_dir / "train.log").read_text()
    assert "step 20/40: objective" in log and "step 40/40: objective" in log
    summary = done.stdout.splitlines()[0]
    assert summary.startswith(f"{run_dir}: recommended") and summary in log
    assert "[fairgames.train.loop.engine]" not in done.stdout    # the console shows prints only


@pytest.fixture(scope="module")
def table_fit(tmp_path_factory):
    """A three-group table trained with fit, bootstrap intervals on."""
    rng = np.random.default_rng(0)
    n = 900
    race = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(2 * x + (race == "a") - 0.5)))).astype(int)
    frame = pd.DataFrame({"x": x, "z": rng.normal(size=n), "race": race, "y": y})
    splits = from_frame(frame, target="y", protected="race", seed=0)
    run_dir = tmp_path_factory.mktemp("groups")
    torch.manual_seed(0)           # the model's initialisation: the same whatever ran before
    result = fit(torch.nn.Linear(splits.train.num_features, 1), "demographic_parity", splits,
                 protected="race", trainer={"steps": 30, "bootstrap": 50}, run_dir=run_dir)
    return result, splits, run_dir


def test_group_summaries_match_fairlearns_metric_frame(table_fit):
    result, splits, run_dir = table_fit
    test = splits.test
    with torch.no_grad():
        pred = (result.model(test.features).reshape(-1) > 0).int().numpy()
    y = test.labels.int().numpy()
    names = np.array(test.group_names["race"])[test.groups["race"].numpy()]
    frame = MetricFrame(
        metrics={"count": count, "positive_rate": selection_rate, "tpr": recall_score,
                 "fpr": false_positive_rate, "precision": precision_score,
                 "error": lambda t, p: 1.0 - accuracy_score(t, p)},
        y_true=y, y_pred=pred, sensitive_features=pd.Series(names, name="race"))
    table = pd.read_csv(run_dir / "groups.csv")
    final = table[(table.solution == "final") & (table.split == "test")].set_index("group")
    assert 0 < pred.mean() < 1          # the final model predicts both classes
    for metric in ("positive_rate", "tpr", "fpr", "precision", "error"):
        assert final.loc["difference", metric] == pytest.approx(
            frame.difference()[metric], abs=1e-6), metric
        # 0/0 (no positive prediction in any group): undefined on both sides
        assert final.loc["ratio", metric] == pytest.approx(frame.ratio()[metric], abs=1e-6,
                                                           nan_ok=True), metric
        for value in ("a", "b", "c"):
            assert final.loc[f"race={value}", metric] == pytest.approx(
                frame.by_group.loc[value, metric], abs=1e-6)
    for value in ("a", "b", "c"):
        assert final.loc[f"race={value}", "count"] == frame.by_group.loc[value, "count"]
    assert np.isnan(final.loc["difference", "count"])        # counts are not summarised
    report = (run_dir / "report.md").read_text()
    assert "| difference | – | – |" in report and "| race=c | " in report


def test_constraints_csv_carries_the_intervals(table_fit):
    result, _, run_dir = table_fit
    table = pd.read_csv(run_dir / "constraints.csv")
    results = result.results["solutions"]
    assert len(table) == sum(len(m["constraints"]) for s in results.values()
                             for m in s.values())
    for row in table.itertuples():
        c = results[row.solution][row.split]["constraints"][row.constraint]
        assert row.value == pytest.approx(c["value"], abs=1e-12)
        if c["interval"] is None:
            assert np.isnan(row.interval_low)
        else:
            assert (row.interval_low, row.interval_high) == pytest.approx(c["interval"])
    assert table[table.split == "test"].interval_low.notna().any()


def _history(n: int = 40) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for step in range(1, n + 1):
        g = float(0.1 - step / n * 0.2 + rng.normal(0, 0.05))
        out.append({"step": step, "objective_true": 0.3 + rng.normal(0, 0.02),
                    "objective_surrogate": None, "constraints": {"eo": g},
                    "multipliers": {"eo": 0.1 * step}, "objective_weight": 1.0})
    out[10]["objective_true"] = math.inf
    out[12]["constraints"]["eo"] = math.nan
    return out


def test_the_dynamics_plot_names_its_split_draws_the_bound_and_marks_infinite_values():
    import matplotlib.pyplot as plt

    from fairgames.train.results.report import dynamics_figure, smoothed
    history = _history()
    fig = dynamics_figure(history, split="held-out validation", minibatch=True, tolerance=0.05)
    try:
        objective, constraints, _ = fig.axes
        assert "train, minibatches" in objective.get_title()
        assert "held-out validation, minibatches" in constraints.get_title()
        labels = {line.get_label(): line for line in constraints.get_lines()}
        assert "g = 0: the bound (tolerance 0.05 included)" in labels
        assert list(labels["g = 0: the bound (tolerance 0.05 included)"].get_ydata()) == [0, 0]
        # raw curve faint, the smoothed one labelled and equal to the moving average
        raw = [ln for ln in constraints.get_lines() if ln.get_alpha() == 0.25]
        assert len(raw) == 1
        values = [h["constraints"]["eo"] for h in history]
        np.testing.assert_allclose(labels["eo"].get_ydata(), smoothed(values))
        assert np.std(np.diff(labels["eo"].get_ydata()[14:])) < np.std(
            np.diff(np.asarray(values)[14:]))
        # the infinite objective and the NaN constraint are marked at their steps
        marks = {ln.get_label(): list(ln.get_xdata()) for ax in (objective, constraints)
                 for ln in ax.get_lines() if ln.get_marker() == "x"}
        assert marks == {"true: not finite": [11], "eo: not finite": [13]}
    finally:
        plt.close(fig)


def test_a_full_batch_plot_is_not_smoothed():
    import matplotlib.pyplot as plt

    from fairgames.train.results.report import dynamics_figure
    fig = dynamics_figure(_history(), minibatch=False)
    try:
        assert all(ln.get_alpha() is None for ax in fig.axes for ln in ax.get_lines())
        assert "train, full batch" in fig.axes[1].get_title()
    finally:
        plt.close(fig)


def test_the_dynamics_plot_draws_validation_labels_its_axes_and_tells_equal_series_apart():
    import matplotlib.pyplot as plt

    from fairgames.train.results.report import dynamics_figure
    history = _history()
    for i, h in enumerate(history):
        h["constraints"]["eo_twin"] = h["constraints"]["eo"]      # two series, equal values
        h["multipliers"]["eo_twin"] = h["multipliers"]["eo"]
        h["extra"] = {"validation/objective": 0.25 + 0.001 * i,
                      "validation/constraint/eo": -0.01 * i}
    fig = dynamics_figure(history, minibatch=False)
    try:
        objective, constraints, multipliers = fig.axes
        assert [ax.get_ylabel() for ax in fig.axes] == [
            "objective", "constraint value g", "multiplier λ"]
        lines = {ln.get_label(): ln for ax in fig.axes for ln in ax.get_lines()}
        np.testing.assert_allclose(lines["validation (whole split)"].get_ydata(),
                                   [h["extra"]["validation/objective"] for h in history])
        np.testing.assert_allclose(lines["eo (validation)"].get_ydata(),
                                   [h["extra"]["validation/constraint/eo"] for h in history])
        assert lines["eo (validation)"].get_color() == lines["eo"].get_color()
        assert "eo_twin (validation)" not in lines        # not logged: not drawn
        for ax in (constraints, multipliers):
            pair = [ln for ln in ax.get_lines() if ln.get_label() in ("eo", "eo_twin")]
            assert len(pair) == 2
            assert (pair[0].get_linestyle(), pair[0].get_marker()) != (
                pair[1].get_linestyle(), pair[1].get_marker())
    finally:
        plt.close(fig)
