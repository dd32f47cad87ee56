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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..files import save_figure

KEYS = ["problem", "data", "algorithm", "tolerance", "solution"]
# the regression metrics a results.json may carry per split (docs/fair_regression.md)
METRICS = ("mse", "mae", "ks_disparity", "grid_disparity")
UNFAIRNESS = {
    "constraints": "achieved unfairness (largest constraint value + tolerance)",
    "ks": "KS disparity (max_a sup_z |P[f ≥ z | a] − P[f ≥ z]|)",
    "grid": "grid disparity (max_{a,z} |γ̂_{a,z}|)",
}


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
                       **{k: m[k] for k in METRICS if k in m},
                       "max_violation": max(viols, default=0.0),
                       "max_value": max(values, default=float("nan"))}
                for name, c in cons.items():
                    row[f"constraint:{name}"] = c["value"]
                rows.append(row)
    return pd.DataFrame(rows)


def default_unfairness(rows: pd.DataFrame) -> str:
    """``"ks"`` when the rows carry the exact KS disparity (regression sweeps), else
    ``"constraints"``.

    Example:
        >>> default_unfairness(pd.DataFrame({"ks_disparity": [0.1]}))
        'ks'
    """
    has_ks = "ks_disparity" in rows and bool(rows["ks_disparity"].notna().any())
    return "ks" if has_ks else "constraints"


def unfairness_of(df: pd.DataFrame, unfairness: str) -> pd.Series:
    """Per row, the achieved unfairness of ``unfairness`` (:data:`UNFAIRNESS`):
    ``constraints`` is the largest constraint value plus the tolerance for ``difference`` /
    ``bound`` tolerances (the achieved gap or rate), the largest value otherwise; ``ks`` and
    ``grid`` are the reported disparities.

    Raises:
        ValueError: an unknown choice, or a disparity the rows do not carry.
    """
    if unfairness not in UNFAIRNESS:
        raise ValueError(f"unfairness must be one of {sorted(UNFAIRNESS)}, got {unfairness!r}")
    if unfairness == "constraints":
        shift = df["tolerance"].where(df["tolerance_kind"].isin(["difference", "bound"]), 0.0)
        return df["max_value"] + shift.fillna(0.0)
    column = f"{unfairness}_disparity"
    if column not in df or not bool(df[column].notna().any()):
        raise ValueError(f"unfairness={unfairness!r}: the runs report no {column} (only "
                         "regression problems with threshold constraints do); use "
                         "unfairness='constraints'")
    return df[column]


def frontier(rows: pd.DataFrame, split: str = "test", unfairness: str | None = None,
             metric: str | None = None, envelope_split: str | None = "train") -> pd.DataFrame:
    """Means and standard deviations over seeds, per (problem, data, algorithm, tolerance,
    solution), on ``split``; sorted by tolerance.

    ``unfairness`` (default :func:`default_unfairness`) sets the ``unfairness`` columns.
    ``on_envelope`` flags, per (problem, data, algorithm, solution), the rows on the lower
    convex envelope (:func:`lower_envelope`) of (unfairness, ``metric`` mean) on
    ``envelope_split`` (default train, where paper 003 selects; the split itself when the
    rows have none), read on ``split``; ``metric`` defaults to ``error`` where the rows have
    it, else the objective.
    """
    unfairness = unfairness or default_unfairness(rows)
    out = _aggregate(rows, split, unfairness)
    metric = metric or default_metric(out)
    chosen = split
    if envelope_split and envelope_split != split and (rows["split"] == envelope_split).any():
        chosen = envelope_split
    basis = out if chosen == split else _aggregate(rows, chosen, unfairness)
    flags = _envelope_flags(basis, metric)
    keys = [k for k in KEYS if k in out]
    merged = out[keys].merge(flags, on=keys, how="left")
    out["on_envelope"] = merged["on_envelope"].fillna(False).astype(bool).to_numpy()
    return out


def default_metric(table: pd.DataFrame) -> str:
    """``error`` when the table has error means, else ``objective``."""
    has = "error_mean" in table and bool(table["error_mean"].notna().any())
    return "error" if has else "objective"


def _aggregate(rows: pd.DataFrame, split: str, unfairness: str) -> pd.DataFrame:
    df = rows[rows["split"] == split].copy()
    if df.empty:
        raise ValueError(f"no rows for split {split!r}")
    df["unfairness"] = unfairness_of(df, unfairness)
    keys = [k for k in KEYS if k in df]
    df["tolerance"] = df["tolerance"].fillna(-1.0)   # groupby drops NaN keys
    g = df.groupby(keys, dropna=False)
    extra = {f"{m}_{stat}": (m, stat) for m in METRICS if m in df for stat in ("mean", "std")}
    out = g.agg(runs=("run_dir", "count"),
                error_mean=("error", "mean"), error_std=("error", "std"),
                objective_mean=("objective", "mean"), objective_std=("objective", "std"),
                unfairness_mean=("unfairness", "mean"), unfairness_std=("unfairness", "std"),
                max_violation_mean=("max_violation", "mean"), **extra).reset_index()
    out["tolerance"] = out["tolerance"].where(out["tolerance"] >= 0)
    return out.sort_values(["solution", "tolerance"]).reset_index(drop=True)


