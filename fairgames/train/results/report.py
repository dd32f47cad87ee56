"""A run's outputs: ``results.json`` (checked against the shipped JSON Schema), ``report.md``
(tables a person can read) and ``dynamics.png`` (objective, violations and multipliers over
the logged steps).

``results.json`` is shaped ``{schema_version, config, env, solutions: {recommended | final |
best_iterate | stochastic: {train | validation | test: {label_kind, objective, error,
constraints: {name: {value, violation, interval}}, groups: {"sex=Female": {rate: value}}}}},
training: {steps, multipliers, slacks, likely_infeasible, recommended: {solution, reason, ...},
...}, verdict: {solution, resamples, constraints: {name: {status, verdict, train, test, values,
intervals}}}}``;
``fairgames/train/results/results.schema.json`` is its schema. A real-valued target (``label_kind:
"real"``) has ``mse`` and ``mae`` instead of ``error``, and per-group losses
(:data:`TABLE_LOSSES`) instead of rates.

Example:
    >>> schema = load_schema()
    >>> schema["required"]
    ['schema_version', 'config', 'env', 'solutions', 'training', 'verdict']
"""

from __future__ import annotations

import functools
import json
import math
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..files import save_figure, write_json  # noqa: F401  (write_json: its old home)
from .group_tables import CONSTRAINTS_FILE, GROUPS_FILE, NOT_SUMMARISED, group_frame, summary

SCHEMA_VERSION = 3     # the history of its changes: CHANGELOG.md
# The recommended solution (the one to deploy) first, then the run's three others.
SOLUTIONS = ("recommended", "final", "best_iterate", "stochastic")
SPLITS = ("train", "validation", "test")
TABLE_RATES = ("share", "base_rate", "positive_rate", "tpr", "fpr", "error", "precision",
               "fmeasure", "kld")
TABLE_LOSSES = ("share", "mean_label", "mean_prediction", "mse", "mae")
# A solution's headline metrics and per-group columns, by label kind.
HEADLINE = {"binary": ("error",), "real": ("mse", "mae")}
# ... followed by a problem on predictions in [0, 1]'s statistical parity (paper 003).
DISPARITIES = ("ks_disparity", "grid_disparity")
TABLE_COLUMNS = {"binary": TABLE_RATES, "real": TABLE_LOSSES}


def load_schema() -> dict[str, Any]:
    """The JSON Schema of ``results.json`` shipped with the package."""
    text = resources.files("fairgames.train.results").joinpath("results.schema.json").read_text()
    return json.loads(text)


def validate_results(results: Mapping[str, Any]) -> None:
    """Check ``results`` against the shipped schema and the blocks registered extensions
    declare (:func:`fairgames.train.method.results_schemas`); ``jsonschema.ValidationError``
    if it fails: the error ``jsonschema.validate`` gives.

    Example:
        >>> validate_results({"schema_version": SCHEMA_VERSION})
        Traceback (most recent call last):
        ...
        jsonschema.exceptions.ValidationError: 'config' is a required property
        ...
    """
    import jsonschema

    schema, fast = _validators(_declared_blocks())
    if not fast.is_valid(results):
        # the error (and its path) as reported against the shipped schema itself
        raise jsonschema.exceptions.best_match(schema.iter_errors(results))


def check_section(name: str, value: Any) -> None:
    """Check one top-level section of ``results.json`` (e.g. ``training``) against its part of
    the schema (``jsonschema.ValidationError`` if it fails).

    Example:
        >>> check_section("training", {"steps": -1})
        Traceback (most recent call last):
        ...
        jsonschema.exceptions.ValidationError: 'multipliers' is a required property
        ...
    """
    import jsonschema

    schema, fast = _section_validators(name, _declared_blocks())
    if not fast.is_valid(value):
        raise jsonschema.exceptions.best_match(schema.iter_errors(value))


@functools.cache
def _section_validators(name: str, blocks: str) -> tuple[Any, Any]:
    """:func:`_validators` for one top-level section."""
    whole, _ = _validators(blocks)
    defs = whole.schema["$defs"]
    part = whole.schema["properties"][name]
    return (whole.evolve(schema={"$defs": defs, **part}),
            whole.evolve(schema=_inline_refs(part, defs, ())))


def _declared_blocks() -> str:
    """The registered extensions' blocks, as a hashable key of the validators' cache."""
    from fairgames.train.registry import results_schemas

    return json.dumps(results_schemas(), sort_keys=True)


