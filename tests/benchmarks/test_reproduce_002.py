"""benchmarks/reproduce/reproduce_002.py: one proxy fit serves every η (against a fresh
fit), the t-interval (against scipy), Algorithm 1 on pure cells (closed form), the goals on
hand-made curves, a --quick-style run on the synthetic data, and the committed reports
regenerate from their JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.report import summary_for
from benchmarks.reproduce import reproduce_002 as rep

ROOT = Path(__file__).resolve().parents[2]


def synthetic(data: str, seed: int):
    from fairgames.filtering.data import load_filter_data
    return load_filter_data("synthetic", protected="group", paper=None, seed=seed)


@pytest.fixture(scope="module")
def splits():
    return synthetic("synthetic", 0)


@pytest.mark.parametrize("model", ["regression", "tree"])
def test_one_fit_at_every_eta_equals_a_fresh_fit(splits, model):
    from fairgames.filtering import BalancedFilter
    from fairgames.filtering.checks import codes_of

    train, test = splits
    fitted = BalancedFilter(f"qp_{model}", random_state=3).fit(train.X, train.z)
    codes = codes_of(train.z, fitted.groups_, len(train.X))
    for proxy in (f"naive_{model}", f"qp_{model}"):
        for eta in (0.0, 0.3, 1.0):
            ours = rep.at_eta(fitted, proxy, eta, train.X, codes)
            fresh = BalancedFilter(proxy, eta=eta, random_state=3).fit(train.X, train.z)
            np.testing.assert_allclose(ours.sampling_.rho, fresh.sampling_.rho, atol=1e-12)
            a, b = ours.report(test.X, test.z), fresh.report(test.X, test.z)
            for key in rep.METRICS:
                assert a[key] == pytest.approx(b[key], abs=1e-12), (proxy, eta, key)
    assert fitted.eta == 0.0 and fitted.proxy == f"qp_{model}"     # the fit is left as it was


def test_t_interval_is_scipys():
    from scipy import stats

    x = [0.3, 0.5, 0.45, 0.9, 0.1]
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    got = rep.t_interval([*x, None])
    assert got["mean"] == pytest.approx(np.mean(x))
    assert got["ci95"] == pytest.approx((hi - lo) / 2)
    assert (got["n"], got["missing"]) == (5, 1)
    assert math.isnan(rep.t_interval([0.2])["ci95"])


def test_algorithm_1_on_pure_cells_balances_exactly_at_k_times_the_rarest_share():
    # cell j holds group j only: Lemma 2 gives the uniform distribution, with q uniform and
    # ρ_j = r_min / r_j, so the acceptance rate is K · r_min
    rng = np.random.default_rng(0)
    z = {"train": rng.choice(3, size=2000, p=[0.6, 0.3, 0.1]),
         "test": rng.choice(3, size=1000, p=[0.6, 0.3, 0.1])}
    m = rep.cell_metrics({s: c for s, c in z.items()}, z, 3, 3)
    shares = np.bincount(z["train"]) / 2000
    assert m["train"]["imbalance_expected"] == pytest.approx(0, abs=1e-7)
    assert m["train"]["acceptance_expected"] == pytest.approx(3 * shares.min(), rel=1e-6)
    np.testing.assert_allclose(m["rho"], shares.min() / shares, rtol=1e-6)
    assert m["train"]["disclosivity"] == pytest.approx(1 - shares.min())


def _row(data, proxy, split, eta, imbalance):
    cell = {"mean": imbalance, "ci95": 0.01, "n": 10, "missing": 0}
    return {"data": data, "proxy": proxy, "split": split, "eta": eta,
            "imbalance_expected": cell, "acceptance_expected": {**cell, "mean": 0.5},
            "disclosivity": {**cell, "mean": 1 - eta}}


def test_goals_read_the_lowest_point_of_the_adult_regression_curves():
    rows = [_row("adult", p, s, e, v) for p in rep.REGRESSIONS for s in rep.SPLITS
            for e, v in ((0.0, 0.72 if s == "train" else 0.60), (0.5, 0.74))]
    rows += [_row("bank", "qp_regression", "train", 0.0, 0.1),       # not a goal
             _row("adult", "qp_tree", "train", 0.0, 0.3)]
    g = rep.goals(rows)
    assert set(g) == {f"adult_{p}_{s}_imbalance_at_least" for p in rep.REGRESSIONS
                      for s in rep.SPLITS}
    tr, te = g["adult_qp_regression_train_imbalance_at_least"], \
        g["adult_qp_regression_test_imbalance_at_least"]
    assert (tr["value"], tr["target"], tr["met"], tr["eta"]) == (0.72, 0.7, True, 0.0)
    assert (te["value"], te["target"], te["met"]) == (0.60, 0.65, False)


def test_quick_run_on_the_synthetic_data_writes_a_report_that_regenerates(tmp_path):
    result = rep.run(["synthetic"], [0, 1], rep.QUICK_ETAS, tmp_path, ".quick",
                     loader=synthetic, argv=["--quick"])
    rows = result["rows"]
    assert len(rows) == len(rep.PROXIES) * len(rep.SPLITS) * len(rep.QUICK_ETAS)
    for r in rows:
        assert r["seeds"] == [0, 1]
        if r["eta"] == 1.0:         # no proxy: nothing disclosed, every row kept
            assert r["disclosivity"]["mean"] == pytest.approx(0, abs=1e-12)
            assert r["acceptance_expected"]["mean"] == pytest.approx(1)
            assert r["imbalance_expected"]["mean"] == pytest.approx(r["imbalance_base"])
    path = tmp_path / "reproduce_002.quick.json"
    assert (tmp_path / "reproduce_002.quick.synthetic.png").stat().st_size > 0
    assert summary_for(path) == path.with_suffix(".md").read_text()
    assert json.loads(path.read_text())["goals"] == {}      # the goals are Adult's


@pytest.mark.parametrize("name", ["reproduce_002.json", "reproduce_002.quick.json"])
def test_committed_report_regenerates_from_its_json(name):
    path = ROOT / "benchmarks" / "results" / name
    if not path.exists():
        pytest.skip(f"{name} not committed")
    assert summary_for(path) == path.with_suffix(".md").read_text()
