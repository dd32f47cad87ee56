"""The filter's own small pipeline (``scripts/filter.py``): load a data set as a training run
does, fit a :class:`~fairgames.filtering.BalancedFilter` on its training split, filter that
split, report it in sample (train) and out of sample (test), and write the run directory:

* ``filter.json`` — the fitted filter (:meth:`BalancedFilter.save`), which a later process
  loads and applies (``scripts/apply_filter.py``);
* ``metrics.json`` — the resolved config and :meth:`BalancedFilter.report` on train and test;
* ``kept.csv`` — the training rows one seeded draw of Algorithm 2 kept: their position in the
  split (``row``), their row in the data set (``source_row``, where the loader records it)
  and their group;
* ``posterior.png`` — the heat map of ``Pr[z | ẑ]`` on train (paper 002's Figure 4);
* ``preprocess.json`` — own table data only: the fitted encoding of raw rows.

This module imports the training pipeline's data stage (the family → the core's seam); the
package's ``fairgames.filtering`` does not import it.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> cfg = {"data": {"name": "synthetic", "protected": "group", "n": 600}, "seed": 0,
    ...        "filter": {"proxy": "qp_tree", "eta": 0.0}}
    >>> run = fit_filter(cfg)
    >>> d = Path(tempfile.mkdtemp())
    >>> sorted(p.name for p in write_outputs(run, d, cfg))
    ['filter.json', 'kept.csv', 'metrics.json', 'posterior.png']
    >>> run.reports["train"]["imbalance_expected"] <= run.reports["train"]["imbalance_base"]
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fairgames.data import DatasetSplits
from fairgames.train.data import load_splits, write_preprocessing

from .balanced import BalancedFilter
from .data import FilterData, filter_arrays
from .errors import FilterError

PAPER = "002"    # the recipe a packaged data set follows unless data.paper says
OPTIONS = ("proxy", "eta", "target", "min_acceptance", "cells", "relaxed", "alpha",
           "tree_options")


@dataclass
class FilterRun:
    """A fitted filter, its inputs, the kept training rows and the two reports."""

    filter: BalancedFilter
    splits: DatasetSplits
    attribute: str
    train: FilterData
    test: FilterData
    kept: np.ndarray
    reports: dict[str, dict[str, Any]]


def filter_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``filter.*`` as :class:`BalancedFilter`'s arguments; an unknown key is refused.

    Example:
        >>> filter_options({"proxy": "qp_tree", "eta": 0.3})
        {'proxy': 'qp_tree', 'eta': 0.3}
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise FilterError(f"unknown key(s) {['filter.' + k for k in unknown]}; the filter "
                          f"takes {['filter.' + k for k in OPTIONS]}")
    out = dict(options)
    if out.get("target") is not None:
        out["target"] = list(out["target"])
    if out.get("tree_options") is not None:
        out["tree_options"] = dict(out["tree_options"])
    return out


def fit_filter(cfg: Mapping[str, Any]) -> FilterRun:
    """Load ``cfg["data"]`` (split seed: ``data.seed``, else ``cfg["seed"]``; a packaged data
    set with ``data.paper`` null follows paper 002's recipe where it has one), fit the filter of
    ``cfg["filter"]`` on train (its draws seeded by ``cfg["seed"]``), filter train, report
    train and test.

    Raises:
        FilterError: bad filter options, or data whose protected attribute is unknown.
        ConfigError / DataError: as a training run's data stage.
    """
    seed = int(cfg.get("seed", 0))
    options = filter_options(cfg.get("filter") or {})
    data = dict(cfg["data"])
    if "paper" in data and data["paper"] is None and _has_recipe(data["name"]):
        data["paper"] = PAPER        # a packaged data set the paper used: its recipe
    # the paper's filter splits train / test only (32 561 / 16 281 on Adult)
    splits = load_splits(data, seed, required=("train", "test"))
    attribute = data.get("protected") or splits.metadata.get("protected")
    if attribute is None:
        raise FilterError(f"data set {cfg['data']['name']!r} names no protected attribute: "
                          "give data.protected=<attribute> (z, the attribute to balance)")
    train, test = filter_arrays(splits.train, attribute), filter_arrays(splits.test, attribute)
    f = BalancedFilter(**options, random_state=seed).fit(
        train.X, train.z, feature_names=train.feature_names)
    kept = f.filter(train.X)
    reports = {"train": f.report(train.X, train.z), "test": f.report(test.X, test.z)}
    return FilterRun(f, splits, attribute, train, test, kept, reports)


def _has_recipe(name: str) -> bool:
    """Whether the packaged data set ``name`` has paper 002's recipe (Adult, Bank)."""
    from fairgames.data.loaders import DATASETS

    definition = DATASETS.get(name)     # None: synthetic data or a table, no recipe
    return definition is not None and PAPER in definition.recipes


def write_outputs(run: FilterRun, run_dir: Path, config: Mapping[str, Any]) -> list[Path]:
    """Write the run directory's files (the module's list); returns their paths."""
    from fairgames.train.files import save_figure, write_json, write_text

    run_dir.mkdir(parents=True, exist_ok=True)
    paths = [run_dir / "filter.json", run_dir / "metrics.json", run_dir / "kept.csv",
             run_dir / "posterior.png"]
    run.filter.save(paths[0])
    write_json({"config": dict(config), "attribute": run.attribute,
                "train": run.reports["train"], "test": run.reports["test"]}, paths[1])
    write_text(paths[2], kept_rows_csv(run))
    figure = posterior_figure(run)
    try:
        save_figure(figure, paths[3], dpi=100)
    finally:
        import matplotlib.pyplot as plt
        plt.close(figure)
    table = write_preprocessing(run_dir, run.splits)
    return paths + ([table] if table is not None else [])


def kept_rows_csv(run: FilterRun) -> str:
    """``kept.csv``'s text: ``row`` (in the training split), ``source_row`` (in the data set,
    where the loader records it, else empty) and ``group`` per kept row."""
    indices = (run.splits.metadata.get("split_indices") or {}).get("train")
    lines = ["row,source_row,group"]
    for i in run.kept.tolist():
        source = "" if indices is None else str(int(np.asarray(indices)[i]))
        lines.append(f"{i},{source},{json.dumps(str(run.train.z[i]))}")
    return "\n".join(lines) + "\n"


def posterior_figure(run: FilterRun) -> Any:
    """The heat map of ``Pr[z | ẑ]`` on train (paper 002's Figure 4): one row per proxy cell
    (its mass after η in the label), one column per group, each value written in its square;
    a last row is the prior ``Pr[z]`` (disclosivity is the largest gap to it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report, f = run.reports["train"], run.filter
    cells = [c for c in report["cells"] if c["mass"] > 0]
    table = np.asarray([c["posterior"] for c in cells] + [report["prior"]])
    groups = [str(g) for g in report["groups"]]
    predicted = f.cells == "predicted"
    labels = [(f"ẑ = {groups[c['cell']]}" if predicted else f"leaf {c['cell']}")
              + f" ({c['mass']:.1%})" for c in cells] + ["Pr[z] (prior)"]
    fig, ax = plt.subplots(figsize=(1.2 * len(groups) + 3, 0.45 * len(labels) + 1.6),
                           constrained_layout=True)
    image = ax.imshow(table, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), v in np.ndenumerate(table):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="small",
                color="white" if v < 0.5 else "black")
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(f"z ({run.attribute})")
    ax.set_ylabel("proxy cell ẑ (mass after η)")
    ax.set_title(f"Pr[z | ẑ] on train: {f.proxy}, η = {float(f.eta):g}, disclosivity "
                 f"{report['disclosivity']:.3f}")
    fig.colorbar(image, ax=ax, label="Pr[z | ẑ]")
    return fig


def summary_lines(run: FilterRun) -> list[str]:
    """What ``scripts/filter.py`` prints: per split, the kept share, the imbalance before and
    after (expected under ρ, and of the draw) and the disclosivity."""
    f = run.filter
    out = [f"filter {f.proxy}, η = {float(f.eta):g}, on {run.attribute} "
           f"({len(f.groups_)} groups), target {np.round(f.target_, 4).tolist()}"]
    for split, r in run.reports.items():
        realised = "–" if r["imbalance_realised"] is None else f"{r['imbalance_realised']:.4f}"
        out.append(f"  {split}: keeps {r['acceptance_expected']:.2%} of {r['rows']} rows "
                   f"(this draw {r['kept']}); imbalance {r['imbalance_base']:.4f} -> "
                   f"{r['imbalance_expected']:.4f} expected ({realised} this draw); "
                   f"disclosivity {r['disclosivity']:.4f}")
    return out