@functools.cache
def _validators(blocks: str = "{}") -> tuple[Any, Any]:
    """The schema's validator (the shipped one, with the registered extensions' ``blocks``
    as optional top-level properties) and one of the same schema with its references
    inlined, both built (and the schema checked) once: a run with ~1 000 groups writes
    ~10⁵ numbers, and resolving a reference at each costs half of the check."""
    import jsonschema

    schema = load_schema()
    schema["properties"].update(json.loads(blocks))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema), cls(_inline_refs(schema, schema["$defs"], ()))


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """``node`` with each ``{"$ref": "#/$defs/<name>", ...}`` replaced by that definition
    (its own keys beside the reference are annotations, kept). The same set of valid
    documents: the shipped schema has no recursive reference."""
    if isinstance(node, list):
        return [_inline_refs(x, defs, seen) for x in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if ref is None:
        return {k: _inline_refs(x, defs, seen) for k, x in node.items()}
    name = ref.removeprefix("#/$defs/")
    if name == ref or name in seen or name not in defs:
        raise ValueError(f"results.schema.json: cannot inline the reference {ref!r}")
    target = _inline_refs(defs[name], defs, (*seen, name))
    rest = {k: _inline_refs(x, defs, seen) for k, x in node.items() if k != "$ref"}
    if set(rest) & set(target) - {"description"}:
        raise ValueError(f"results.schema.json: {ref!r} has sibling keys {sorted(rest)}")
    return {**target, **rest}


def environment(device: torch.device) -> dict[str, Any]:
    """Versions, device, threads, git commit and time of a run."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairgames": _fairgames_version(),
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "git": _git_commit(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }


@functools.cache
def _fairgames_version() -> str:
    """The installed distribution's version, read once a process (a metadata scan)."""
    try:
        from importlib.metadata import version

        return version("fairgames")
    except Exception:  # pragma: no cover - not installed (a source checkout)
        return "unknown"


@functools.cache
def _git_commit() -> str | None:
    """The checkout's commit, read once a process (a ``git`` subprocess: milliseconds a run
    otherwise; the code a process runs is the one it imported)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def clean_numbers(obj: Any) -> Any:
    """NaN / inf → ``None`` (JSON has no NaN), recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): clean_numbers(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean_numbers(v) for v in obj]
    return obj


def largest_violation(metrics: Mapping[str, Any]) -> float | None:
    """The largest constraint violation of a solution on a split (``results.json``'s form, or
    :meth:`~fairgames.train.SolutionEvaluator.evaluate`'s); ``None`` when a constraint is
    undefined there (``None`` or NaN: a subset with no row on the split), 0 without
    constraints.

    Example:
        >>> largest_violation({"constraints": {"a": {"violation": 0.0}, "b": {"violation": 0.2}}})
        0.2
        >>> largest_violation({"constraints": {"a": {"violation": None}}}) is None
        True
    """
    violations = [c["violation"] for c in metrics["constraints"].values()]
    if any(v is None or v != v for v in violations):
        return None
    return max(violations, default=0.0)


# --------------------------------------------------------------------------- report.md
def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:      # null in results.json: undefined (an empty subset, a 0 denominator)
        return "undefined"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def render_report(results: Mapping[str, Any], statements: Mapping[str, Any],
                  plots: Sequence[str] = ()) -> str:
    """``report.md``: the problem, a summary per solution and split, constraints, per-group
    rates on the test split, the game's final state, and the run's ``plots`` (file names in
    the run directory) shown where a Markdown viewer renders images."""
    cfg = results["config"]
    out = [f"# fairgames run: {statements.get('name', 'problem')} on "
           f"{cfg.get('data', {}).get('name', 'data')}", ""]
    if statements.get("description"):
        out += [statements["description"], ""]
    out += _problem_section(cfg, results["training"], statements)
    if results.get("verdict"):
        out += verdict_section(results["verdict"])
    out += _solutions_section(results["training"], results["solutions"])
    if results.get("sources"):      # data=sources: per-source rows and rates
        from .sources import sources_section

        out += sources_section(results["sources"])
    out += _game_section(results["training"])
    if plots:
        out += ["## Plots", ""]
        for name in plots:
            out += [f"![{name}]({name})", ""]
        out += ["What each plot shows: docs/training.md, \"Outputs (the run directory)\".", ""]
    return "\n".join(out)


