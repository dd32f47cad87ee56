"""Model selection on validation: ``trainer.tune=validation`` (a grid of step sizes).

A tuned run sweeps θ's and λ's step sizes (``trainer.tune_grid``: multiples of the run's own
``optimizer.lr`` and ``algorithm.multiplier_lr``, 3 × 3 by default, and of the robust
adversary's ``robust.lr`` when asked) as a **Hydra multirun on
the joblib launcher** — the command line re-run with ``-m hydra/launcher=joblib``, every job
on one torch thread — and keeps the job whose deployable solution is best on the validation
split by :func:`fairgames.game.best_iterate`'s rule: the lowest validation objective among the
candidates that meet every constraint on validation, else the rank rule of Cotter et al.
(2019). Selection reads the jobs' ``results.json`` on train and validation only, never test.

The tuned run's directory holds the sweep (``sweep/<job>/``, with Hydra's ``multirun.yaml``),
``tune.json`` (one row per candidate: settings, validation objective and largest violation,
train violation, the chosen flag; the rule and why the chosen one won) and a copy of the
chosen job's outputs (``results.json``, ``report.md``, ``dynamics.png``, the solutions'
``.pt`` files).

Example:
    >>> res = {"solutions": {"stochastic": {
    ...     "train": {"objective": 0.2, "constraints": {"c": {"value": 0.01, "violation": 0.01}}},
    ...     "validation": {"objective": 0.3,
    ...                    "constraints": {"c": {"value": -0.02, "violation": 0.0}}}}}}
    >>> deployable_solution(res)
    'stochastic'
    >>> c = candidate_metrics(res)
    >>> c["validation_objective"], c["validation_violation"], c["train_violation"]
    (0.3, 0.0, 0.01)
    >>> choose([c, {**c, "validation_objective": 0.25, "validation_violation": 0.1,
    ...             "validation_violations": [0.1]}])[0]
    0
"""

from __future__ import annotations

import inspect
import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from fairgames.game import PRESETS, best_iterate

from ..config import ConfigError, tune_step_keys
from ..config.resume import override_key
from ..files import write_json
from ..results.report import clean_numbers

TUNE_FILE = "tune.json"
SWEEP_DIR = "sweep"
# The launcher a tuned run's sweep uses (hydra-joblib-launcher's config name and class).
LAUNCHER = "joblib"
LAUNCHER_TARGET = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
# Launchers whose jobs run side by side on this machine's cores (joblib's, submitit's local)
SHARED_CORE_TARGETS = (LAUNCHER_TARGET,
                       "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")
# Overrides of the tuned command that its jobs must not inherit: each job is one plain run
# in its own sweep directory, and parallel progress bars would garble the terminal.
_JOB_SETTINGS = {"trainer.tune": "null", "run_dir": "null", "trainer.progress": "false"}


def step_sizes(cfg: DictConfig) -> dict[str, float]:
    """The run's own value of each step size of ``trainer.tune_grid`` (the grid's centre):
    ``optimizer.lr``; ``algorithm.multiplier_lr``, or when null the preset's, else the λ
    strategy's default step.

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"optimizer": {"lr": 0.01}, "trainer": {"tune_grid": {
        ...     "lr": [1.0], "multiplier_lr": [1.0]}}, "algorithm": {"name": "algorithm3",
        ...     "multipliers": None, "multiplier_lr": None}})
        >>> step_sizes(cfg)
        {'lr': 0.01, 'multiplier_lr': 0.3}
    """
    out = {}
    for name in cfg.trainer.tune_grid:
        section, key = tune_step_keys()[name].split(".")
        value = cfg[section].get(key)
        if value is None and name == "multiplier_lr":
            value = _default_multiplier_lr(cfg.algorithm)
        out[name] = float(value)
    return out


def _default_multiplier_lr(algorithm: DictConfig) -> float:
    preset = PRESETS[algorithm.name]
    if algorithm.get("multipliers") is None and preset.multiplier_lr is not None:
        return preset.multiplier_lr
    cls = preset.player_classes(algorithm.get("multipliers"))["multipliers"]
    default = inspect.signature(cls).parameters.get("lr")
    if default is None or not isinstance(default.default, int | float):
        raise ConfigError(f"algorithm.multiplier_lr is null and algorithm={algorithm.name}'s "
                          "λ-player has no default step to tune around: set it")
    return float(default.default)


