"""Reproduce paper 004's Tables 2–3 and baselines (Wang et al. 2020, noisy protected groups).

Adult (race white / black / other; equal opportunity, α = 0.05) and Credit (education;
equalized odds, TPR and FPR, α = 0.03), paper 004's recipes (``data.paper=004``: 0.6/0.2/0.2,
the data set's split seed = the split index), the noise ``data.noise=γ`` flipped once on all
rows before the split (``data.noise_seed=0``, as the authors' code). Methods (one CLI run each,
``fairgames.train.run``; the cells are jobs of a Hydra launcher, ``--launcher`` — default
``joblib``, ``--jobs`` at a time, one torch thread each; ``submitit_slurm`` on a cluster;
``inline``: this process —, each job saving its own cell):

* ``unconstrained``: ``problem=error`` on the true groups;
* ``true_group``: the constraints on the true groups (the oracle; no noise);
* ``naive``: the constraints on the noisy groups (``robust=none``);
* ``dro``: ``robust=dro`` (γ_j = P(Ĝ ≠ G | G = j) on the training rows, ``estimate``; the
  exact projection onto TV ball ∩ simplex);
* ``dro_authors``: the same with the authors' projection (``robust.projection=authors``: ℓ₁
  ball only, Σp̃ = 1 not enforced), compared with the same paper cells;
* ``sa``: ``robust=soft_assignments`` (Algorithm 4's order, 5 W steps per step).

Every run: a linear model, hinge surrogates, the plain Lagrangian (Adam θ at η_θ = 0.01, λ at
η_λ = 0.5 in {λ ≥ 0, ‖λ‖₁ ≤ 1}, the paper's and its code's choices, §2.7), full batch,
750 steps (the paper's T, ``--quick`` too), snapshots every 25 steps (the code's 30), the best
iterate chosen on train with the noisy-group constraints (``trainer.recommend=best_iterate``);
the group column the run sees (the noisy one; the true one without noise) is a feature
(``data.include_protected=true``, §3.1: "the noisy group Ĝ is a model feature"). No
hyper-parameter grid by default (the paper's final values; §2.7 says they were in the middle of
its grid); ``--tune`` runs a grid per cell and chooses on validation (:func:`tuned_cell`).

Metrics on the test split, from the best iterate's predictions and the TRUE groups, computed
here with numpy: error, and per group ``j`` its violation ``max`` over its constraints of
``TPR − TPR_j − α`` (and ``FPR_j − FPR − α`` on Credit); footnote 3: the group with the
largest mean over the splits, its mean ± the standard deviation (the paper's "±", §2.7) and
the standard error. Also read from ``results.json``: the noisy-group maximum violation and the
exact robust worst cases (TV ball, soft assignments).

Each cell (data set, method, noise, split; key ``<data>_<method>_<noise>_<split>``) is kept in
``results/<tag>.cells/`` (``benchmarks/harness/cells.py``: compressed JSON Lines archives, one
per run, and the pending cells of a run not yet packed); a rerun skips the cells there
(resumable). Run by hand::

    python -m benchmarks.reproduce.reproduce_004 --quick     # 1 split, noise 0.1 and 0.4
    python -m benchmarks.reproduce.reproduce_004 --jobs 2    # 10 splits, noise 0.1 … 0.5
    python -m benchmarks.reproduce.reproduce_004 --launcher submitit_slurm --jobs 64 \\
        --launcher-override hydra.launcher.partition=cpu      # the same on a cluster
    # 1 split, all noise levels
    python -m benchmarks.reproduce.reproduce_004 --splits 1 --tag reproduce_004.split0

Example:
    >>> PAPER[("credit", "sa", 0.3)]
    (0.198, 0.001, -0.025, 0.007)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.harness.cells import CellStore, write_pending
from benchmarks.harness.children import launch_task
from benchmarks.harness.results import write

HERE = Path(__file__).resolve().parents[1]     # benchmarks/
ROOT = HERE.parent
RESULTS = HERE / "results"

NOISE = (0.1, 0.2, 0.3, 0.4, 0.5)
METHODS = ("unconstrained", "true_group", "naive", "dro", "dro_authors", "sa")
ROBUST = ("naive", "dro", "dro_authors", "sa")


@dataclass(frozen=True)
class DataSet:
    problem: str
    protected: str
    alpha: float
    fpr: bool                 # equalized odds: the FPR constraints too


DATASETS = {"adult": DataSet("equal_opportunity", "race3", 0.05, False),
            "credit": DataSet("equalized_odds", "education", 0.03, True)}

# (error, its ±, max true-group violation, its ±): Sec. 7.3 and Tables 2–3 (notes §3.4); the
# paper's "±" is a standard deviation (its code's np.std(ddof=1)). Noise None: no noise.
PAPER: dict[tuple[str, str, float | None], tuple[float, float, float, float]] = {
    ("adult", "unconstrained", None): (0.1447, 0.0012, 0.0234, 0.0164),
    ("adult", "true_group", None): (0.1459, 0.0012, -0.0469, 0.0068),
    ("credit", "unconstrained", None): (0.1797, 0.0013, 0.0264, 0.0071),
    ("credit", "true_group", None): (0.1796, 0.0011, -0.0105, 0.0070),
}
for _data, _rows in {
    "adult": [(0.152, 0.001, 0.002, 0.019, 0.148, 0.001, -0.048, 0.002),
              (0.200, 0.002, -0.045, 0.003, 0.157, 0.003, -0.048, 0.002),
              (0.216, 0.010, -0.044, 0.004, 0.158, 0.005, 0.002, 0.030),
              (0.209, 0.006, -0.019, 0.031, 0.188, 0.003, -0.016, 0.016),
              (0.219, 0.012, -0.030, 0.032, 0.218, 0.002, 0.004, 0.006)],
    "credit": [(0.206, 0.003, -0.006, 0.006, 0.182, 0.002, 0.000, 0.005),
               (0.209, 0.002, -0.008, 0.008, 0.182, 0.001, 0.004, 0.005),
               (0.212, 0.002, -0.006, 0.006, 0.198, 0.001, -0.025, 0.007),
               (0.210, 0.002, -0.017, 0.008, 0.213, 0.001, -0.028, 0.005),
               (0.211, 0.003, -0.015, 0.006, 0.211, 0.001, -0.014, 0.004)]}.items():
    for _noise, _r in zip(NOISE, _rows, strict=True):
        PAPER[(_data, "dro", _noise)] = PAPER[(_data, "dro_authors", _noise)] = _r[:4]
        PAPER[(_data, "sa", _noise)] = _r[4:]


def overrides(data: str, method: str, noise: float | None, split: int, steps: int
              ) -> list[str]:
    """The CLI overrides of one cell."""
    d = DATASETS[data]
    # data.split=default: the recipe's 0.6/0.2/0.2 re-split of all rows (configs/data/adult.yaml
    # once set the official split, which overrode it: the cells run before are refused below)
    out = [f"data={data}", "data.paper=004", "data.split=default", f"data.protected={d.protected}",
           f"seed={split}", "data.noise_seed=0", "model=linear", "optimizer=adam",
           "optimizer.lr=0.01", "algorithm=lagrangian", "algorithm.multiplier_lr=0.5",
           "algorithm.radius=1.0", "trainer.batch_size=null", f"trainer.steps={steps}",
           "trainer.snapshot_every=25", "trainer.recommend=best_iterate",
           "trainer.selection_split=train", "trainer.bootstrap=0", "trainer.progress=false",
           "trainer.tensorboard=false", "trainer.log_every=250",
           "trainer.validation_curves=false", "trainer.mlflow=false",
           # the dense products the committed cells were made with: the CSR path (a speed
           # default since, model.sparse_inputs=auto) rounds differently, and the game's
           # trajectory amplifies it (55 of the 100 SA cells moved, e.g. 0.2007 → 0.1951)
           "model.sparse_inputs=off",
           # the group the run sees (noisy, or true without noise) is a model feature (§3.1)
           "data.include_protected=true", f"data.noise={'null' if noise is None else noise}"]
    if method == "unconstrained":
        return [*out, "problem=error"]
    out += [f"problem={d.problem}", f"problem.tolerance={d.alpha}"]
    return out + {"dro": ["robust=dro"], "sa": ["robust=soft_assignments"],
                  "dro_authors": ["robust=dro", "robust.projection=authors"]}.get(method, [])


def group_violations(pred: np.ndarray, y: np.ndarray, g: np.ndarray, names: Sequence[str],
                     d: DataSet) -> dict[str, float]:
    """Per true group: max over its constraints of the signed violation (notes §3.3).

    Example:
        >>> p, y = np.array([1, 1, 0, 1]), np.array([1, 1, 1, 0])
        >>> v = group_violations(p, y, np.array([0, 1, 1, 1]), ["a", "b"], DATASETS["adult"])
        >>> {k: round(x, 12) for k, x in v.items()}
        {'a': -0.383333333333, 'b': 0.116666666667}
    """
    pos, neg = y == 1, y == 0
    tpr, fpr = pred[pos].mean(), pred[neg].mean() if neg.any() else 0.0
    out = {}
    for j, name in enumerate(names):
        v = tpr - pred[pos & (g == j)].mean() - d.alpha
        if d.fpr:
            v = max(v, pred[neg & (g == j)].mean() - fpr - d.alpha)
        out[name] = float(v)
    return out


def run_cell(data: str, method: str, noise: float | None, split: int, steps: int,
             selects: Sequence[str] = ("noisy",)) -> dict[str, dict[str, Any]]:
    """One CLI run in-process, summarised on the test split, per ``robust.select`` rule
    (``{rule: cell}``; a non-robust method has the one rule ``noisy``). The run itself uses
    the first rule; the others choose among the same snapshots afterwards
    (:func:`reselect`), as the library would have."""
    from omegaconf import OmegaConf

    from benchmarks.reproduce.solved_by_default import compose
    from fairgames.train import run
    from fairgames.train.data import load_splits

    robust = method in ("dro", "dro_authors", "sa")
    selects = tuple(selects) if robust else ("noisy",)
    extra = [f"robust.select={selects[0]}"] if robust and selects[0] != "noisy" else []
    cfg = compose([*overrides(data, method, noise, split, steps), *extra])
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = run(cfg, Path(tmp) / "run")
        seconds = time.perf_counter() - started
    splits = load_splits(OmegaConf.to_container(cfg.data, resolve=True), split)
    models = {selects[0]: (result.recommended, result.results["training"]["best_iterate"]
                           ["step"])}
    if len(selects) > 1:
        chosen = reselect(result, splits, DATASETS[data].protected, split, selects)
        if chosen[selects[0]][1] != models[selects[0]][1]:
            raise RuntimeError(f"reselect's {selects[0]} step {chosen[selects[0]][1]} is not "
                               f"the run's {models[selects[0]][1]}")
        models.update({k: v for k, v in chosen.items() if k != selects[0]})
    block = result.results.get("robust")
    return {rule: {**summarise(data, method, noise, split, steps, splits, model, seconds),
                   "select": rule, "best_step": step,
                   **({} if block is None or rule != selects[0] else robust_cell(block))}
            for rule, (model, step) in models.items()}


def parse_tune(text: str) -> dict[str, list[float]]:
    """``--tune``'s grid: ``name=f,f,...`` per step size, ``;``-separated (multiples of the
    cell's own step, as ``trainer.tune_grid``).

    Example:
        >>> parse_tune("robust_lr=0.1,1,10;multiplier_lr=0.5,1")
        {'robust_lr': [0.1, 1.0, 10.0], 'multiplier_lr': [0.5, 1.0]}
    """
    out = {}
    for part in filter(None, text.split(";")):
        name, _, factors = part.partition("=")
        out[name.strip()] = [float(f) for f in factors.split(",")]
    return out


def tuned_cell(data: str, method: str, noise: float | None, split: int, steps: int,
               tune_grid: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Paper 004's hyper-parameter grid (§2.7, Table 1) for one cell: every combination of
    ``tune_grid`` run in-process, one job chosen by the library's tuned-run rule
    (:func:`fairgames.train.sweeps.tune.choose`: among the jobs meeting the constraints on train,
    the lowest validation error among those meeting them on validation, the noisy-group
    constraints for naive / DRO / SA, as the runs' own best iterate). Test never chooses."""
    import itertools

    from omegaconf import OmegaConf

    from benchmarks.reproduce.solved_by_default import compose
    from fairgames.train import run
    from fairgames.train.config import tune_step_keys
    from fairgames.train.data import load_splits
    from fairgames.train.sweeps.tune import candidate_metrics, choose, grid

    base = overrides(data, method, noise, split, steps)
    wanted = {k: v for k, v in tune_grid.items()
              if k != "robust_lr" or method in ("dro", "dro_authors", "sa")}
    if method == "unconstrained":
        wanted.pop("multiplier_lr", None)
    full = {name: wanted.get(name, [1.0]) for name in tune_step_keys()}      # [1]: not swept
    spec = ",".join(f"{k}:[{','.join(map(str, v))}]" for k, v in full.items())
    values = grid(compose([*base, f"trainer.tune_grid={{{spec}}}"]))
    rows, kept = [], []
    for combo in itertools.product(*values.values()):      # one empty combo: nothing swept
        settings = dict(zip(values, combo, strict=True))
        cfg = compose([*base, *(f"{k}={v!r}" for k, v in settings.items())])
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            result = run(cfg, Path(tmp) / "run")
            seconds = time.perf_counter() - started
        rows.append({"settings": settings, "seconds": seconds,
                     **candidate_metrics(result.results)})
        kept.append((result.recommended, result.results["training"]["best_iterate"]["step"],
                     result.results.get("robust")))
    pick, reason = choose(rows)
    splits = load_splits(OmegaConf.to_container(cfg.data, resolve=True), split)
    model, step, block = kept[pick]
    seconds = sum(r["seconds"] for r in rows)
    for i, r in enumerate(rows):
        r["chosen"] = i == pick
        del r["validation_violations"]
    return {"noisy": {**summarise(data, method, noise, split, steps, splits, model, seconds),
                      "select": "noisy", "best_step": step,
                      **({} if block is None else robust_cell(block)),
                      "tune": {"grid": values, "chosen": rows[pick]["settings"],
                               "reason": reason, "candidates": rows}}}