def _problem_section(cfg: Mapping[str, Any], tr: Mapping[str, Any],
                     statements: Mapping[str, Any]) -> list[str]:
    """The problem's objective, constraints, tolerance, values, group and algorithm."""
    out = ["## Problem", "", f"- objective (minimised): `{statements['objective']}`"]
    for name, text in statements.get("constraints", {}).items():
        out.append(f"- constraint `{name}`: `{text}`")
    if statements.get("tolerance") is not None:
        out.append(f"- tolerance: {statements['tolerance']} ({statements.get('tolerance_kind')})")
    for k, v in (statements.get("values") or {}).items():
        out.append(f"- `{k}` = {_fmt(v)}")
    return out + [f"- protected attribute: `{cfg.get('data', {}).get('protected')}`",
                  f"- algorithm: `{tr.get('preset')}`, {tr['steps']} steps", ""]


def _solutions_section(tr: Mapping[str, Any], sol: Mapping[str, Any]) -> list[str]:
    """The summary table (every solution and split), the test constraints with intervals and
    the per-group tables."""
    out = ["## Summary", ""]
    if "recommended" in tr:
        rec = tr["recommended"]
        out += [f"**Recommended** (the solution to deploy, `recommended.pt`): "
                f"{rec['solution']} — {rec['reason']}.", ""]
    out += ["Constraint values are `g` in `g <= 0`: positive means violated.", ""]
    kind = sol["final"]["test"].get("label_kind", "binary")
    headline = HEADLINE[kind] + tuple(k for k in DISPARITIES if k in sol["final"]["test"])
    solutions = [s for s in SOLUTIONS if s in sol]    # results written before `recommended`
    rows = []
    for s in solutions:
        for split in SPLITS:
            m = sol[s][split]
            # undefined (None: a subset with no row on the split) reads "undefined", never 0
            rows.append([s, split, m["objective"], *(m[k] for k in headline),
                         largest_violation(m)])
    out += [_table(["solution", "split", "objective", *headline, "max violation"], rows), ""]
    names = list(sol["final"]["test"]["constraints"])
    if names:
        out += ["## Constraints (test split)", ""]
        rows = [[n] + [_with_interval(sol[s]["test"]["constraints"][n]) for s in solutions]
                for n in names]
        out += ["`g` [95 % bootstrap interval].", "", _table(["constraint", *solutions], rows),
                ""]
    return out + _groups_section(sol, solutions, kind)


def _groups_section(sol: Mapping[str, Any], solutions: Sequence[str], kind: str) -> list[str]:
    """Per solution, the test split's per-group rates (or losses) with their summary rows."""
    columns = TABLE_COLUMNS[kind]
    out: list[str] = []
    for s in solutions:
        groups = sol[s]["test"]["groups"]
        title = "rates" if kind == "binary" else "losses"
        out += [f"## Per-group {title}: {s}, test split", ""]
        rows = [[g, _count(rates.get("count"))] + [rates.get(r) for r in columns]
                for g, rates in groups.items()]
        out += [_table(["group", "count", *columns], rows + _summary_rows(groups, columns)), ""]
    return out + [f"Difference: max − min over the groups; ratio: min / max (as fairlearn's "
                  f"MetricFrame). Every solution and split: `{GROUPS_FILE}`; constraints with "
                  f"intervals: `{CONSTRAINTS_FILE}`.", ""]


def _game_section(tr: Mapping[str, Any]) -> list[str]:
    """The game's final state: feasibility monitor, recommendation, best iterate, mixture and
    the multipliers."""
    out = ["## Game", "", f"- likely infeasible: {_fmt(tr['likely_infeasible'])}"]
    if "recommended" in tr:
        rec = tr["recommended"]
        out.append(f"- recommended: {rec['solution']} (rule {rec['rule']}, chosen on "
                   f"{rec['split'] or 'no split'}), steps {rec['steps'] or '(final)'}")
    if "best_iterate" in tr:
        out.append(f"- best iterate: step {tr['best_iterate']['step']} (chosen on "
                   f"{tr['best_iterate']['split']})")
    if "stochastic" in tr:
        out.append(f"- stochastic model: {tr['stochastic']['kind']} mixture of "
                   f"{len(tr['stochastic']['steps'])} snapshots")
    if tr["multipliers"]:
        out += ["", _table(["multiplier row", "λ"], list(tr["multipliers"].items()))]
    out.append("")
    return out