def _envelope_flags(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``on_envelope`` per row of ``table`` within each (problem, data, algorithm, solution)."""
    if f"{metric}_mean" not in table or not bool(table[f"{metric}_mean"].notna().any()):
        raise ValueError(f"metric {metric!r}: the runs report no {metric} (have "
                         f"{sorted(c[:-5] for c in table.columns if c.endswith('_mean'))})")
    keys = [k for k in KEYS if k in table]
    flags = pd.Series(False, index=table.index)
    for _, part in table.groupby([k for k in keys if k != "tolerance"], dropna=False):
        on = lower_envelope(part["unfairness_mean"].tolist(), part[f"{metric}_mean"].tolist())
        flags[part.index[on]] = True
    return table[keys].assign(on_envelope=flags.to_numpy())


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


def plot_frontier(tables: pd.DataFrame | Mapping[str, pd.DataFrame], path: str | Path,
                  metric: str = "error", unfairness: str = "constraints",
                  solutions: Sequence[str] | None = ("recommended",)) -> None:
    """Achieved unfairness (x) against ``metric`` (y), one line per (algorithm, solution) of
    ``solutions`` (``None``: every solution; the recommended one by default, where the table
    has it — four overlaid solutions hide one another), points labelled by tolerance, the
    lower convex envelope (``on_envelope``) dashed; one panel per split of ``tables``
    (``{split: frontier table}``, the split named in its title), side by side (matplotlib
    Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {"": tables} if isinstance(tables, pd.DataFrame) else dict(tables)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False,
                             constrained_layout=True)
    for ax, (split, table) in zip(axes[0], panels.items(), strict=True):
        shown = table
        if solutions is not None and table["solution"].isin(solutions).any():
            shown = table[table["solution"].isin(solutions)]
        _draw_panel(ax, shown, metric)
        ax.set_xlabel(UNFAIRNESS[unfairness])
        ax.set_ylabel(f"{metric} (mean ± sd over seeds)")
        ax.set_title("fairness–accuracy frontier" + (f" on {split}" if split else "")
                     + " (labels: tolerance)")
        ax.legend(fontsize="small")
    try:
        save_figure(fig, path, dpi=100)
    finally:
        plt.close(fig)


# Where a point's tolerance label may go (points), tried in order: the first place whose box
# overlaps no label placed before it wins, so close points' labels do not overprint.
LABEL_OFFSETS = ((6, 6), (6, -14), (-34, 6), (-34, -14), (6, 20), (6, -28), (-34, 20),
                 (-34, -28))
LABEL_BOX = (30, 11)     # a label's width and height in points (a few digits, font "small")


def _draw_panel(ax: Any, table: pd.DataFrame, metric: str) -> None:
    by = ["algorithm", "solution"] if table["algorithm"].nunique() > 1 else ["solution"]
    for name, part in table.groupby(by):
        part = part.sort_values("unfairness_mean")
        label = " / ".join(str(n) for n in name) if isinstance(name, tuple) else str(name)
        bars = ax.errorbar(part["unfairness_mean"], part[f"{metric}_mean"],
                           xerr=part["unfairness_std"].fillna(0.0),
                           yerr=part[f"{metric}_std"].fillna(0.0), marker="o", capsize=3,
                           label=label)
        if "on_envelope" in part and bool(part["on_envelope"].any()):
            env = part[part["on_envelope"]]
            ax.plot(env["unfairness_mean"], env[f"{metric}_mean"], "--", lw=2.5, alpha=0.5,
                    color=bars.lines[0].get_color())
    _label_tolerances(ax, table, metric)


def _label_tolerances(ax: Any, table: pd.DataFrame, metric: str) -> None:
    """Each point's tolerance, placed greedily (:data:`LABEL_OFFSETS`) clear of the labels
    already placed, with a thin leader line when it sits away from its point."""
    ax.autoscale_view()
    scale = ax.figure.dpi / 72.0                        # points → display pixels
    placed: list[tuple[float, float]] = []
    w, h = LABEL_BOX[0] * scale, LABEL_BOX[1] * scale
    for _, r in table.sort_values("unfairness_mean").iterrows():
        if r["tolerance"] != r["tolerance"]:             # NaN: a run without a tolerance
            continue
        xy = (r["unfairness_mean"], r[f"{metric}_mean"])
        px, py = ax.transData.transform(xy)
        free = [o for o in LABEL_OFFSETS
                if all(abs(px + o[0] * scale - x) >= w or abs(py + o[1] * scale - y) >= h
                       for x, y in placed)]
        dx, dy = free[0] if free else LABEL_OFFSETS[len(placed) % len(LABEL_OFFSETS)]
        placed.append((px + dx * scale, py + dy * scale))
        far = abs(dy) > 14 or dx < -30
        ax.annotate(f"{r['tolerance']:g}", xy, textcoords="offset points", xytext=(dx, dy),
                    fontsize="small",
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"} if far else None)
