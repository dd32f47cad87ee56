"""Writing a finished run's outputs: results.json, report.md, the group tables, the solution
files, the TensorBoard hparams and the game's dynamics.png.

Example:
    >>> flatten({"a": {"b": 1, "c": None}, "d": [1, 2]})
    {'a.b': 1, 'a.c': 'null', 'd': '[1, 2]'}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fairgames.game import ConstrainedOptimizer
from fairgames.game.solutions import save_solution

from ..config import TrainerConfig
from ..files import atomic_file, write_json, write_text
from ..loop.engine import Engine, unique_names
from ..loop.logger import RunLogger
from .group_tables import write_tables
from .report import SPLITS, largest_violation, plot_dynamics, render_report

SOLUTION_FILES = {"final": "final.pt", "best_iterate": "best_iterate.pt",
                  "stochastic": "stochastic.pt", "recommended": "recommended.pt"}


def plot_game(run_dir: Path, engine: Engine, copt: ConstrainedOptimizer, trainer: TrainerConfig,
              tolerance: float | None) -> None:
    """``dynamics.png``: the game's logged curves (its constraint rows), when it logged any."""
    if not engine.history:
        return
    rows = [r for r, k in zip(unique_names(copt.terms.row_names), copt.terms.row_kinds,
                              strict=True) if k == "constraint"]
    plot_dynamics(engine.history, run_dir / "dynamics.png", rows,
                  split="held-out " + trainer.constraint_split
                  if trainer.constraint_split != "train" else "train",
                  minibatch=trainer.batch_size is not None, tolerance=tolerance)


def write_files(run_dir: Path, results: dict[str, Any], statements: Mapping[str, Any],
                solutions: Mapping[str, torch.nn.Module], model_config: dict[str, Any] | None,
                metadata: Mapping[str, Any] | None = None) -> None:
    """``results.json``, ``report.md`` and the solution files (``metadata``: more plain data
    for every solution file)."""
    write_json(results, run_dir / "results.json")
    plots = sorted(p.name for p in run_dir.glob("*.png"))     # the method's, written before
    write_text(run_dir / "report.md", render_report(results, statements, plots))
    write_tables(results, run_dir)          # groups.csv, constraints.csv
    for name, solution in solutions.items():
        # recommended.pt says what it is and why (results.json's training.recommended)
        why = {"choice": results["training"]["recommended"]} if name == "recommended" else {}
        with atomic_file(run_dir / SOLUTION_FILES[name], "wb") as f:
            save_solution(f, solution,
                          metadata={"solution": name, "model": model_config,
                                    "problem": statements.get("name"),
                                    "steps": results["training"]["steps"], **why,
                                    **(metadata or {})})


def log_final(logger: RunLogger, step: int, results: Mapping[str, Any]) -> None:
    """TensorBoard: every solution's objective, error or mse / mae, and largest violation on
    every split, at ``step``, and the settings the run used as hparams (:func:`hparams_of`)."""
    hparams = hparams_of(results["config"])
    metrics = {}
    for sol, per_split in results["solutions"].items():
        for split in SPLITS:
            m = per_split[split]
            # an undefined value (a group with no row on the split) is None: NaN here
            metrics[f"final/{sol}/{split}/objective"] = (math.nan if m["objective"] is None
                                                         else m["objective"])
            for key in ("error", "mse", "mae"):      # by label kind: error, or mse and mae
                if key in m:
                    metrics[f"final/{sol}/{split}/{key}"] = m[key]
            worst = largest_violation(m)
            metrics[f"final/{sol}/{split}/max_violation"] = math.nan if worst is None else worst
    logger.scalars(step, metrics)
    logger.hparams(hparams, metrics)


# Where a run writes and how it shows progress: not settings of the model it trains.
OUTPUT_KEYS = ("run_dir", "families", "trainer.resume", "trainer.stop_after", "trainer.progress",
               "trainer.tensorboard", "trainer.plots", "trainer.eval_chunk", "trainer.log_every",
               "trainer.checkpoint_every", "problem.description")


def hparams_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run used, flattened, for TensorBoard's hparams: none of a group turned
    off (``robust=none``: its name only; the tuning grid of an untuned run; early stopping's
    settings when it is off), no unset key (null: a recipe's or preset's default, recorded
    resolved elsewhere), no output setting (:data:`OUTPUT_KEYS`). ``trainer.batch_size``'s
    null is the full batch, kept as ``"full"``.

    Example:
        >>> cfg = {"robust": {"name": "none", "gamma": 0.1}, "seed": 0, "run_dir": "runs/x",
        ...        "trainer": {"batch_size": None, "tune": None, "tune_grid": {"lr": [1.0]},
        ...                    "early_stop": {"enabled": False, "patience": 3}},
        ...        "algorithm": {"name": "lagrangian", "radius": None}}
        >>> hparams_of(cfg)
        {'robust.name': 'none', 'seed': 0, 'trainer.batch_size': 'full', \
'trainer.early_stop.enabled': False, 'algorithm.name': 'lagrangian'}
    """
    trainer = config.get("trainer", {})
    off = [f"{group}." for group in config
           if isinstance(config[group], Mapping) and config[group].get("name") == "none"]
    if trainer.get("tune") is None:
        off.append("trainer.tune_grid.")
    if not trainer.get("early_stop", {}).get("enabled", False):
        off.append("trainer.early_stop.")
    out = {}
    for key, value in flatten(config).items():
        if key == "trainer.batch_size" and value == "null":
            value = "full"
        dropped = (key in OUTPUT_KEYS or value == "null" or
                   any(key.startswith(prefix) and not key.endswith((".name", ".enabled"))
                       for prefix in off))
        if not dropped:
            out[key] = value
    return out


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        elif isinstance(v, list):
            out[key] = str(v)
        else:
            out[key] = "null" if v is None else v
    return out