def _summary_rows(groups: Mapping[str, Any], columns: Sequence[str]) -> list[list[Any]]:
    """The between-group ``difference`` and ``ratio`` rows of a per-group table (``None``
    where undefined; ``share`` not summarised)."""
    table = summary(group_frame(groups))
    return [[name, "–"] + ["–" if c in NOT_SUMMARISED else None
                           if c not in table or math.isnan(table.loc[name, c])
                           else float(table.loc[name, c]) for c in columns]
            for name in table.index]


def _count(v: float | None) -> float | int | None:
    """A group's count as an integer when it is one (soft groups' counts are fractional)."""
    return int(v) if v is not None and float(v).is_integer() else v


def _with_interval(entry: Mapping[str, Any]) -> str:
    """``g`` and, when there is one, its interval: ``0.0123 [-0.0040, 0.0290]``."""
    text = _fmt(entry.get("value"))
    interval = entry.get("interval")
    if interval is not None:
        text += f" [{interval[0]:.4f}, {interval[1]:.4f}]"
    return text


def verdict_section(verdict: Mapping[str, Any]) -> list[str]:
    """``report.md``'s "Verdict": per constraint, the verdict in words, ``g`` on train and
    ``g`` with its 95 % bootstrap interval on validation and test."""
    n = verdict.get("resamples") or 0
    out = ["## Verdict", "",
           f"Solution: {verdict['solution']}. A constraint is **met** when its train and test "
           "violations are at most 1e-6; met on train and violated on test, it is *not "
           "significant* when the test interval reaches 0 or below (a miss within sampling "
           "noise) and *NOT met on test* otherwise; intervals are 95 % percentile bootstrap "
           "intervals "
           + (f"({n} resamples, stratified by group × label)." if n
              else "(none: trainer.bootstrap=0; any test violation is NOT met on test)."),
           ""]
    rows = [[name, v["verdict"], _fmt(v["values"]["train"]),
             _with_interval({"value": v["values"]["validation"],
                             "interval": v["intervals"]["validation"]}),
             _with_interval({"value": v["values"]["test"], "interval": v["intervals"]["test"]})]
            for name, v in verdict["constraints"].items()]
    if not rows:
        return out + ["The problem has no constraint.", ""]
    return out + [_table(["constraint", "verdict", "train g", "validation g", "test g"], rows),
                  ""]


# --------------------------------------------------------------------------- dynamics.png
SMOOTH_MIN_POINTS = 5     # fewer logged points than this: nothing to smooth


def smoothed(values: Sequence[float], window: int | None = None) -> list[float]:
    """A centred moving average of the finite ``values`` (non-finite ones are skipped, and
    stay NaN); ``window`` defaults to about a tenth of the points (odd, at least 3).

    Example:
        >>> smoothed([0.0, 3.0, 0.0, 3.0, float("inf")], window=3)
        [1.5, 1.0, 2.0, 1.5, nan]
    """
    n = len(values)
    window = window or max(3, (n // 10) | 1)
    half = window // 2
    out = []
    for i in range(n):
        if not math.isfinite(values[i]):
            out.append(math.nan)
            continue
        near = [v for v in values[max(0, i - half):i + half + 1] if math.isfinite(v)]
        out.append(sum(near) / len(near))
    return out


# Line styles and markers cycled over a panel's series, so that two series with equal values
# (parity rates of two groups, a bound met exactly) stay distinguishable where they overlap.
SERIES_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "v"), ((0, (5, 1, 1, 1)), "D"),
                 ((0, (1, 2)), "P"))
VALIDATION = "validation/"     # the log-time scalars of the whole validation split


