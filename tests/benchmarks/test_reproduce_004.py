"""reproduce_004's pure parts: the cells' overrides are valid configs pinning
the protocol, the per-group violations against a direct count, and footnote 3's
aggregation (the group with the largest MEAN violation, sd with ddof=1, se = sd/√n)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.reproduce import reproduce_004

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rep():
    return reproduce_004


def test_every_cells_overrides_compose_to_a_valid_config(rep):
    from benchmarks.reproduce.solved_by_default import compose
    from fairgames.train.config import validate

    for data, method, noise, split in rep.plan(quick=True, only=None):
        cfg = compose(rep.overrides(data, method, noise, split, 150))
        validate(cfg)
        assert cfg.data.paper == "004" and cfg.seed == split and cfg.trainer.steps == 150
        assert cfg.robust.name == {"dro": "dro", "dro_authors": "dro",
                                   "sa": "soft_assignments"}.get(method, "none")
        if cfg.robust.name == "dro":
            assert cfg.robust.projection == ("authors" if method == "dro_authors" else "exact")
        assert cfg.data.noise == noise
        assert cfg.problem.name == ("error" if method == "unconstrained"
                                    else rep.DATASETS[data].problem)
        # §3.1: the group column the run sees is a feature (without it Credit's true-group
        # oracle paid 0.009 error over the paper's at 750 steps)
        assert cfg.data.include_protected is True
        assert cfg.model.sparse_inputs == "off"       # the committed cells' dense products
    assert len(rep.plan(quick=False, only=None)) == 2 * 10 * (2 + 5 * 4)
    assert len(rep.plan(True, ["adult"], splits=1, noises=rep.NOISE)) == 2 + 5 * 4


def test_quick_and_full_runs_play_the_papers_750_steps(rep, monkeypatch, tmp_path):
    class Stop(Exception):
        pass

    def first_cell(data, method, noise, split, steps, selects=("noisy",)):
        raise Stop(steps)

    monkeypatch.setattr(rep, "RESULTS", tmp_path)
    monkeypatch.setattr(rep, "run_cell", first_cell)
    for argv in (["--quick", "--launcher", "inline"], ["--launcher", "inline"]):
        with pytest.raises(Stop) as stop:
            rep.main(argv)
        assert stop.value.args == (750,)


def test_group_violations_are_the_signed_tpr_and_fpr_gaps(rep):
    rng = np.random.default_rng(0)
    pred, y, g = rng.integers(0, 2, 400), rng.integers(0, 2, 400), rng.integers(0, 3, 400)
    got = rep.group_violations(pred, y, g, ["a", "b", "c"], rep.DATASETS["credit"])
    tpr, fpr = pred[y == 1].mean(), pred[y == 0].mean()
    for j, name in enumerate("abc"):
        want = max(tpr - pred[(y == 1) & (g == j)].mean() - 0.03,
                   pred[(y == 0) & (g == j)].mean() - fpr - 0.03)
        assert got[name] == pytest.approx(want)


def test_footnote_3_takes_the_group_with_the_largest_mean(rep):
    # group b has the largest single value (0.5) but a has the larger mean (0.2 > 0.1)
    cells = [{"error": e, "true": t, "noisy": t}
             for e, t in ((0.1, {"a": 0.2, "b": -0.3}), (0.3, {"a": 0.2, "b": 0.5}))]
    out = rep.aggregate(cells)
    assert out["group"] == "a"
    assert out["true_violation"][:2] == pytest.approx((0.2, 0.0))
    mean, sd, se = out["error"]
    assert mean == pytest.approx(0.2) and sd == pytest.approx(math.sqrt(0.02))
    assert se == pytest.approx(sd / math.sqrt(2))


def test_goal_counts_read_error_and_the_one_se_rule(rep):
    def row(method, noise, err, viol, se=0.001):
        return {"data": "adult", "method": method, "noise": noise,
                "ours": {"error": (err, 0.0, 0.001), "true_violation": (viol, 0.0, se)}}

    rows = [row("dro", 0.1, 0.152, 0.0009),        # at the paper's error, within one SE: pass
            row("dro", 0.2, 0.199, 0.0011),        # violation above one SE: fail
            row("sa", 0.1, 0.1481, -0.01),         # error above the paper's 0.148: fail
            row("dro_authors", 0.1, 0.15, -0.01),  # pass
            row("naive", 0.1, 0.14, 0.1),          # no paper number: not counted
            row("true_group", None, 0.1500, -0.05), row("unconstrained", None, 0.1507, 0.0)]
    got = rep.goal_counts({"rows": rows})
    assert got == {"dro + sa": "1 of 3 run (paper: 20)",
                   "dro_authors + sa": "1 of 2 run (paper: 20)",
                   "baselines within 0.005": "1 of 2"}


def test_committed_ten_split_summary_follows_from_its_cells(rep, tmp_path):
    """benchmarks/results/reproduce_004.{json,md}: the full protocol's rows (footnote 3's
    aggregation over the ten splits) and its goal line are those the archived cells give."""
    import json

    from benchmarks.harness.cells import CellStore

    results = ROOT / "benchmarks" / "results"
    store = CellStore(results / "reproduce_004.cells")
    assert set(store.archived()) == store.keys()         # every committed cell is archived
    cells = [store.get(k) for k in sorted(store.keys())]
    planned = {(d, m, n, s) for d, m, n, s in rep.plan(quick=False, only=None)}
    assert {(c["data"], c["method"], c["noise"], c["split"]) for c in cells} == planned
    # every cell ran on the recipe's splits (Adult's first run had the official split)
    for c in cells:
        assert c["rows"] == ({"train": 29_306, "validation": 9_768, "test": 9_768}
                             if c["data"] == "adult" else
                             {"train": 18_000, "validation": 6_000, "test": 6_000})
    for data in rep.DATASETS:
        assert next(c["rows"] for c in cells if c["data"] == data) == rep.expected_rows(data, 9)
    saved = json.loads((results / "reproduce_004.json").read_text())
    assert len(saved["rows"]) == len({(d, m, n) for d, m, n, _ in planned})
    for row in saved["rows"]:
        key = (row["data"], row["method"], row["noise"])
        mine = [c for c in cells if (c["data"], c["method"], c["noise"]) == key]
        ours = rep.aggregate(mine)
        assert ours["n"] == row["ours"]["n"] == 10
        assert ours["error"] == pytest.approx(row["ours"]["error"], nan_ok=True)
        assert ours["true_violation"] == pytest.approx(row["ours"]["true_violation"], nan_ok=True)
    assert (results / "reproduce_004.md").read_text() == rep.markdown(saved)


def test_a_saved_cell_from_other_splits_is_refused_by_name(rep, monkeypatch, tmp_path):
    """Resuming never mixes protocols: a cell whose recorded split sizes are not those the
    overrides give (or that records none, as the cells made before data.split was pinned)
    stops the run, naming where it is."""
    from benchmarks.harness.cells import CellStore, write_pending

    monkeypatch.setattr(rep, "expected_rows", lambda data, split: {"train": 6, "validation": 2,
                                                                   "test": 2})
    write_pending(tmp_path, "good", {"rows": {"train": 6, "validation": 2, "test": 2},
                                     "error": 0.1})
    write_pending(tmp_path, "old", {"error": 0.1})
    store = CellStore(tmp_path)
    assert rep.stored_cell(store, "good", "adult", 0)["error"] == 0.1
    with pytest.raises(SystemExit, match="old.json.*unrecorded.*move the archive"):
        rep.stored_cell(store, "old", "adult", 0)
    archive = store.pack()
    with pytest.raises(SystemExit, match=rf"{archive.name}\[old\].*unrecorded"):
        rep.stored_cell(CellStore(tmp_path), "old", "adult", 0)


def test_paper_004_adult_cells_split_all_rows_at_random(rep):
    """The recipe's 0.6/0.2/0.2 of all 48 842 rows, a different test split per split seed
    (configs/data/adult.yaml's official split once overrode it)."""
    assert rep.expected_rows("adult", 0) == {"train": 29_306, "validation": 9_768, "test": 9_768}
    assert rep.expected_rows("credit", 0) == {"train": 18_000, "validation": 6_000, "test": 6_000}


def test_tune_runs_every_combination_and_keeps_the_tuned_run_rules_choice(rep):
    from fairgames.train.sweeps.tune import choose

    grid = rep.parse_tune("robust_lr=0.1,10;multiplier_lr=1,2")
    cell = rep.tuned_cell("credit", "sa", 0.1, 0, 10, grid)["noisy"]
    rows = cell["tune"]["candidates"]
    assert cell["tune"]["grid"] == {"algorithm.multiplier_lr": [0.5, 1.0],
                                    "robust.lr": [0.001, 0.1]}
    assert [(r["settings"]["algorithm.multiplier_lr"], r["settings"]["robust.lr"])
            for r in rows] == [(0.5, 0.001), (0.5, 0.1), (1.0, 0.001), (1.0, 0.1)]
    # the rule's own choice, recomputed from the rows (validation and train only)
    pick, _ = choose([{**r, "validation_violations": [r["validation_violation"]]} for r in rows])
    assert [r["chosen"] for r in rows] == [i == pick for i in range(4)]
    assert cell["tune"]["chosen"] == rows[pick]["settings"]
    assert cell["steps"] == 10 and 0.0 <= cell["error"] <= 1.0
    # robust_lr is not swept for a method without an adversary, nor λ's step unconstrained
    naive = rep.tuned_cell("credit", "naive", 0.1, 0, 5, grid)["noisy"]["tune"]["grid"]
    assert naive == {"algorithm.multiplier_lr": [0.5, 1.0]}


def test_cells_launched_on_joblib_equal_the_same_cells_in_process(rep, monkeypatch, tmp_path):
    import json

    from benchmarks.harness.cells import CellStore

    monkeypatch.setattr(rep, "RESULTS", tmp_path)
    base = ["--only", "credit", "--splits", "1", "--methods", "unconstrained,true_group",
            "--steps", "5"]
    rep.main([*base, "--tag", "L", "--launcher", "joblib", "--jobs", "2"])
    rep.main([*base, "--tag", "I", "--launcher", "inline"])
    for key in ("credit_unconstrained_0_0", "credit_true_group_0_0"):
        a, b = (CellStore(tmp_path / f"{t}.cells").get(key) for t in "LI")
        assert {k: v for k, v in a.items() if k != "seconds"} == {
            k: v for k, v in b.items() if k != "seconds"}
    assert len(list((tmp_path / "L.launch").glob("*/jobs/[0-9]*"))) == 2
    assert json.loads((tmp_path / "L.json").read_text()) == json.loads(
        (tmp_path / "I.json").read_text())                   # the summaries (no seconds)
    rep.main([*base, "--tag", "L", "--launcher", "joblib", "--jobs", "2"])    # resumed
    assert len(list((tmp_path / "L.launch").iterdir())) == 1                  # no new launch


def test_a_rerun_writes_a_cell_only_to_the_rule_stores_that_lack_it(rep, monkeypatch, tmp_path):
    """With several robust.select rules, a cell archived under one rule and missing under
    another is run again and saved under the second only (the first keeps its record; a
    second, different record of the same key would be refused by the store)."""
    from benchmarks.harness.cells import CellStore, write_pending

    rows = {"train": 6, "validation": 2, "test": 2}
    monkeypatch.setattr(rep, "RESULTS", tmp_path)
    monkeypatch.setattr(rep, "expected_rows", lambda data, split: rows)
    ran = []

    def fake_cell(data, method, noise, split, steps, selects):
        ran.append((data, method, selects))
        return {r: {"rows": rows, "error": 0.2, "true": {"a": 0.0}, "seconds": 2.0}
                for r in selects}

    monkeypatch.setattr(rep, "run_cell", fake_cell)
    summaries = {}
    monkeypatch.setattr(rep, "write_summary",
                        lambda cells, steps, tag: summaries.__setitem__(tag, cells))
    old = {"rows": rows, "error": 0.1, "true": {"a": 0.0}, "seconds": 1.0}
    write_pending(tmp_path / "T.select-noisy.cells", "credit_unconstrained_0_0", old)
    CellStore(tmp_path / "T.select-noisy.cells").pack()
    rep.main(["--only", "credit", "--splits", "1", "--methods", "unconstrained", "--steps", "5",
              "--tag", "T", "--select", "noisy,tv", "--launcher", "inline"])
    assert ran == [("credit", "unconstrained", ("noisy", "tv"))]
    assert CellStore(tmp_path / "T.select-noisy.cells").get("credit_unconstrained_0_0") == old
    assert CellStore(tmp_path / "T.select-tv.cells").get("credit_unconstrained_0_0")["error"] == 0.2
    assert [c["error"] for c in summaries["T.select-noisy"]] == [0.1]
    assert [c["error"] for c in summaries["T.select-tv"]] == [0.2]