def robust_cell(block: dict[str, Any]) -> dict[str, Any]:
    """The library's robust values of the run's recommended model on test."""
    t = block["splits"]["test"]
    return {"library_error": t["error"], "robust_max": t["robust_max"],
            "soft_max": t.get("soft_max")}


def summarise(data: str, method: str, noise: float | None, split: int, steps: int,
              splits: Any, model: Any, seconds: float) -> dict[str, Any]:
    """Error and per-group true / noisy violations of ``model`` on the test split."""
    from fairgames.data import true_attribute

    d = DATASETS[data]
    test = splits.test
    true = true_attribute(d.protected)
    codes = test.groups.get(true, test.groups[d.protected])
    with torch.no_grad():
        pred = (model(test.features).reshape(-1) > 0).numpy().astype(float)
    y = test.labels.numpy()
    return {"data": data, "method": method, "noise": noise, "split": split, "steps": steps,
            "rows": split_rows(splits), "seconds": seconds, "error": float((pred != y).mean()),
            "true": group_violations(pred, y, codes.numpy(), test.group_names[d.protected], d),
            "noisy": group_violations(pred, y, test.groups[d.protected].numpy(),
                                      test.group_names[d.protected], d)}


def reselect(result: Any, splits: Any, protected: str, seed: int, selects: Sequence[str]
             ) -> dict[str, tuple[Any, int]]:
    """``{rule: (member, step)}``: the best iterate each ``robust.select`` rule picks among
    the run's snapshots on train, by the library's own pieces (the candidates' noisy rows,
    :class:`~fairgames.noisy_groups.select.RobustSelector`, ``best_iterate``)."""
    from fairgames.game.solutions import best_iterate
    from fairgames.noisy_groups.noise_model import noise_model
    from fairgames.noisy_groups.select import RobustSelector, played_steps
    from fairgames.train.data import predict_scores
    from fairgames.train.evaluation import SolutionEvaluator
    from fairgames.train.results.solutions import candidate_values

    mixture = result.extras["solutions"]["stochastic"]     # the uniform mixture: every snapshot
    problem = result.engine.copt.problem
    train = splits.train
    evaluator = SolutionEvaluator(problem.objective, list(problem.constraints.values()),
                                  protected)
    scores = predict_scores(mixture, train.features, 8192)
    objectives, rows = candidate_values(evaluator, train, scores, None)
    gamma = [result.results["robust"]["gamma"][n] for n in train.group_names[protected]]
    b = noise_model(train, protected)
    played = played_steps(result.engine, result.engine.copt)      # select=played runs only
    out = {}
    for rule in selects:
        r = rows if rule == "noisy" else RobustSelector(
            rule, problem, protected, gamma, b, 20, seed, played).rows(
                evaluator, train, scores, rows, list(mixture.steps))
        best = best_iterate(objectives, r)
        out[rule] = (mixture.member(best), int(mixture.steps[best]))
    return out


