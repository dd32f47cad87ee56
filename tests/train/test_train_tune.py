"""``trainer.tune=validation``: a grid of step sizes as a Hydra multirun on the joblib launcher,
the job the best-candidate rule picks on validation, and the refusals that keep selection
honest."""

from __future__ import annotations

import inspect
import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fairgames.data import make_synthetic
from fairgames.game import best_iterate
from fairgames.game.players import SwapRegret
from fairgames.train import ConfigError, fit, run, validate
from fairgames.train.sweeps.tune import (
    LAUNCHER_TARGET,
    choose,
    collect,
    grid,
    step_sizes,
    sweep_overrides,
    tune,
)

ROOT = Path(__file__).resolve().parents[2]
# θ's step × λ's step, 2 × 2, around optimizer.lr=0.01 and algorithm.multiplier_lr=1.0.
TUNED = ["data=synthetic", "data.n=1500", "trainer=smoke", "trainer.steps=30",
         "trainer.tensorboard=false",
         "algorithm=proxy_lagrangian", "optimizer.lr=0.01", "algorithm.multiplier_lr=1.0",
         "trainer.tune_grid={lr:[1,5],multiplier_lr:[1,10]}"]


def _train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/train.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    run_dir = tmp_path_factory.mktemp("tuned") / "run"
    out = _train(*TUNED, "trainer.tune=validation", f"hydra.run.dir={run_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir, out


def _job_results(run_dir: Path, job: int) -> dict:
    return json.loads((run_dir / "sweep" / str(job) / "results.json").read_text())


def test_the_sweep_is_the_grid_on_the_joblib_launcher(tuned):
    run_dir, _ = tuned
    sweep = run_dir / "sweep"
    multirun = yaml.safe_load((sweep / "multirun.yaml").read_text())
    assert multirun["hydra"]["launcher"]["_target_"] == LAUNCHER_TARGET
    table = json.loads((run_dir / "tune.json").read_text())
    settings = set()
    for row in table["candidates"]:
        job = sweep / row["run_dir"]
        hydra_cfg = yaml.safe_load((job / ".hydra" / "hydra.yaml").read_text())["hydra"]
        assert hydra_cfg["launcher"]["_target_"] == LAUNCHER_TARGET
        assert hydra_cfg["mode"] == "MULTIRUN"
        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        assert cfg["trainer"]["tune"] is None          # each job is one plain run
        got = (cfg["optimizer"]["lr"], cfg["algorithm"]["multiplier_lr"])
        assert got == (row["settings"]["optimizer.lr"],
                       row["settings"]["algorithm.multiplier_lr"])
        settings.add(got)
        assert _job_results(run_dir, row["job"])["env"]["threads"] == 1   # one thread a job
    assert settings == set(itertools.product([0.01, 0.05], [1.0, 10.0]))


def test_the_chosen_job_is_the_best_candidate_on_validation(tuned):
    run_dir, out = tuned
    table = json.loads((run_dir / "tune.json").read_text())
    rows = table["candidates"]
    objectives, violations = [], []
    for row in rows:   # the table's numbers are the jobs' own, on their deployable solution
        solution = _job_results(run_dir, row["job"])["solutions"][row["solution"]]
        val = [c["violation"] for c in solution["validation"]["constraints"].values()]
        objectives.append(solution["validation"]["objective"])
        violations.append(val)
        assert row["validation_objective"] == pytest.approx(objectives[-1], abs=0)
        assert row["validation_violation"] == pytest.approx(max(val), abs=0)
        assert row["train_violation"] == pytest.approx(
            max(c["violation"] for c in solution["train"]["constraints"].values()), abs=0)
    assert len({tuple(v) for v in violations}) > 1, "the grid's jobs should differ"
    # among the jobs that meet the constraints on train (all when none does), best_iterate on
    # validation
    pool = [i for i, r in enumerate(rows) if r["train_violation"] <= 1e-6] or list(
        range(len(rows)))
    expected = pool[best_iterate([objectives[i] for i in pool], [violations[i] for i in pool])]
    feasible = [i for i in pool if max(violations[i]) <= 0]
    if feasible:     # feasible first: the lowest objective among the feasible
        assert expected == min(feasible, key=lambda i: objectives[i])
    assert [r["chosen"] for r in rows] == [i == expected for i in range(len(rows))]
    assert table["chosen"] == rows[expected]["job"]
    assert table["chosen_run_dir"] == f"sweep/{rows[expected]['run_dir']}"
    assert f"chose job {rows[expected]['job']}" in out.stdout
    # The chosen job's outputs are the tuned run's, byte for byte.
    job = run_dir / "sweep" / rows[expected]["run_dir"]
    for name in ("results.json", "report.md", "stochastic.pt"):
        assert (run_dir / name).read_bytes() == (job / name).read_bytes()
    assert not (run_dir / "checkpoint.pt").exists()
    assert not (run_dir / "checkpoint.prev.pt").exists()


def test_selection_never_reads_test(tuned, tmp_path):
    run_dir, _ = tuned
    sweep = tmp_path / "sweep"
    shutil.copytree(run_dir / "sweep", sweep)
    for f in sweep.glob("*/results.json"):      # drop every test metric
        res = json.loads(f.read_text())
        for per_split in res["solutions"].values():
            del per_split["test"]
        f.write_text(json.dumps(res))
    keys = ["optimizer.lr", "algorithm.multiplier_lr"]
    table = json.loads((run_dir / "tune.json").read_text())
    rows = collect(sweep, keys)
    assert choose(rows)[0] == [r["chosen"] for r in table["candidates"]].index(True)
    assert set(table["candidates"][0]) == {"job", "run_dir", "settings", "solution",
                                           "validation_objective", "validation_violation",
                                           "train_violation", "chosen"}


def test_a_tuned_run_refuses_a_validation_constraint_split(tmp_path):
    out = _train(*TUNED, "trainer.tune=validation", "trainer.constraint_split=validation",
                 f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 2
    assert ("trainer.constraint_split='validation': trainer.tune=validation compares runs on "
            "the validation split") in out.stderr
    assert not (tmp_path / "run" / "sweep").exists()    # nothing was launched


def test_a_tuned_run_never_mixes_two_sweeps(compose_cfg, tmp_path):
    (tmp_path / "sweep" / "0").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="already holds a sweep"):
        tune(compose_cfg("trainer.tune=validation"), tmp_path, [], script=ROOT / "missing.py")


def test_tune_keys_are_checked(compose_cfg):
    with pytest.raises(ConfigError, match=r"multiplier_rl=\[2.0\]: unknown step size; did you "
                                          r"mean multiplier_lr\?"):
        validate(compose_cfg("trainer.tune=validation", "+trainer.tune_grid.multiplier_rl=[2]"))
    with pytest.raises(ConfigError, match=r"tune_grid.lr=\[0.0, 1.0\]: a non-empty list of "
                                          "positive multiples"):
        validate(compose_cfg("trainer.tune=validation", "trainer.tune_grid.lr=[0,1]"))
    with pytest.raises(ConfigError, match="trainer.tune='grid': expected one of"):
        validate(compose_cfg("trainer.tune=grid"))
    with pytest.raises(ConfigError, match="selection_split='test': trainer.tune=validation "
                                          "never selects on test"):
        validate(compose_cfg("trainer.tune=validation", "trainer.selection_split=test"))
    with pytest.raises(ConfigError, match="follow-the-leader λ-player of algorithm=frank_wolfe "
                                          "has no step size"):
        validate(compose_cfg("trainer.tune=validation", "algorithm=frank_wolfe"))
    validate(compose_cfg("trainer.tune=validation", "algorithm=frank_wolfe",
                         "trainer.tune_grid.multiplier_lr=[1]"))
    # Holdout keeps validation untouched: allowed.
    validate(compose_cfg("trainer.tune=validation", "trainer.constraint_split=holdout"))


def test_one_job_entry_points_refuse_tune(compose_cfg):
    with pytest.raises(ConfigError, match="sweeps runs from the command line"):
        run(compose_cfg("data=synthetic", "trainer=smoke", "trainer.tune=validation"))
    with pytest.raises(ConfigError, match="sweeps runs from the command line"):
        fit(torch.nn.Linear(3, 1), "error", make_synthetic(n=300, d=3, seed=0),
            protected="group", trainer={"steps": 2, "tune": "validation"})


def test_the_grid_multiplies_the_runs_own_step_sizes(compose_cfg):
    cfg = compose_cfg("trainer.tune=validation", "optimizer.lr=0.02")
    # proxy_lagrangian.yaml leaves λ's step null: the swap-regret player's own (its signature)
    lam = inspect.signature(SwapRegret).parameters["lr"].default
    assert cfg.algorithm.multiplier_lr is None
    assert step_sizes(cfg) == {"lr": 0.02, "multiplier_lr": lam, "robust_lr": cfg.robust.lr}
    assert grid(cfg) == {"optimizer.lr": [0.006, 0.02, 0.06],
                         "algorithm.multiplier_lr": [float(f"{lam * f:.6g}")
                                                     for f in (0.3, 1.0, 3.0)]}
    # A null λ step is the preset's own (algorithm3: 0.3).
    cfg = compose_cfg("algorithm=algorithm3", "algorithm.multiplier_lr=null",
                      "trainer.tune=validation")
    assert step_sizes(cfg)["multiplier_lr"] == 0.3
    cfg = compose_cfg("trainer.tune=validation", "trainer.tune_grid.multiplier_lr=[1]")
    assert list(grid(cfg)) == ["optimizer.lr"]        # a multiple of 1 alone is not swept


def test_the_grid_sweeps_the_robust_adversarys_step(compose_cfg):
    # paper 004's Table 1 grid: η_p̃ (DRO) / η_w (soft assignments) beside η_θ and η_λ
    cfg = compose_cfg("trainer.tune=validation", "data.noise=0.2", "robust=soft_assignments",
                      "problem=equal_opportunity", "robust.lr=0.02",
                      "trainer.tune_grid={lr:[1],multiplier_lr:[1],robust_lr:[0.1,1,10]}")
    validate(cfg)
    assert grid(cfg) == {"robust.lr": [0.002, 0.02, 0.2]}
    assert list(grid(compose_cfg("trainer.tune=validation"))) == [
        "optimizer.lr", "algorithm.multiplier_lr"]      # robust_lr [1] by default: not swept
    with pytest.raises(ConfigError, match=r"tune_grid.robust_lr=\[0.1, 1.0\]: robust=none has "
                                          "no adversary step to sweep"):
        validate(compose_cfg("trainer.tune=validation", "trainer.tune_grid.robust_lr=[0.1,1]"))


def test_a_tuned_robust_run_sweeps_the_adversarys_step(tmp_path):
    run_dir = tmp_path / "run"
    out = _train("data=synthetic", "data.n=1500", "trainer=smoke", "trainer.steps=20",
                 "trainer.tensorboard=false", "data.noise=0.2", "problem=equal_opportunity",
                 "robust=soft_assignments", "robust.lr=0.01", "trainer.tune=validation",
                 "trainer.tune_grid={lr:[1],multiplier_lr:[1],robust_lr:[0.1,10]}",
                 f"hydra.run.dir={run_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((run_dir / "tune.json").read_text())
    assert record["grid"] == {"robust.lr": [0.001, 0.1]}
    assert [r["settings"]["robust.lr"] for r in record["candidates"]] == [0.001, 0.1]
    for job, lr in ((0, 0.001), (1, 0.1)):
        assert _job_results(run_dir, job)["config"]["robust"]["lr"] == lr


def test_sweep_overrides_replace_the_grid_and_the_job_settings():
    out = sweep_overrides(["data=adult", "optimizer.lr=0.1", "trainer.tune=validation",
                           "+run_dir=x", "trainer.progress=true"],
                          {"optimizer.lr": [0.05, 0.1]}, Path("/tmp/a b/sweep"))
    assert out == ["data=adult", "trainer.tune=null", "run_dir=null", "trainer.progress=false",
                   "optimizer.lr=0.05,0.1", "hydra/launcher=joblib",
                   "hydra.sweep.dir='/tmp/a b/sweep'", "hydra.sweep.subdir=${hydra.job.num}"]


def test_choose_ranks_when_no_candidate_is_feasible():
    rows = [{"validation_objective": o, "validation_violations": [v], "validation_violation": v,
             "train_violation": 0.01} for o, v in [(0.1, 0.5), (0.3, 0.01), (0.2, 0.2),
                                                   (math.inf, 0.0)]]
    pick, reason = choose(rows)
    assert pick == 3 and "lowest validation objective of the 1 that do" in reason
    assert "no candidate meets every constraint on train" in reason
    pick, reason = choose(rows[:3])
    assert pick == best_iterate([0.1, 0.3, 0.2], [[0.5], [0.01], [0.2]]) == 2
    assert "rank rule" in reason


def test_choose_takes_only_candidates_that_meet_the_constraints_on_train():
    """A job that misses on train is not chosen for reading as met on the noisier validation
    split while another job meets the constraints on train."""
    rows = [{"validation_objective": o, "validation_violations": [v], "validation_violation": v,
             "train_violation": t} for o, v, t in [(0.30, 0.0, 0.03),    # met on validation only
                                                    (0.35, 0.01, 0.0),    # met on train only
                                                    (0.40, 0.0, 0.0)]]    # met on both
    pick, reason = choose(rows)
    assert pick == 2 and "meets every constraint on train (2 of 3" in reason
    rows[2]["train_violation"] = 0.02
    assert choose(rows)[0] == 1          # the only one met on train: the rank rule among it
