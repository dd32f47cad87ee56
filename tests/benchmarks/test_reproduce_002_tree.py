"""benchmarks/reproduce/reproduce_002_tree.py on synthetic data: a run stores one cell per
(data, proxy, seed, α), a second run computes none (resumable), a cell a killed run left
pending is used, the table's means are the cells' (numpy), the goals name their α."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.harness.cells import CellStore, write_pending
from benchmarks.reproduce import reproduce_002_tree as rep


def synthetic(data: str, seed: int):
    from fairgames.filtering.data import load_filter_data
    return load_filter_data("synthetic", protected="group", paper=None, seed=seed)


@pytest.fixture
def patched(monkeypatch):
    monkeypatch.setattr(rep, "load", synthetic)


def test_a_run_stores_cells_and_resumes(patched, tmp_path, monkeypatch):
    alphas, seeds = (0.0, 0.5), [0, 1]
    directory = tmp_path / "reproduce_002_tree.cells"
    # a killed run's finished cell: used as it is, not recomputed
    write_pending(directory, rep.cell_key("adult", "relaxed", 1, 0.5, 20),
                  {**rep.tree_cell("adult", "relaxed", 1, 0.5, 20), "marker": True})
    result = rep.run(["adult"], ["relaxed", "alpha_beta", "qp_tree"], seeds, alphas, 20,
                     tmp_path)
    store = CellStore(directory)
    keys = {rep.cell_key("adult", p, s, a, 20) for p in rep.TREES for s in seeds
            for a in alphas} | {f"adult_baselines_s{s}" for s in seeds}
    assert keys <= store.keys()
    assert store.get(rep.cell_key("adult", "relaxed", 1, 0.5, 20))["marker"]
    row = next(r for r in result["rows"] if (r["proxy"], r["split"], r["param"]) ==
               ("alpha_beta", "test", 0.5))
    cells = [store.get(rep.cell_key("adult", "alpha_beta", s, 0.5, 20)) for s in seeds]
    assert row["imbalance_expected"]["mean"] == pytest.approx(
        np.mean([c["test"]["imbalance_expected"] for c in cells]))
    g = result["goals"]["adult_alpha_beta_train_imbalance"]
    assert g["alpha"] in alphas and g["value"] == pytest.approx(min(
        r["imbalance_expected"]["mean"] for r in result["rows"]
        if (r["proxy"], r["split"]) == ("alpha_beta", "train")))
    assert (tmp_path / "reproduce_002_tree.md").exists()

    def refuse(*args, **kwargs):
        raise AssertionError("a stored cell was computed again")

    monkeypatch.setattr(rep, "tree_cell", refuse)
    monkeypatch.setattr(rep, "baseline_cell", refuse)
    again = rep.run(["adult"], ["relaxed", "alpha_beta", "qp_tree"], seeds, alphas, 20,
                    tmp_path)
    assert again["goals"] == result["goals"]


@pytest.mark.parametrize("stem", ["reproduce_002_tree", "filter_decisions_002"])
def test_the_committed_reports_regenerate_from_their_json(stem):
    from pathlib import Path

    from benchmarks.harness.report import summary_for

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / f"{stem}.json"
    assert summary_for(path) == path.with_suffix(".md").read_text()
