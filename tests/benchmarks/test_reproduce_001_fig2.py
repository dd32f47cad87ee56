"""benchmarks/reproduce/reproduce_001_fig2.py: "ours" is reported as not run until its module
exists (never imitated), is called and evaluated when it does, the ratio and errors of a
model against numpy, and the committed report regenerates from its JSON."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.report import summary_for
from benchmarks.reproduce import reproduce_001_fig2 as rep

ROOT = Path(__file__).resolve().parents[2]


def _data(seed=0, n=200):
    rng = np.random.default_rng(seed)
    d = {}
    for s in ("", "t"):          # train, test
        d["x" + s] = rng.normal(size=(n, 3))
        d["y" + s] = (d["x" + s][:, 0] > 0).astype(np.int64)
        d["m" + s] = rng.random(n) < 0.5
    return d


def test_ours_is_not_run_when_its_module_is_missing(monkeypatch):
    monkeypatch.setattr(rep, "OURS", "fairgames.dataset_constraints.no_such_mm:figure2_point")
    out = rep.run_ours(_data(), 3)
    assert out["status"] == "not run" and "not in this tree" in out["reason"]
    assert "points" not in out


def test_ours_is_called_and_evaluated_when_present(monkeypatch):
    fake = types.ModuleType("fake_mm_for_fig2")
    calls = []
    fake.figure2_point = lambda x, y, male, u: calls.append(u) or np.array([1.0, 0.0, 0.0])
    monkeypatch.setitem(sys.modules, "fake_mm_for_fig2", fake)
    monkeypatch.setattr(rep, "OURS", "fake_mm_for_fig2:figure2_point")
    d = _data()
    out = rep.run_ours(d, 3)
    assert out["status"] == "run" and calls == [1.0, 3.75, 6.5]
    pred = (d["xt"][:, 0] > 0).astype(int)
    want = pred[d["mt"]].mean() / pred[~d["mt"]].mean()
    assert out["points"][0]["test_ratio"] == pytest.approx(want)
    assert out["points"][0]["test_error"] == pytest.approx(np.mean(pred != d["yt"]))
    # the randomised (ramp) classifier, exactly in expectation: P(ŷ = 1) = clip(1/2 + z, 0, 1)
    p = np.clip(0.5 + d["xt"][:, 0], 0, 1)
    assert out["points"][0]["randomised_test_error"] == pytest.approx(
        np.mean(np.where(d["yt"] == 1, 1 - p, p)))
    assert out["points"][0]["randomised_test_ratio"] == pytest.approx(
        p[d["mt"]].mean() / p[~d["mt"]].mean())


@pytest.mark.parametrize("stem", ["reproduce_001_fig2"])
def test_committed_report_regenerates(stem):
    path = ROOT / "benchmarks" / "results" / f"{stem}.json"
    assert path.exists(), f"{path.name} is not committed"
    assert summary_for(path) == path.with_suffix(".md").read_text()
