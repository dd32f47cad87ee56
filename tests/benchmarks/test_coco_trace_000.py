"""``benchmarks.reproduce.coco_trace_000`` refits the committed Table 3 COCO: the same η, bound and
classifier, so its path explains that column and not some other COCO."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.reproduce import coco_trace_000

ROOT = Path(__file__).resolve().parents[2]
CELLS = ROOT / "benchmarks" / "results" / "reproduce_000.cells"


@pytest.fixture(scope="module")
def trace():
    return coco_trace_000


def test_the_trace_refits_the_committed_coco_column(trace, tmp_path):
    from fairgames.data import load

    cell = trace.committed_cell(CELLS, "baselines_compas_s0")
    lr = cell["COCO"]["multiplier_lr"]
    out = trace.main(["--datasets", "compas", "--splits", "1", "--lrs", str(lr),
                      "--rounds", "1", "200", "--plugin-l2s", "0.0001", "--jobs", "1",
                      "--launcher", "joblib", "--work-dir", str(tmp_path / "work"),
                      "--out", str(tmp_path / "out")])
    (result,) = out["results"]
    by_rounds = {p["rounds"]: p for p in result["grid"]}
    # 200 rounds at the chosen rate is the committed cell's COCO, to the last digits
    committed = cell["COCO"]["test"]["groups"]
    kld = sum(v["kld"] for k, v in committed.items() if k != "overall")
    assert by_rounds[200]["test_kld"] == pytest.approx(kld, rel=1e-9, abs=1e-12)
    assert by_rounds[200]["train_gap"] == pytest.approx(
        cell["COCO"]["train"]["groups"]["overall"]["error"] - cell["bound"], abs=1e-12)
    # the plug-in row against numpy: training error of η > 1/2 minus the cell's bound
    from fairgames.baselines import LogisticRegression

    splits = load("compas", protected="sex", paper="000", seed=0)
    eta = LogisticRegression().fit(splits.train.features, splits.train.labels).predict_proba(
        splits.train.features).numpy()
    y = splits.train.labels.numpy()
    assert result["plugin"]["train_gap"] == pytest.approx(
        np.mean((eta > 0.5) != (y > 0.5)) - cell["bound"], abs=1e-12)
    # the plug-in of a logistic η with the cells' own L2 penalty is COCO's first iterate
    (same,) = result["plugin_l2"]
    assert same["l2"] == 1e-4 and same["test_kld"] == pytest.approx(
        result["plugin"]["test_kld"], rel=1e-9)
    # one round moves off the plug-in classifier (COCO's first Frank-Wolfe steps minimise KLD)
    assert by_rounds[1]["train_kld"] < result["plugin"]["train_kld"]
    # the job ran on Hydra's joblib launcher: its own sweep directory holds its return value
    assert len(list((tmp_path / "work" / "launch").glob("*/jobs/0/return.json"))) == 1
    tmp_path = tmp_path / "out"
    md = (tmp_path / "coco_trace_000.md").read_text()
    assert "## compas (1 split(s))" in md and f"| {lr:g} | " in md
    assert "| λ rate | 1 rounds | 200 rounds |" in md
    # Table 3's rule over the rates run gives the committed column back at 200 rounds
    (row,) = [line for line in md.splitlines() if line.startswith("| chosen on validation")]
    assert row.split(" | ")[-1].startswith(f"{kld:.3f} (")
    # the markdown is a function of the saved JSON
    (tmp_path / "coco_trace_000.md").unlink()
    trace.main(["--tables-only", "--out", str(tmp_path)])
    assert (tmp_path / "coco_trace_000.md").read_text() == md


def test_a_missing_cell_is_named(trace, tmp_path):
    with pytest.raises(SystemExit) as e:
        trace.main(["--datasets", "compas", "--splits", "1", "--cells", str(tmp_path),
                    "--out", str(tmp_path)])
    assert "baselines_compas_s0" in str(e.value) and str(tmp_path) in str(e.value)


def test_quick_never_overwrites_the_committed_trace(trace, tmp_path):
    out = trace.main(["--quick", "--launcher", "inline", "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco_trace_000.quick.json",
                                                         "coco_trace_000.quick.md"]
    assert out["config"]["datasets"] == ["compas"] and out["config"]["rounds"] == [5, 20]
    assert out["config"]["cells"] == "benchmarks/results/reproduce_000.cells"
