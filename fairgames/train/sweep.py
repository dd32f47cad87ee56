"""Sweeps: collect the ``results.json`` of a multirun into a table and a fairness–accuracy
frontier.

A sweep (``python scripts/train.py -m problem.tolerance=0.01,0.05,0.1 seed=0,1,2``) leaves one
run directory per job. :func:`collect` reads every ``results.json`` below a directory into one
row per (run, solution, split); :func:`frontier` averages over seeds per (problem, data,
algorithm, tolerance, solution) and adds the achieved *unfairness*: the largest constraint
value plus the tolerance for ``difference`` / ``bound`` tolerances (so that it reads as the
achieved gap or rate, comparable across tolerances), the largest constraint value otherwise.

Example:
    >>> import pandas as pd
    >>> rows = pd.DataFrame({"problem": ["p"] * 2, "data": ["d"] * 2, "algorithm": ["a"] * 2,
    ...                      "tolerance": [0.1, 0.1], "tolerance_kind": ["difference"] * 2,
    ...                      "seed": [0, 1], "solution": ["final"] * 2, "split": ["test"] * 2,
    ...                      "objective": [0.2, 0.3], "error": [0.2, 0.3],
    ...                      "max_violation": [0.0, 0.02], "max_value": [-0.01, 0.02],
    ...                      "run_dir": ["r0", "r1"]})
    >>> t = frontier(rows)
    >>> round(float(t["error_mean"].iloc[0]), 4), round(float(t["unfairness_mean"].iloc[0]), 4)
    (0.25, 0.105)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

KEYS = ["problem", "data", "algorithm", "tolerance", "solution"]


def collect(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per (run, solution, split) of every ``results.json`` under ``sweep_dir``.

    Raises:
        FileNotFoundError: when no ``results.json`` is found (naming the directory).
    """
    root = Path(sweep_dir)
    files = sorted(root.rglob("results.json"))
    if not files:
        raise FileNotFoundError(f"no results.json under {root} (is it a finished sweep?)")
    rows = []
    for f in files:
        res = json.loads(f.read_text())
        cfg = res["config"]
        problem = cfg.get("problem", {})
        base = {
            "run_dir": str(f.parent),
            "problem": problem.get("name"),
            "data": cfg.get("data", {}).get("name"),
            "algorithm": cfg.get("algorithm", {}).get("name"),
            "tolerance": problem.get("tolerance"),
            "tolerance_kind": problem.get("tolerance_kind", "none"),
            "seed": cfg.get("seed"),
            "likely_infeasible": res["training"]["likely_infeasible"],
        }
        for solution, per_split in res["solutions"].items():
            for split, m in per_split.items():
                cons = m["constraints"]
                values = [c["value"] for c in cons.values() if c["value"] is not None]
                viols = [c["violation"] for c in cons.values() if c["violation"] is not None]
                row = {**base, "solution": solution, "split": split,
                       "objective": m["objective"], "error": m.get("error", math.nan),
                       **{k: m[k] for k in ("mse", "mae") if k in m},
                       "max_violation": max(viols, default=0.0),
                       "max_value": max(values, default=float("nan"))}
                for name, c in cons.items():
                    row[f"constraint:{name}"] = c["value"]
                rows.append(row)
    return pd.DataFrame(rows)


def frontier(rows: pd.DataFrame, split: str = "test") -> pd.DataFrame:
    """Means and standard deviations over seeds, per (problem, data, algorithm, tolerance,
    solution), on ``split``; sorted by tolerance."""
    df = rows[rows["split"] == split].copy()
    if df.empty:
        raise ValueError(f"no rows for split {split!r}")
    shift = df["tolerance"].where(df["tolerance_kind"].isin(["difference", "bound"]), 0.0)
    df["unfairness"] = df["max_value"] + shift.fillna(0.0)
    keys = [k for k in KEYS if k in df]
    df["tolerance"] = df["tolerance"].fillna(-1.0)   # groupby drops NaN keys
    g = df.groupby(keys, dropna=False)
    out = g.agg(runs=("run_dir", "count"),
                error_mean=("error", "mean"), error_std=("error", "std"),
                objective_mean=("objective", "mean"), objective_std=("objective", "std"),
                unfairness_mean=("unfairness", "mean"), unfairness_std=("unfairness", "std"),
                max_violation_mean=("max_violation", "mean")).reset_index()
    out["tolerance"] = out["tolerance"].where(out["tolerance"] >= 0)
    return out.sort_values(["solution", "tolerance"]).reset_index(drop=True)


def lower_envelope(x: Sequence[float], y: Sequence[float]) -> list[int]:
    """Indices of the points on the lower-left convex envelope of ``(x, y)`` (unfairness,
    loss): the Pareto-optimal points that no mixture of two others beats, sorted by ``x``.

    Mixing two solutions (a randomised predictor) reaches every point on the chord between
    them, so a point above a chord is dominated by a mixture (paper 003's frontiers; [code]:
    sort by disparity, keep a decreasing loss, drop points above the chord). Ties in ``x``
    keep the lowest ``y``; NaN points are left out.

    Example:
        >>> lower_envelope([0.0, 1.0, 2.0, 0.5, 3.0], [1.0, 0.2, 0.0, 0.9, 0.1])
        [0, 1, 2]
    """
    pts = sorted((float(a), float(b), i) for i, (a, b) in enumerate(zip(x, y, strict=True))
                 if a == a and b == b)
    hull: list[tuple[float, float, int]] = []
    for p in pts:
        if hull and p[1] >= hull[-1][1]:
            continue                       # not below the previous point: dominated
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) <= 0:
            hull.pop()                     # the last point lies on or above the new chord
        hull.append(p)
    return [i for _, _, i in hull]


def _cross(a: tuple[float, ...], b: tuple[float, ...], c: tuple[float, ...]) -> float:
    """``> 0`` when ``b`` lies strictly below the chord from ``a`` to ``c``."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def to_markdown(table: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub markdown table (no ``tabulate`` needed)."""
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            if isinstance(v, float):
                cells.append("–" if v != v else f"{v:.{digits}f}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_frontier(table: pd.DataFrame, path: str | Path, metric: str = "error") -> None:
    """Achieved unfairness (x) against ``metric`` (y), one line per solution, points labelled
    by tolerance (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    for solution, part in table.groupby("solution"):
        part = part.sort_values("unfairness_mean")
        ax.errorbar(part["unfairness_mean"], part[f"{metric}_mean"],
                    xerr=part["unfairness_std"].fillna(0.0),
                    yerr=part[f"{metric}_std"].fillna(0.0), marker="o", capsize=3,
                    label=str(solution))
        for _, r in part.iterrows():
            if r["tolerance"] == r["tolerance"]:
                ax.annotate(f"{r['tolerance']:g}", (r["unfairness_mean"], r[f"{metric}_mean"]),
                            textcoords="offset points", xytext=(4, 4), fontsize="small")
    ax.set_xlabel("achieved unfairness (largest constraint value + tolerance)")
    ax.set_ylabel(f"{metric} (mean over seeds)")
    ax.set_title("fairness–accuracy frontier")
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=100)
    plt.close(fig)
