"""Per-source results of a run on several data sets (``data=sources``, paper 001): for each
split and source, the rows, the positive prediction rate and — on a labeled source — the
error and base rate of the recommended solution's hard predictions (a mixture's: the
expected rates under its weights); ``results.json["sources"][name]["metrics"][split]`` and
a small table in ``report.md``.

Rates on an unlabeled source never read its labels (they are zeros).

Example:
    >>> from fairgames.data import combine_splits, make_synthetic
    >>> splits = combine_splits({"a": make_synthetic(n=100), "b": make_synthetic(n=50, seed=1)},
    ...                         unlabeled=["b"])
    >>> out = source_metrics(torch.nn.Linear(10, 1), splits, decision=0.0)
    >>> sorted(out["b"]["test"]), sorted(out["a"]["test"])
    (['ppr', 'rows'], ['base_rate', 'error', 'ppr', 'rows'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fairgames.data import DatasetSplits

from ..data import predict_scores
from ..hard_predictions import expected_prediction


@torch.no_grad()
def source_metrics(model: torch.nn.Module, splits: DatasetSplits, *, decision: float,
                   chunk: int = 65536) -> dict[str, dict[str, dict[str, Any]]]:
    """``{source: {split: {rows, ppr[, error, base_rate]}}}`` of ``model``'s predictions
    (``score > decision``; a :class:`~fairgames.game.solutions.StochasticModel`: its members'
    predictions averaged under its weights). A source without rows in a split has ``ppr``
    ``None`` there."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for part, ds in splits.items():
        if ds.sources is None or ds.source_names is None:
            return {}
        scores = predict_scores(model, ds.features, chunk)
        # P(ŷ = 1) per row: a mixture's under its weights (the evaluator's own columns)
        weights = getattr(model, "weights", None) if scores.dim() == 2 else None
        hard = expected_prediction(scores - decision, weights)
        if hard is None:
            raise ValueError("per-source metrics: the model's scores are not finite")
        for i, name in enumerate(ds.source_names):
            rows = ds.sources == i
            n = int(rows.sum())
            p, y = hard[rows].double(), ds.labels[rows].double()
            entry: dict[str, Any] = {"rows": n, "ppr": float(p.mean()) if n else None}
            if name not in ds.unlabeled:
                entry["error"] = float((p * (1 - y) + (1 - p) * y).mean()) if n else None
                entry["base_rate"] = float(y.mean()) if n else None
            out.setdefault(name, {})[part] = entry
    return out


def sources_section(sources: Mapping[str, Mapping[str, Any]],
                    splits: Sequence[str] = ("train", "test")) -> list[str]:
    """``report.md``'s "Sources" table: per source, its rows per step and, per split, its
    rows, positive prediction rate and (labeled) error.

    Example:
        >>> lines = sources_section({"d3": {"labeled": False, "batch_size": None, "metrics": {
        ...     "train": {"rows": 30, "ppr": 0.25}, "test": {"rows": 10, "ppr": 0.3}}}})
        >>> lines[4]
        '| d3 | no | all | 30 | 0.2500 | - | 10 | 0.3000 | - |'
    """
    header = ["source", "labeled", "rows per step"]
    for part in splits:
        header += [f"{part} rows", f"{part} ppr", f"{part} error"]
    lines = ["## Sources", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    for name, rec in sources.items():
        cells = [name, "yes" if rec.get("labeled") else "no",
                 "all" if rec.get("batch_size") is None else str(rec["batch_size"])]
        for part in splits:
            m = (rec.get("metrics") or {}).get(part) or {}
            cells += [str(m.get("rows", "-")), _fmt(m.get("ppr")), _fmt(m.get("error"))]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def source_lines(results: Mapping[str, Any]) -> list[str]:
    """The command line's line naming a run's sources (none without ``data=sources``):
    each with its rows per step and the recommended solution's test rates.

    Example:
        >>> source_lines({"sources": {"d1": {"labeled": True, "batch_size": 32, "metrics": {
        ...     "test": {"rows": 10, "ppr": 0.5, "error": 0.2, "base_rate": 0.4}}}}})
        ['sources: d1 (labeled, 32 rows per step; test ppr 0.5000, error 0.2000)']
        >>> source_lines({})
        []
    """
    sources = results.get("sources") or {}
    if not sources:
        return []
    parts = []
    for name, rec in sources.items():
        m = (rec.get("metrics") or {}).get("test") or {}
        rates = f"test ppr {_fmt(m.get('ppr'))}"
        if rec.get("labeled"):
            rates += f", error {_fmt(m.get('error'))}"
        per_step = ("all rows" if rec.get("batch_size") is None
                    else f"{rec['batch_size']} rows")
        parts.append(f"{name} ({'labeled' if rec.get('labeled') else 'unlabeled'}, "
                     f"{per_step} per step; {rates})")
    return ["sources: " + ", ".join(parts)]
