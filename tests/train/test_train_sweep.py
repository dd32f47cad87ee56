"""The command line: a multirun sweep over tolerances and seeds, the frontier script on it, and
config errors that exit with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairgames.train.sweeps.sweep import lower_envelope

ROOT = Path(__file__).resolve().parents[2]


def _script(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_multirun_sweep_and_frontier(tmp_path):
    sweep = tmp_path / "sweep"
    out = _script("scripts/train.py", "-m", "data=synthetic", "data.n=1500", "trainer=smoke",
                  "trainer.steps=30", "problem.tolerance=0.02,0.1", "seed=0,1",
                  f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-3000:]
    results = sorted(sweep.rglob("results.json"))
    assert len(results) == 4
    seen = set()
    for f in results:
        res = json.loads(f.read_text())
        seen.add((res["config"]["problem"]["tolerance"], res["config"]["seed"]))
        assert (f.parent / ".hydra" / "config.yaml").is_file()   # Hydra's record of the config
    assert seen == {(0.02, 0), (0.02, 1), (0.1, 0), (0.1, 1)}
    _check_summary(sweep, out.stdout)

    fr = _script("scripts/frontier.py", str(sweep))
    assert fr.returncode == 0, fr.stderr[-3000:]
    table = pd.read_csv(sweep / "frontier.csv")
    # two tolerances × four solutions (recommended, final, best_iterate, stochastic)
    assert len(table) == 2 * 4 and set(table["runs"]) == {2}
    assert (sweep / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert (sweep / "frontier.md").read_text().startswith("| problem | data | algorithm |")
    # The table's means are the plain means of the runs' test errors.
    for (tol, sol), row in table.set_index(["tolerance", "solution"]).iterrows():
        errors = [json.loads(f.read_text())["solutions"][sol]["test"]["error"] for f in results
                  if json.loads(f.read_text())["config"]["problem"]["tolerance"] == tol]
        assert row["error_mean"] == pytest.approx(sum(errors) / 2)
        maxima = []
        for f in results:
            res = json.loads(f.read_text())
            if res["config"]["problem"]["tolerance"] == tol:
                cons = res["solutions"][sol]["test"]["constraints"].values()
                maxima.append(max(c["value"] for c in cons) + tol)
        assert row["unfairness_mean"] == pytest.approx(sum(maxima) / 2)


def test_scripts_report_errors_clearly(tmp_path):
    bad = _script("scripts/train.py", "data=synthetic", "trainer.device=gpu",
                  f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode == 2
    assert "trainer.device='gpu': expected one of ['auto', 'cpu', 'cuda']" in bad.stderr
    empty = _script("scripts/frontier.py", str(tmp_path))
    assert empty.returncode == 2 and "no results.json under" in empty.stderr


# (overrides, exit status, what stderr says): Hydra's own config errors, ours, a data file's.
CLI_ERRORS = [
    (["problem=nosuch"], 2, "Could not find 'problem/nosuch'"),         # unknown group option
    (["trainer.steps=[1,"], 2, "no viable alternative at input '[1,'"),  # override syntax
    (["trainer.stepz=10"], 2, "Key 'stepz' not in 'TrainerConfig'"),     # unknown key
    (["data.protected=colour"], 2, "unknown protected attribute 'colour' for data set 'adult'"),
    (["data=synthetic", "data.n=300", "data.group_proportions=[1.0,0.0]"], 2,
     "the training split (180 rows) has no row in a subset the problem reads"),
    (["data.root=/no/such/dir"], 1, "root='/no/such/dir' is not a directory"),
    (["trainer.resume=/no/such/run"], 2, "trainer.resume: no checkpoint at /no/such/run"),
]


def test_every_config_error_exits_2_with_its_message_and_no_traceback(tmp_path):
    # One process per case, all at once (each spends its time importing torch and Hydra).
    procs = [subprocess.Popen([sys.executable, "scripts/train.py", *args,
                               f"hydra.run.dir={tmp_path / str(i)}"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for i, (args, _, _) in enumerate(CLI_ERRORS)]
    for proc, (args, status, fragment) in zip(procs, CLI_ERRORS, strict=True):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == status, (args, err[-2000:])
        assert err.startswith("error: ") and fragment in err, (args, err[-2000:])
        assert "Traceback" not in err and "HYDRA_FULL_ERROR" not in err, (args, err[-2000:])


def _on_envelope_brute_force(x, y, i):
    """Point i is on the lower-left convex envelope iff no other point is at least as good on
    both axes and better on one, and no mixture of two points on either side lies strictly
    below it (O(n³); the reference for lower_envelope)."""
    n = len(x)
    for j in range(n):
        if j != i and x[j] <= x[i] and y[j] <= y[i] and (x[j] < x[i] or y[j] < y[i]):
            return False
    for j in range(n):
        for k in range(n):
            if x[j] < x[i] < x[k]:
                t = (x[i] - x[j]) / (x[k] - x[j])
                if (1 - t) * y[j] + t * y[k] < y[i] - 1e-12:
                    return False
    return True


@pytest.mark.parametrize("seed", range(8))
def test_lower_envelope_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 12, size=15) / 10.0      # ties in x are common
    y = rng.uniform(size=15).round(2)
    got = lower_envelope(x, y)
    want = [i for i in range(15) if _on_envelope_brute_force(x, y, i)]
    # among exact duplicates the envelope keeps one
    assert sorted({(x[i], y[i]) for i in got}) == sorted({(x[i], y[i]) for i in want})
    assert [x[i] for i in got] == sorted(x[i] for i in got)


def _check_summary(sweep: Path, printed: str) -> None:
    """The multirun's summary (printed and summary.csv): one row per job, its own settings only
    (those every job shares left out), the recommended solution's numbers as results.json has
    them, and whether it meets its constraints on train."""
    table = pd.read_csv(sweep / "summary.csv")
    assert printed.count("| job | settings |") == 1 and f"sweep {sweep}: 4 jobs" in printed
    assert (sweep / "summary.md").read_text().strip() == printed[printed.index(
        f"sweep {sweep}"):].strip()
    assert list(table["job"]) == [0, 1, 2, 3]
    for row in table.itertuples():
        res = json.loads((sweep / str(row.job) / "results.json").read_text())
        cfg = res["config"]
        assert row.settings == (f"problem.tolerance={cfg['problem']['tolerance']} "
                                f"seed={cfg['seed']}")
        rec = res["solutions"]["recommended"]
        for split in ("train", "validation", "test"):
            worst = max(c["violation"] for c in rec[split]["constraints"].values())
            assert getattr(row, f"violation_{split}") == pytest.approx(worst)
            assert getattr(row, f"objective_{split}") == pytest.approx(rec[split]["objective"])
        met = all(c["status"] in ("met", "not_significant", "missed_on_test")   # met on train
                  for c in res["verdict"]["constraints"].values())
        assert (row.met_on_train == "yes") == met


def test_a_job_that_left_no_results_is_listed_as_such(tmp_path):
    from fairgames.train.sweeps.score import UNSCORED
    from fairgames.train.sweeps.summary import summarize, summary_table

    for job, tol in ((0, 0.1), (1, 0.2)):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(
            f"- data=synthetic\n- problem.tolerance={tol}\n")
    table = summary_table(tmp_path)
    assert list(table["settings"]) == ["problem.tolerance=0.1", "problem.tolerance=0.2"]
    assert list(table["solution"]) == ["no results"] * 2
    assert list(table["score"]) == [UNSCORED] * 2
    assert "2 jobs, 0 meet their constraints on train" in summarize(tmp_path)


# two joblib processes: about 65 s here; the rule's fast check is the doctest of
# fairgames.train.sweeps.tune.bars_garble
@pytest.mark.slow
def test_jobs_side_by_side_print_lines_not_interleaved_bars(tmp_path):
    """joblib's jobs share the terminal: no progress bar (tqdm's ``train:``), a start line per
    job and each job's summary; the user's own trainer.progress=true still wins."""
    sweep = tmp_path / "sweep"
    out = _script("scripts/train.py", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                  "data=synthetic", "data.n=600", "trainer.steps=20", "trainer.log_every=10",
                  "trainer.plots=false", "trainer.bootstrap=0", "trainer.tensorboard=false",
                  "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "train:" not in out.stderr
    assert "job 0 started: " in out.stdout and "job 1 started: " in out.stdout
    assert out.stdout.count(": recommended (") == 2
    results = [json.loads(f.read_text()) for f in sweep.rglob("results.json")]
    assert [r["config"]["trainer"]["progress"] for r in results] == [False, False]


def test_the_frontier_plot_names_its_split_shows_the_recommended_and_labels_apart(tmp_path,
                                                                                 monkeypatch):
    """Four tolerances whose points nearly coincide: no two tolerance labels overlap once
    drawn; the title names the split; one line (the recommended solution), not four."""
    import matplotlib.pyplot as plt

    from fairgames.train.sweeps import sweep as sweep_module

    rows = [{"problem": "p", "data": "d", "algorithm": "a", "tolerance": t,
             "tolerance_kind": "difference", "seed": seed, "solution": sol, "split": "test",
             "objective": 0.25 + 0.001 * i + 0.02 * (2 * seed - 1),
             "error": 0.25 + 0.001 * i + 0.02 * (2 * seed - 1), "max_violation": 0.0,
             "max_value": 0.27 - t + 0.002 * i + 0.1 * (2 * seed - 1), "run_dir": f"r{i}"}
            for i, t in enumerate((0.01, 0.02, 0.05, 0.1)) for seed in (0, 1)
            for sol in ("recommended", "final", "best_iterate", "stochastic")]
    table = sweep_module.frontier(pd.DataFrame(rows), "test", envelope_split=None)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)           # keep the figure to inspect
    sweep_module.plot_frontier({"test": table}, tmp_path / "f.png")
    (fig,) = figures
    ax = fig.axes[0]
    assert "on test" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["recommended"]
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.texts]
    assert sorted(t.get_text() for t in ax.texts) == ["0.01", "0.02", "0.05", "0.1"]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close("all")