def split_rows(splits: Any) -> dict[str, int]:
    """The rows of each split: a cell's record of the protocol it ran under."""
    return {name: len(getattr(splits, name)) for name in ("train", "validation", "test")}


@functools.cache
def expected_rows(data: str, split: int) -> dict[str, int]:
    """The split sizes this script's overrides give (the noise leaves them alone)."""
    from omegaconf import OmegaConf

    from benchmarks.reproduce.solved_by_default import compose
    from fairgames.train.data import load_splits

    cfg = compose(overrides(data, "unconstrained", None, split, 1))
    return split_rows(load_splits(OmegaConf.to_container(cfg.data, resolve=True), split))


def stored_cell(store: CellStore, key: str, data: str, split: int) -> dict[str, Any]:
    """A saved cell, refused (naming where it is) when it ran on other splits than these
    overrides make (cells from before the split was pinned record no rows; Adult's ran on the
    official split)."""
    cell = store.get(key)
    if cell is None:
        raise SystemExit(f"{store.directory}: no cell {key} (its job failed: see the log)")
    want = expected_rows(data, split)
    if cell.get("rows") != want:
        raise SystemExit(f"{store.where(key)}: made on splits of "
                         f"{cell.get('rows', 'unrecorded')} rows, not this protocol's {want}; "
                         "move the archive (or pending file) away to rerun the cell")
    return cell


