"""The frontier of a regression sweep (paper 003): ``collect`` keeps the KS / grid
disparities and MSE / MAE, the unfairness axis is chosen from them, the convex envelope is
selected on train and read on test, and ``scripts/frontier.py`` draws train and test panels.
On small hand-written ``results.json`` trees (no training)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pandas as pd
import pytest
from script_loader import load_script

from fairgames.train.sweeps.sweep import collect, default_unfairness, frontier

ROOT = Path(__file__).resolve().parents[2]

# (tolerance, train (ks, mse), test (ks, mse)) of one algorithm's runs. On train the envelope
# is {0.01, 0.05, 0.2}: (0.11, 0.24) lies above the chord (0.06, 0.25)–(0.2, 0.10), whose
# value at 0.11 is 0.25 − 0.15·5/14 ≈ 0.196. On test that point would be on it instead.
RUNS = [(0.01, (0.02, 0.30), (0.03, 0.31)), (0.05, (0.06, 0.25), (0.07, 0.30)),
        (0.10, (0.11, 0.24), (0.08, 0.12)), (0.20, (0.20, 0.10), (0.21, 0.11))]


def _metrics(ks: float, mse: float, tol: float, seed: int) -> dict:
    value = ks + 0.001 * seed - 0.5       # a grid disparity distinct from the KS one
    return {"objective": mse / 2, "mse": mse, "mae": mse ** 0.5, "ks_disparity": ks,
            "grid_disparity": ks - 0.01,
            "constraints": {"sp_high": {"value": value - tol, "violation": 0.0},
                            "sp_low": {"value": value - 2 * tol, "violation": 0.0}}}


def _write(root: Path, algorithm: str, tol: float, seed: int, train: tuple, test: tuple,
           shift: float = 0.0) -> None:
    run = root / f"{algorithm}_{tol}_{seed}"
    run.mkdir(parents=True)
    res = {"config": {"problem": {"name": "sp_regression", "tolerance": tol,
                                  "tolerance_kind": "difference"},
                      "data": {"name": "law"}, "algorithm": {"name": algorithm},
                      "seed": seed},
           "training": {"likely_infeasible": False},
           "solutions": {"recommended": {
               "train": _metrics(train[0], train[1] + shift, tol, seed),
               "test": _metrics(test[0], test[1] + shift, tol, seed)}}}
    (run / "results.json").write_text(json.dumps(res))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    for seed in (0, 1):
        for tol, train, test in RUNS:
            _write(tmp_path, "lagrangian", tol, seed, train, test, shift=0.01 * seed)
        # a second algorithm, all of whose points are on its own envelope
        for tol, (ks, mse) in ((0.05, (0.3, 0.2)), (0.1, (0.4, 0.15))):
            _write(tmp_path, "other", tol, seed, (ks, mse), (ks, mse))
    return tmp_path


def test_collect_keeps_the_regression_metrics(sweep):
    rows = collect(sweep)
    assert len(rows) == 2 * (4 + 2) * 2
    for _, r in rows.iterrows():
        res = json.loads((Path(r["run_dir"]) / "results.json").read_text())
        m = res["solutions"][r["solution"]][r["split"]]
        for key in ("ks_disparity", "grid_disparity", "mse", "mae"):
            assert r[key] == m[key]
    assert default_unfairness(rows) == "ks"
    assert default_unfairness(rows.drop(columns=["ks_disparity"])) == "constraints"


def test_unfairness_choices_and_the_envelope_chosen_on_train(sweep):
    rows = collect(sweep)
    table = frontier(rows, "test", metric="mse").set_index(["algorithm", "tolerance"])
    runs = {tol: (train, test) for tol, train, test in RUNS}
    for tol, (_, test) in runs.items():
        row = table.loc[("lagrangian", tol)]
        assert row["unfairness_mean"] == pytest.approx(test[0])          # default: ks
        assert row["mse_mean"] == pytest.approx(test[1] + 0.005)         # seeds 0 and 1
        assert row["ks_disparity_mean"] == pytest.approx(test[0])
    flagged = {tol for (alg, tol), on in table["on_envelope"].items() if alg == "lagrangian"
               and on}
    assert flagged == {0.01, 0.05, 0.2}                    # train's envelope, not test's
    assert table.loc[("other", 0.05), "on_envelope"] and table.loc[("other", 0.1), "on_envelope"]
    # read on train itself, the same three
    train = frontier(rows, "train", metric="mse")
    assert set(train.loc[train["on_envelope"] & (train["algorithm"] == "lagrangian"),
                         "tolerance"]) == {0.01, 0.05, 0.2}
    grid = frontier(rows, "test", "grid", metric="mse").set_index(["algorithm", "tolerance"])
    assert grid.loc[("lagrangian", 0.1), "unfairness_mean"] == pytest.approx(0.08 - 0.01)
    cons = frontier(rows, "test", "constraints", metric="mse")
    cons = cons.set_index(["algorithm", "tolerance"])
    # largest constraint value + tolerance: (ks + 0.001·seed − 0.5 − tol) + tol, seed mean 0.5
    assert cons.loc[("lagrangian", 0.1), "unfairness_mean"] == pytest.approx(0.08 + 0.0005 - 0.5)


def test_unfairness_the_runs_do_not_report_is_a_clear_error(sweep):
    rows = collect(sweep).drop(columns=["ks_disparity"])
    with pytest.raises(ValueError, match="the runs report no ks_disparity"):
        frontier(rows, "test", "ks")
    with pytest.raises(ValueError, match="unfairness must be one of"):
        frontier(rows, "test", "gap")


def _frontier_script():
    return load_script(ROOT / "scripts" / "frontier.py", "frontier_script")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:4] == b"\x89PNG"
    return struct.unpack(">II", head[16:24])


def test_frontier_script_draws_train_and_test_panels(sweep, tmp_path, capsys):
    script = _frontier_script()
    one, two = tmp_path / "one", tmp_path / "two"
    assert script.main([str(sweep), "--out", str(one), "--metric", "mse"]) == 0
    assert script.main([str(sweep), "--out", str(two), "--metric", "mse",
                        "--panels", "train,test"]) == 0
    w1, h1 = _png_size(one / "frontier.png")
    w2, h2 = _png_size(two / "frontier.png")
    assert h1 == h2 and w2 == 2 * w1                       # two panels side by side
    table = pd.read_csv(two / "frontier.csv")
    assert {"on_envelope", "ks_disparity_mean", "mse_mean", "mae_mean"} <= set(table.columns)
    assert table["on_envelope"].sum() == 3 + 2
    # --metric loss is the objective; the envelope of the objective here is the mse's
    assert script.main([str(sweep), "--out", str(tmp_path / "loss"), "--metric", "loss"]) == 0
    loss = pd.read_csv(tmp_path / "loss" / "frontier.csv")
    assert list(loss["on_envelope"]) == list(table["on_envelope"])
    capsys.readouterr()
    assert script.main([str(sweep), "--out", str(tmp_path / "bad"), "--unfairness", "ks",
                        "--metric", "error"]) == 2
    assert "metric 'error'" in capsys.readouterr().err
