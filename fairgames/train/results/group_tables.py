"""Per-group tables of a run as pandas frames, with between-group summaries, and their CSV
export (``groups.csv``, ``constraints.csv`` in the run directory).

A solution's per-group table (``results.json``'s ``groups``: ``count``, ``share`` and the
rates or losses per group) gains two summary rows per metric, as fairlearn's
``MetricFrame.difference()`` and ``.ratio()`` (``method="between_groups"``): the
``difference`` ``max − min`` and the ``ratio`` ``min / max`` over the groups (groups where the
metric is undefined are left out; a ratio with a zero maximum is undefined). ``count`` and
``share`` are not summarised.

Example:
    >>> groups = {"overall": {"count": 4.0, "share": 1.0, "tpr": 0.5},
    ...           "g=a": {"count": 2.0, "share": 0.5, "tpr": 0.25},
    ...           "g=b": {"count": 2.0, "share": 0.5, "tpr": 1.0}}
    >>> table = group_frame(groups)
    >>> list(table.index), float(summary(table).loc["difference", "tpr"])
    (['g=a', 'g=b'], 0.75)
    >>> float(summary(table).loc["ratio", "tpr"])
    0.25
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..files import write_text

GROUPS_FILE, CONSTRAINTS_FILE = "groups.csv", "constraints.csv"
OVERALL = "overall"
NOT_SUMMARISED = ("count", "share")
SUMMARIES = ("difference", "ratio")


def group_frame(groups: Mapping[str, Mapping[str, float | None]]) -> pd.DataFrame:
    """One row per group (``"<attribute>=<value>"``; ``overall`` left out), one column per
    metric; an undefined value (``None``) is NaN."""
    rows = {g: dict(v) for g, v in groups.items() if g != OVERALL}
    frame = pd.DataFrame.from_dict(rows, orient="index").astype(float)
    frame.index.name = "group"
    return frame


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """``difference`` (max − min) and ``ratio`` (min / max) of each metric over the groups."""
    metrics = frame.drop(columns=[c for c in NOT_SUMMARISED if c in frame.columns])
    high, low = metrics.max(skipna=True), metrics.min(skipna=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (low / high).where(high != 0)
    return pd.DataFrame({"difference": high - low, "ratio": ratio}).T


def with_summary(groups: Mapping[str, Mapping[str, float | None]]) -> pd.DataFrame:
    """The group rows, the ``overall`` row and the two summary rows, in that order."""
    frame = group_frame(groups)
    parts = [frame]
    if OVERALL in groups:
        parts.append(pd.DataFrame({OVERALL: groups[OVERALL]}).T.astype(float))
    parts.append(summary(frame))
    out = pd.concat(parts)
    out.index.name = "group"
    return out


def groups_table(results: Mapping[str, Any]) -> pd.DataFrame:
    """Every solution's and split's table (:func:`with_summary`) in one long frame with
    ``solution``, ``split`` and ``group`` columns first (``groups.csv``)."""
    parts = []
    for solution, splits in results["solutions"].items():
        for split, metrics in splits.items():
            table = with_summary(metrics["groups"]).reset_index()
            table.insert(0, "split", split)
            table.insert(0, "solution", solution)
            parts.append(table)
    return pd.concat(parts, ignore_index=True)


def constraints_table(results: Mapping[str, Any]) -> pd.DataFrame:
    """Every solution's constraint values ``g`` (``g ≤ 0``), violations and 95 % bootstrap
    intervals (NaN without one) per split (``constraints.csv``)."""
    rows = []
    for solution, splits in results["solutions"].items():
        for split, metrics in splits.items():
            for name, c in metrics["constraints"].items():
                low, high = c.get("interval") or (None, None)
                rows.append({"solution": solution, "split": split, "constraint": name,
                             "value": c.get("value"), "violation": c.get("violation"),
                             "interval_low": low, "interval_high": high})
    columns = ["solution", "split", "constraint", "value", "violation", "interval_low",
               "interval_high"]
    return pd.DataFrame(rows, columns=columns)


def write_tables(results: Mapping[str, Any], run_dir: Path) -> None:
    """``groups.csv`` and ``constraints.csv`` in ``run_dir``."""
    # each written whole or not at all (a full disk: OutputError naming the file)
    write_text(Path(run_dir) / GROUPS_FILE, groups_table(results).to_csv(index=False))
    write_text(Path(run_dir) / CONSTRAINTS_FILE, constraints_table(results).to_csv(index=False))