def series_style(i: int, points: int) -> dict[str, Any]:
    """The ``i``-th series' line style and sparse markers (offset per series, so that
    markers of overlapping lines alternate rather than cover one another).

    Example:
        >>> series_style(1, 40)["ls"], series_style(1, 40)["markevery"]
        ('--', (1, 5))
    """
    ls, marker = SERIES_STYLES[i % len(SERIES_STYLES)]
    every = max(1, points // 8)
    return {"ls": ls, "marker": marker, "markevery": (i % every, every), "ms": 4}


def _curve(ax: Any, steps: Sequence[int], values: Sequence[float | None], label: str,
           smooth: bool, **style: Any) -> Any:
    """One series: raw (faint when smoothed) with its moving average, and every non-finite
    value (None, NaN, ±inf) marked with an ``x`` at the top of the axes. Returns its colour."""
    v = [math.nan if x is None else float(x) for x in values]
    finite = [x if math.isfinite(x) else math.nan for x in v]
    if smooth and len(v) >= SMOOTH_MIN_POINTS:
        faint = {k: x for k, x in style.items() if k not in ("marker", "markevery", "ms")}
        line = ax.plot(steps, finite, alpha=0.25, lw=0.8, **faint)[0]
        ax.plot(steps, smoothed(v), label=label, **{**style, "color": line.get_color()})
    else:
        line = ax.plot(steps, finite, label=label, **style)[0]
    bad = [s for s, x in zip(steps, v, strict=True) if not math.isfinite(x)]
    if bad:
        ax.plot(bad, [1.0] * len(bad), "x", color=line.get_color(), clip_on=False,
                transform=ax.get_xaxis_transform(), label=f"{label}: not finite")
    return line.get_color()


def _validation(history: Sequence[Mapping[str, Any]], key: str) -> list[float | None] | None:
    """The whole validation split's ``key`` per logged step (``trainer.validation_curves``),
    ``None`` when the run did not log it."""
    values = [h.get("extra", {}).get(VALIDATION + key) for h in history]
    return values if any(v is not None for v in values) else None


def dynamics_figure(history: Sequence[Mapping[str, Any]],
                    constraint_rows: Sequence[str] | None = None, max_lines: int = 12, *,
                    split: str = "train", minibatch: bool = False,
                    tolerance: float | None = None) -> Any:
    """The figure of :func:`plot_dynamics`: objective, constraint values and multipliers
    over the logged steps, the constraints titled with the ``split`` the game measured them
    on (the objective is θ's, on train); minibatch curves (``minibatch``) smoothed with the
    raw ones faint; the model on the whole validation split beside them where the run logged
    it (dash-dot, the constraint's colour); the bound ``g = 0`` drawn (with the problem's
    ``tolerance`` in its label); non-finite values marked ``x``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    batching = "minibatches" if minibatch else "full batch"
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), constrained_layout=True)
    ax = axes[0]
    _curve(ax, steps, [h["objective_true"] for h in history], "true", minibatch)
    sur = [h.get("objective_surrogate") for h in history]
    if any(v is not None for v in sur):
        _curve(ax, steps, sur, "surrogate", minibatch, ls="--")
    val = _validation(history, "objective")
    if val is not None:
        _curve(ax, steps, val, "validation (whole split)", False, ls="-.", color="tab:green")
    _axes(ax, f"objective (train, {batching})", "objective")
    ax = axes[1]
    names = list(history[0]["constraints"]) if history else []
    for i, n in enumerate(names[:max_lines]):
        color = _curve(ax, steps, [h["constraints"][n] for h in history], n, minibatch,
                       **series_style(i, len(steps)))
        val = _validation(history, f"constraint/{n}")
        if val is not None:
            _curve(ax, steps, val, f"{n} (validation)", False, color=color, ls="-.", lw=1.0)
    bound = "g = 0: the bound" + (f" (tolerance {tolerance:g} included)"
                                  if tolerance is not None else "")
    ax.axhline(0.0, color="k", lw=0.8, ls="--", label=bound)
    _axes(ax, f"constraint values g, violated when > 0 ({split}, {batching})",
          "constraint value g")
    ax = axes[2]
    rows = list(history[0]["multipliers"]) if history else []
    if constraint_rows is not None:
        rows = [r for r in rows if r in set(constraint_rows)] or rows
    for i, r in enumerate(rows[:max_lines]):
        _curve(ax, steps, [h["multipliers"][r] for h in history], r, False,
               **series_style(i, len(steps)))
    _curve(ax, steps, [h["objective_weight"] for h in history], "objective weight ω", False,
           color="k", ls=":")
    _axes(ax, "multipliers λ", "multiplier λ")
    return fig


def _axes(ax: Any, title: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")


def plot_dynamics(history: Sequence[Mapping[str, Any]], path: Path,
                  constraint_rows: Sequence[str] | None = None, max_lines: int = 12,
                  **options: Any) -> None:
    """Write :func:`dynamics_figure` (``options``: its ``split``, ``minibatch``,
    ``tolerance``) to ``path`` (matplotlib Agg)."""
    import matplotlib.pyplot as plt

    fig = dynamics_figure(history, constraint_rows, max_lines, **options)
    try:
        save_figure(fig, path, dpi=100)
    finally:
        plt.close(fig)
