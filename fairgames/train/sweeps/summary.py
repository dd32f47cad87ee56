"""A sweep's summary: one row per job — its settings, the deployable solution's objective and
largest violation on each split, whether it meets its constraints on train, and the score a
sweeper minimised (:mod:`.score`) — printed at the end of ``python scripts/train.py -m ...``
and written beside the jobs as ``summary.csv`` and ``summary.md``.

:class:`SweepSummary` is the Hydra callback (``hydra.callbacks`` in ``configs/train.yaml``) that
does it when a multirun ends; ``summarize(sweep_dir)`` does it for any finished sweep.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> table = summary_table(d)            # a sweep whose jobs left nothing
    >>> list(table.columns)[:3], len(table)
    (['job', 'settings', 'solution'], 0)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..files import write_text
from .score import score
from .tune import TRAIN_SLACK, _violations, deployable_solution

SPLITS = ("train", "validation", "test")
COLUMNS = ["job", "settings", "solution",
           *(f"{m}_{s}" for s in SPLITS for m in ("objective", "violation")),
           "met_on_train", "score"]
SUMMARY = "summary"


def summary_table(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per job directory under ``sweep_dir`` (a directory with Hydra's
    ``.hydra/overrides.yaml``), in job order; a job that left no ``results.json`` has its
    settings and ``solution`` "no results" (it failed or stopped early)."""
    jobs = sorted((p.parent.parent for p in Path(sweep_dir).glob("*/.hydra/overrides.yaml")),
                  key=_job_order)
    overrides = {job: _overrides(job) for job in jobs}
    shared = set.intersection(*(set(o) for o in overrides.values())) if jobs else set()
    rows = [_row(job, [o for o in overrides[job] if o not in shared]) for job in jobs]
    return pd.DataFrame(rows, columns=COLUMNS)


def _row(job: Path, settings: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"job": job.name, "settings": " ".join(settings)}
    path = job / "results.json"
    if not path.is_file():
        return {**row, "solution": "no results", "score": score(None)[0]}
    results = json.loads(path.read_text())
    solution = deployable_solution(results)
    per_split = results["solutions"][solution]
    row["solution"] = solution
    for split in SPLITS:
        metrics = per_split.get(split)
        if metrics is not None:
            row[f"objective_{split}"] = metrics["objective"]
            row[f"violation_{split}"] = max(_violations(metrics), default=0.0)
    row["met_on_train"] = "yes" if row["violation_train"] <= TRAIN_SLACK else "NO"
    row["score"] = score(results)[0]
    return row


def _overrides(job: Path) -> list[str]:
    return [str(o) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
            or []]


def _job_order(job: Path) -> tuple[int, str]:
    return (int(job.name), "") if job.name.isdigit() else (math.inf, job.name)  # type: ignore


def to_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown, numbers to 4 decimals (an undefined value: –)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "–" if math.isnan(v) else f"{v:.4f}"
        return str(v)
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in table.itertuples(index=False)]
    return "\n".join(lines)


def summarize(sweep_dir: str | Path) -> str:
    """Write ``summary.csv`` and ``summary.md`` in ``sweep_dir``; return the printed text."""
    sweep_dir = Path(sweep_dir)
    table = summary_table(sweep_dir)
    write_text(sweep_dir / f"{SUMMARY}.csv", table.to_csv(index=False))
    met = int((table["met_on_train"] == "yes").sum())
    text = (f"sweep {sweep_dir}: {len(table)} jobs, {met} meet their constraints on train "
            f"(score: what a sweeper minimises, docs/training.md)\n{to_markdown(table)}")
    write_text(sweep_dir / f"{SUMMARY}.md", text + "\n")
    return text


class SweepSummary(Callback):
    """Prints and writes the summary of a multirun when it ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            print(summarize(sweep_dir))