def aggregate(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Footnote 3: the group with the largest mean violation; mean, sd (ddof=1) and se."""
    def stats(values: Sequence[float]) -> tuple[float, float, float]:
        a = np.asarray(values, dtype=float)
        sd = float(a.std(ddof=1)) if len(a) > 1 else math.nan
        return float(a.mean()), sd, sd / math.sqrt(len(a)) if len(a) > 1 else math.nan

    groups = list(cells[0]["true"])
    worst = max(groups, key=lambda j: np.mean([c["true"][j] for c in cells]))
    noisy = max(groups, key=lambda j: np.mean([c["noisy"][j] for c in cells]))
    out = {"n": len(cells), "group": worst,
           "error": stats([c["error"] for c in cells]),
           "true_violation": stats([c["true"][worst] for c in cells]),
           "noisy_violation": stats([c["noisy"][noisy] for c in cells])}
    for key in ("robust_max", "soft_max"):
        found = [c[key] for c in cells if c.get(key) is not None]
        out[key] = stats(found) if found else None
    return out


def plan(quick: bool, only: Sequence[str] | None, splits: int | None = None,
         noises: Sequence[float] | None = None, methods: Sequence[str] | None = None
         ) -> list[tuple[str, str, float | None, int]]:
    """Every cell: (data, method, noise, split); ``splits`` / ``noises`` / ``methods``
    override the run's."""
    splits = range(splits or (1 if quick else 10))
    noises = noises or ((0.1, 0.4) if quick else NOISE)
    out = []
    for data in only or DATASETS:
        for s in splits:
            out += [(data, m, None, s) for m in ("unconstrained", "true_group")]
            out += [(data, m, n, s) for n in noises for m in ROBUST]
    return [c for c in out if methods is None or c[1] in methods]


def meets(violation: Sequence[float]) -> bool:
    """The true-group constraint met: the mean violation ≤ 0 + one SE (``(mean, sd, se)``;
    a single split, no SE: ≤ 0)."""
    mean, _, se = violation
    return mean <= (0 if math.isnan(se) else se)


def passes(row: dict[str, Any]) -> bool | None:
    """The issue's goal for one row: a DRO / SA cell meets the true-group constraint (mean ≤ 0
    + one SE) with error at or below the paper's; a baseline is within 0.005 of its error;
    ``None`` for a row the paper has no number for (naive).

    Example:
        >>> ours = {"error": (0.15, 0.0, 0.001), "true_violation": (0.001, 0.0, 0.002)}
        >>> passes({"data": "adult", "method": "dro", "noise": 0.1, "ours": ours})
        True
    """
    p = PAPER.get((row["data"], row["method"], row["noise"]))
    if p is None:
        return None
    e = row["ours"]["error"]
    if row["noise"] is None:
        return abs(e[0] - p[0]) <= 0.005
    return e[0] <= p[0] and meets(row["ours"]["true_violation"])


def goal_counts(summary: dict[str, Any]) -> dict[str, str]:
    """Per DRO variant, how many of the DRO / SA cells run pass (the paper has 20), and how
    many baselines are within 0.005."""
    rows = summary["rows"]
    out = {}
    for dro in ("dro", "dro_authors"):
        ran = [passes(r) for r in rows if r["method"] in (dro, "sa")]
        out[f"{dro} + sa"] = f"{sum(ran)} of {len(ran)} run (paper: 20)"
    base = [passes(r) for r in rows if r["noise"] is None]
    out["baselines within 0.005"] = f"{sum(base)} of {len(base)}"
    return out


def markdown(summary: dict[str, Any]) -> str:
    """Ours beside the paper's, per data set, method and noise."""
    def f(x: Any) -> str:
        return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"

    lines = ["| data | method | noise | n | error ± sd (se) | paper error ± | max true-G "
             "violation ± sd (se) [group] | paper viol. ± | noisy-G viol. | TV worst | SA worst "
             "| meets (≤ 0 + se) | error ≤ paper |", "|" + "---|" * 13]
    for row in summary["rows"]:
        a, p = row["ours"], PAPER.get((row["data"], row["method"], row["noise"]))
        e, v = a["error"], a["true_violation"]
        lines.append(
            f"| {row['data']} | {row['method']} | {row['noise'] or '–'} | {a['n']} | "
            f"{f(e[0])} ± {f(e[1])} ({f(e[2])}) | "
            f"{'–' if p is None else f'{p[0]:.4f} ± {p[1]:.4f}'} | "
            f"{f(v[0])} ± {f(v[1])} ({f(v[2])}) [{a['group']}] | "
            f"{'–' if p is None else f'{p[2]:.4f} ± {p[3]:.4f}'} | "
            f"{f(a['noisy_violation'][0])} | "
            f"{f(a['robust_max'][0] if a['robust_max'] else None)} | "
            f"{f(a['soft_max'][0] if a['soft_max'] else None)} | {'yes' if meets(v) else 'no'} | "
            f"{'–' if p is None else ('yes' if e[0] <= p[0] else 'no')} |")
    lines += ["", "Goal cells passing: " + "; ".join(f"{k}: {v}" for k, v in
                                                   goal_counts(summary).items())]
    return "\n".join(lines) + "\n"


def figure(summary: dict[str, Any], path: Path) -> None:
    """True-group violation vs noise, per method (the paper's Figures 1–2 left)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datas = sorted({r["data"] for r in summary["rows"]})
    fig, axes = plt.subplots(1, len(datas), figsize=(5 * len(datas), 3.5), squeeze=False)
    for ax, data in zip(axes[0], datas, strict=True):
        for method in ROBUST:
            rows = sorted((r for r in summary["rows"] if r["data"] == data
                           and r["method"] == method), key=lambda r: r["noise"])
            ax.errorbar([r["noise"] for r in rows],
                        [r["ours"]["true_violation"][0] for r in rows],
                        yerr=[np.nan_to_num(r["ours"]["true_violation"][2]) for r in rows],
                        marker="o", label=method, capsize=3)
        ax.axhline(0, color="k", lw=0.8)
        ax.set(title=data, xlabel="noise γ", ylabel="max true-group violation (test)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary_of(result: dict[str, Any], path: Path) -> str:
    """The summary of a committed ``reproduce_004*.json``: :func:`markdown` of it (``path``:
    unused, the report's signature)."""
    return markdown(result)


def main(argv: Sequence[str] | None = None) -> None:
    from fairgames.train.sweeps.launch import add_launcher_arguments

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="data sets, comma-separated (adult,credit)")
    parser.add_argument("--steps", type=int, default=750, help="game steps per run (750)")
    parser.add_argument("--splits", type=int, help="number of splits (10; --quick 1)")
    parser.add_argument("--noise", help="noise levels, comma-separated (0.1,...,0.5; --quick "
                        "0.1,0.4)")
    parser.add_argument("--tag", help="results name (reproduce_004[.quick])")
    parser.add_argument("--methods", help=f"methods, comma-separated ({','.join(METHODS)})")
    parser.add_argument("--tune", help="paper 004's grid (§2.7) per cell, e.g. 'lr=0.1,1,10;"
                        "multiplier_lr=0.5,1,2,4;robust_lr=0.1,1,10' (multiples of the cell's "
                        "steps; robust_lr only for DRO / SA): every combination is run and "
                        "one chosen on validation (fairgames.train.sweeps.tune.choose)")
    parser.add_argument("--select", help="robust.select rules, comma-separated (noisy, tv, "
                        "tv_sampled, soft): the DRO / SA runs use the first, the others choose "
                        "among the same snapshots; each rule its own results "
                        "<tag>.select-<rule> (default: noisy, the results <tag>)")
    add_launcher_arguments(parser)
    args = parser.parse_args(argv)
    tag = args.tag or "reproduce_004" + (".quick" if args.quick else "")
    selects = tuple(args.select.split(",")) if args.select else ("noisy",)
    if "played" in selects[1:]:
        parser.error("--select: played must come first (the run records the adversary's p̃)")
    tune_grid = parse_tune(args.tune) if args.tune else None
    if tune_grid and args.select:
        parser.error("--tune chooses among runs by the noisy rule; leave --select out")
    tags = ({"noisy": tag} if not args.select else
            {rule: f"{tag}.select-{rule}" for rule in selects})
    noises = tuple(float(x) for x in args.noise.split(",")) if args.noise else None
    only = args.only.split(",") if args.only else None
    methods = args.methods.split(",") if args.methods else None
    stores = {rule: CellStore(RESULTS / f"{tags[rule]}.cells") for rule in selects}
    order = []
    with contextlib.ExitStack() as packing:
        for store in stores.values():
            packing.enter_context(store.packing())
        todo = []
        for data, method, noise, split in plan(args.quick, only, args.splits, noises, methods):
            key = f"{data}_{method}_{noise or 0}_{split}"
            order.append((data, split, key))
            # the rules' stores that lack the cell (an archived record is never written
            # again: a second, different record of a key — its seconds differ — is refused)
            lacking = {r: str(s.directory) for r, s in stores.items() if key not in s}
            if lacking:
                todo.append({"data": data, "method": method, "noise": noise, "split": split,
                             "steps": args.steps, "selects": list(selects),
                             "tune": tune_grid, "key": key, "stores": lacking})
        run_jobs(todo, args.launcher, args.jobs, args.launcher_override,
                 RESULTS / f"{tag}.launch")
    for rule, store in stores.items():
        write_summary([stored_cell(store, key, data, split) for data, split, key in order],
                      args.steps, tags[rule])


def save_cell(job: dict[str, Any]) -> list[str]:
    """Run one cell (:func:`tuned_cell` or :func:`run_cell`) and save its record per rule as a
    pending cell of that rule's store (``job["stores"]``); returns the status lines. A
    launcher job (:func:`run_jobs`) too."""
    args = (job["data"], job["method"], job["noise"], job["split"], job["steps"])
    made = (tuned_cell(*args, job["tune"]) if job["tune"]
            else run_cell(*args, tuple(job["selects"])))
    lines = []
    for rule, store in job["stores"].items():
        cell = made.get(rule, made["noisy"] if "noisy" in made else next(iter(made.values())))
        write_pending(store, job["key"], cell)
        lines.append(f"{job['data']} {job['method']} noise={job['noise']} split={job['split']} "
                     f"select={rule}: error {cell['error']:.4f}, true max "
                     f"{max(cell['true'].values()):.4f} ({cell['seconds']:.0f} s)")
    return lines


def run_jobs(todo: Sequence[dict[str, Any]], launcher: str, jobs: int,
             launcher_overrides: Sequence[str], work_dir: Path) -> None:
    """The cells not yet saved, in this process (``inline``) or as jobs of a Hydra launcher
    (:mod:`fairgames.train.sweeps.launch`, its sweep under ``work_dir``), each job saving its own
    cell: a killed run keeps the cells it finished."""
    if not todo:
        return
    if launcher == "inline":
        for job in todo:
            print("\n".join(save_cell(job)), flush=True)
        return
    from fairgames.train.sweeps.launch import launch

    print(f"running {len(todo)} cell(s) on the {launcher} launcher, {jobs} at a time",
          flush=True)
    task = launch_task("benchmarks.reproduce.reproduce_004", "save_cell")
    for lines in launch(task, list(todo), work_dir, launcher, jobs, launcher_overrides):
        print("\n".join(lines), flush=True)


def write_summary(cells: Sequence[dict[str, Any]], steps: int, tag: str) -> None:
    """``<tag>.{json,md,png}`` from the cells, and the table printed."""
    keys = sorted({(c["data"], c["method"], c["noise"]) for c in cells},
                  key=lambda k: (k[0], METHODS.index(k[1]), k[2] or 0))
    summary = {"steps": steps, "rows": [
        {"data": d, "method": m, "noise": n,
         "ours": aggregate([c for c in cells if (c["data"], c["method"], c["noise"]) == (d, m, n)])}
        for d, m, n in keys]}
    write(RESULTS / f"{tag}.json", summary, markdown=markdown(summary), indent=1, newline=True)
    figure(summary, RESULTS / f"{tag}.png")
    print(f"## {tag}\n" + markdown(summary))


if __name__ == "__main__":
    main()
