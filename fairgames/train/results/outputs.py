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
    write_text(run_dir / "report.md", render_report(results, statements))
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
    every split, at ``step``, and the config as hparams."""
    hparams = flatten(results["config"])
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