def grid(cfg: DictConfig) -> dict[str, list[float]]:
    """The swept values by config key (``optimizer.lr`` → values), 6 significant digits;
    a step size whose only multiple is 1 is left out (not swept).

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"optimizer": {"lr": 0.01}, "trainer": {"tune_grid": {
        ...     "lr": [0.3, 1, 3], "multiplier_lr": [1]}}, "algorithm": {"multiplier_lr": 0.5}})
        >>> grid(cfg)
        {'optimizer.lr': [0.003, 0.01, 0.03]}
    """
    centre = step_sizes(cfg)
    steps = tune_step_keys()
    return {steps[name]: [float(f"{centre[name] * f:.6g}") for f in factors]
            for name, factors in cfg.trainer.tune_grid.items() if list(factors) != [1.0]}


def sweep_overrides(task_overrides: Sequence[str], values: Mapping[str, list[float]],
                    sweep_dir: Path) -> list[str]:
    """The ``-m`` command line of a tuned run's sweep: the user's overrides (those of the grid
    and of :data:`_JOB_SETTINGS` replaced), the grid as comma-separated sweeps, the joblib
    launcher and the sweep directory.

    Example:
        >>> out = sweep_overrides(["data=adult", "optimizer.lr=0.1", "trainer.tune=validation"],
        ...                       {"optimizer.lr": [0.05, 0.1]}, Path("/r/sweep"))
        >>> out[0], out[4], out[5]
        ('data=adult', 'optimizer.lr=0.05,0.1', 'hydra/launcher=joblib')
    """
    replaced = {**_JOB_SETTINGS, **{k: ",".join(map(repr, v)) for k, v in values.items()}}
    if tune_step_keys()["multiplier_lr"] in values:
        # the jobs step λ at multiples of the named preset's step: all of them play that
        # preset, not the problem family's game (which the centre job alone would switch to)
        replaced["algorithm.family_game"] = "keep"
    kept = [o for o in task_overrides if override_key(o) not in replaced]
    return [*kept, *(f"{k}={v}" for k, v in replaced.items()),
            f"hydra/launcher={LAUNCHER}", f"hydra.sweep.dir={_quoted(sweep_dir)}",
            "hydra.sweep.subdir=${hydra.job.num}"]


