"""scripts/filter.py and its pipeline (issue 49): the run directory's files agree with an
independent numpy reading of them, a finished filter run is not overwritten unasked, and bad
options end in one message."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairgames.filtering import BalancedFilter
from fairgames.filtering.pipeline import fit_filter, write_outputs

ROOT = Path(__file__).resolve().parents[2]
FILTER = {"proxy": "qp_tree", "eta": 0.1}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A filter run on an own table (raw rows: its preprocessing is written too)."""
    rng = np.random.default_rng(0)
    g = rng.choice(["a", "b", "c"], size=1500, p=[0.6, 0.3, 0.1])
    x = rng.normal(size=(1500, 2)) + (g == "b")[:, None] - (g == "c")[:, None]
    frame = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "colour": rng.choice(["r", "s"], 1500),
                          "g": g, "y": rng.integers(0, 2, 1500)})
    data_dir = tmp_path_factory.mktemp("data")
    frame.to_csv(data_dir / "t.csv", index=False)
    cfg = {"data": {"name": "table", "path": str(data_dir / "t.csv"), "target": "y",
                    "protected": "g"}, "seed": 2, "filter": FILTER}
    run = fit_filter(cfg)
    run_dir = tmp_path_factory.mktemp("filter")
    write_outputs(run, run_dir, cfg)
    run.frame = frame          # the raw rows, for the saved filter's test
    return run, run_dir


def test_kept_csv_and_metrics_agree_with_the_split(written):
    run, run_dir = written
    rows = list(csv.DictReader((run_dir / "kept.csv").open()))
    kept = np.array([int(r["row"]) for r in rows])
    np.testing.assert_array_equal(kept, run.kept)
    train_indices = np.asarray(run.splits.metadata["split_indices"]["train"])
    assert [int(r["source_row"]) for r in rows] == train_indices[kept].tolist()
    assert [r["group"] for r in rows] == [str(g) for g in run.train.z[kept]]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    # the realised imbalance, recomputed from kept.csv with numpy
    groups = metrics["train"]["groups"]
    counts = np.array([sum(r["group"] == g for r in rows) for g in groups], dtype=float)
    target = np.asarray(metrics["train"]["target"])
    assert metrics["train"]["imbalance_realised"] == pytest.approx(
        np.linalg.norm(counts / counts.sum() - target))
    assert metrics["train"]["kept"] == len(rows)
    assert metrics["config"]["filter"] == FILTER
    assert (run_dir / "posterior.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "preprocess.json").is_file()          # raw rows can be encoded later


def test_the_saved_filter_applies_as_the_fitted_one(written):
    run, run_dir = written
    loaded = BalancedFilter.load(run_dir / "filter.json")
    np.testing.assert_array_equal(loaded.acceptance_probabilities(run.test.X),
                                  run.filter.acceptance_probabilities(run.test.X))


def _filter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/filter.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_command_line_writes_refuses_to_overwrite_and_names_bad_options(tmp_path):
    data = ["data=synthetic", "data.n=800", "filter.proxy=naive_tree"]
    out = _filter(*data, f"run_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "imbalance" in out.stdout and (tmp_path / "filter.json").is_file()
    again = _filter(*data, f"run_dir={tmp_path}")
    assert again.returncode == 2 and "holds a finished run (metrics.json)" in again.stderr
    assert _filter(*data, f"run_dir={tmp_path}", "overwrite=true").returncode == 0
    bad = _filter(*data, "filter.eta=2", f"run_dir={tmp_path / 'b'}")
    assert bad.returncode == 2 and "eta must lie in [0, 1]" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "b").exists()
    typo = _filter(*data, "filter.etta=0.3", f"run_dir={tmp_path / 'c'}")
    assert typo.returncode == 2 and "filter.etta" in typo.stderr


def test_a_later_process_applies_the_saved_filter_to_raw_rows(written, tmp_path):
    """scripts/apply_filter.py on the raw test rows (without the target and the protected
    column): the training preprocessing encodes them, and its probabilities are the fitted
    filter's on the test split's features; the kept rows are its seeded draw."""
    run, run_dir = written
    test_rows = np.asarray(run.splits.metadata["split_indices"]["test"])
    raw = run.frame.iloc[test_rows].drop(columns=["y", "g"])
    raw.to_csv(tmp_path / "new.csv", index=False)
    done = subprocess.run([sys.executable, "scripts/apply_filter.py", str(run_dir), "--data",
                           str(tmp_path / "new.csv"), "--out", str(tmp_path / "new.csv"),
                           "--seed", "5"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = pd.read_csv(tmp_path / "new.csv")        # --out replaced --data only when complete
    kept = run.filter.filter(run.test.X, seed=5)
    np.testing.assert_allclose(out["acceptance_probability"],
                               run.filter.acceptance_probabilities(run.test.X)[kept])
    np.testing.assert_allclose(out["x1"], raw["x1"].to_numpy()[kept])
    wrong = raw.rename(columns={"x2": "x3"})
    wrong.to_csv(tmp_path / "wrong.csv", index=False)
    bad = subprocess.run([sys.executable, "scripts/apply_filter.py", str(run_dir), "--data",
                          str(tmp_path / "wrong.csv"), "--out", str(tmp_path / "o.csv")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 1 and "x2" in bad.stderr and not (tmp_path / "o.csv").exists()


def test_the_command_line_fits_the_alpha_beta_tree(tmp_path):
    out = _filter("data=synthetic", "data.n=900", "filter.proxy=alpha_beta", "filter.alpha=0.3",
                  "+filter.tree_options.T=60", f"run_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    saved = json.loads((tmp_path / "filter.json").read_text())
    assert saved["params"]["proxy"] == "alpha_beta" and saved["params"]["alpha"] == 0.3
    loaded = BalancedFilter.load(tmp_path / "filter.json")
    assert loaded.tree_options == {"T": 60}