def _quoted(path: Path) -> str:
    text = str(path)
    if re.fullmatch(r"[\w./-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def one_thread_per_job(launcher: Mapping[str, Any] | None) -> None:
    """Give a job of a joblib or submitit-local multirun one torch thread (its jobs run side
    by side on the machine's cores); any other launch (basic, slurm) keeps torch's default.

    Example:
        >>> before = torch.get_num_threads()
        >>> one_thread_per_job({"_target_": "hydra._internal.core_plugins.BasicLauncher"})
        >>> torch.get_num_threads() == before
        True
    """
    if side_by_side(launcher):
        torch.set_num_threads(1)


def side_by_side(launcher: Mapping[str, Any] | None) -> bool:
    """Whether a multirun's jobs run side by side on this machine (joblib's launcher,
    submitit's local one): they share its cores and its terminal.

    Example:
        >>> side_by_side({"_target_": LAUNCHER_TARGET}), side_by_side(None)
        (True, False)
    """
    return launcher is not None and launcher.get("_target_") in SHARED_CORE_TARGETS


def bars_garble(launcher: Mapping[str, Any] | None, overrides: Sequence[str]) -> bool:
    """Whether a job's progress bar is turned off: its multirun's jobs run side by side and
    share one terminal, and the command line did not set ``trainer.progress`` itself.

    Example:
        >>> joblib = {"_target_": LAUNCHER_TARGET}
        >>> bars_garble(joblib, ["seed=1"]), bars_garble(joblib, ["trainer.progress=true"])
        (True, False)
        >>> bars_garble(None, ["seed=1"])
        False
    """
    return side_by_side(launcher) and "trainer.progress" not in map(override_key, overrides)


# --------------------------------------------------------------------------- selection
def deployable_solution(results: Mapping[str, Any]) -> str:
    """The solution a run says to deploy: ``recommended`` when the run records one (as a
    solution of its own, or ``results["recommended"]`` naming one), else ``stochastic``."""
    solutions = results["solutions"]
    if "recommended" in solutions:
        return "recommended"
    named = results.get("recommended")
    name = named.get("solution") if isinstance(named, Mapping) else named
    return name if isinstance(name, str) and name in solutions else "stochastic"


def candidate_metrics(results: Mapping[str, Any]) -> dict[str, Any]:
    """A job's row for selection: its deployable solution's validation objective and
    constraint violations, and its largest train violation. Reads no test metric."""
    solution = deployable_solution(results)
    per_split = results["solutions"][solution]
    val, train = per_split["validation"], per_split["train"]
    violations = _violations(val)
    objective = val["objective"]
    return {"solution": solution,
            "validation_objective": math.inf if objective is None else objective,
            "validation_violations": violations,
            "validation_violation": max(violations, default=0.0),
            "train_violation": max(_violations(train), default=0.0)}


def _violations(metrics: Mapping[str, Any]) -> list[float]:
    # A constraint undefined on the split (an empty subset) counts as infinitely violated.
    return [math.inf if c["violation"] is None else c["violation"]
            for c in metrics["constraints"].values()]


TRAIN_SLACK = 1e-6   # a train violation up to this is float rounding (as the verdict's)


def choose(rows: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """The index of the row chosen, and why: among the candidates whose deployable solution
    meets the constraints on **train** (where they are asked; all of them when none does),
    the one :func:`fairgames.game.best_iterate` picks on validation (feasible first, else the
    rank rule). Validation alone is too noisy a filter: on F-measure parity (Adult, 8 140
    validation rows) a job 0.031 above the bound on train read as met on validation."""
    met = [i for i, r in enumerate(rows) if r["train_violation"] <= TRAIN_SLACK]
    pool = met or list(range(len(rows)))
    objectives = [rows[i]["validation_objective"] for i in pool]
    pick = pool[best_iterate(objectives, [rows[i]["validation_violations"] for i in pool])]
    where = (f"meets every constraint on train ({len(met)} of {len(rows)} candidates do) and"
             if met else f"no candidate meets every constraint on train; of all {len(rows)}, it")
    feasible = sum(rows[i]["validation_violation"] <= 0.0 for i in pool)
    if feasible:
        return pick, (f"{where} meets them on validation with the lowest validation objective "
                      f"of the {feasible} that do")
    return pick, (f"{where} has the best larger rank of validation objective and violation "
                  f"(rank rule: none meets them on validation)")


# --------------------------------------------------------------------------- the tuned run
def tune(cfg: DictConfig, run_dir: str | Path, task_overrides: Sequence[str],
         script: str | Path) -> dict[str, Any]:
    """Run ``script`` (a Hydra app over ``configs/``) as the sweep of ``cfg``'s grid, pick a
    job, write ``tune.json`` and copy the chosen job's outputs into ``run_dir``.

    Returns ``tune.json``'s content.

    Raises:
        RuntimeError: when ``run_dir`` already holds a sweep, or the sweep fails (its exit
            status) or leaves no results.
    """
    run_dir = Path(run_dir).resolve()
    values = grid(cfg)
    sweep_dir = run_dir / SWEEP_DIR
    if sweep_dir.exists() and any(sweep_dir.iterdir()):
        raise RuntimeError(f"{sweep_dir} already holds a sweep: tune into a new run directory")
    command = [sys.executable, str(script), "-m",
               *sweep_overrides(task_overrides, values, sweep_dir)]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the tuning sweep failed (exit status {done.returncode}); its "
                           f"jobs are under {sweep_dir}")
    table = collect(sweep_dir, list(values))
    pick, reason = choose(table)
    for i, row in enumerate(table):
        row["chosen"] = i == pick
        del row["validation_violations"]
    chosen = sweep_dir / table[pick]["run_dir"]
    for f in sorted(chosen.iterdir()):
        if f.is_file() and not _job_only(f.name):
            shutil.copy2(f, run_dir / f.name)
    record = {"split": "validation", "rule": "feasible_first", "grid": values,
              "launcher": LAUNCHER, "chosen": table[pick]["job"],
              "chosen_run_dir": f"{SWEEP_DIR}/{chosen.name}", "reason": reason, "candidates": table}
    write_json(clean_numbers(record), run_dir / TUNE_FILE)   # an undefined value: null
    return record


def _job_only(name: str) -> bool:
    """Files of a job not copied up: its checkpoints, its log (the tuned run has its own)
    and its TensorBoard events (TensorBoard finds them under ``sweep/``)."""
    return (name.startswith("checkpoint.") or name.endswith(".log")
            or name.startswith("events.out."))


def collect(sweep_dir: Path, keys: Sequence[str]) -> list[dict[str, Any]]:
    """One row per job of a tuned run's sweep (``<sweep_dir>/<job>/results.json``), by job
    number: the job's settings of ``keys`` and :func:`candidate_metrics`."""
    jobs = sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    rows = []
    for job in jobs:
        path = job / "results.json"
        if not path.is_file():
            raise RuntimeError(f"tuning job {job} left no results.json")
        results = json.loads(path.read_text())
        config = results["config"]
        settings = {k: config[k.split(".")[0]].get(k.split(".")[1]) for k in keys}
        rows.append({"job": int(job.name), "run_dir": job.name, "settings": settings,
                     **candidate_metrics(results)})
    if not rows:
        raise RuntimeError(f"the tuning sweep left no jobs under {sweep_dir}")
    return rows
