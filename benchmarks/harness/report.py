"""The generated summary ``<stem>.md`` of a result ``<stem>.json``, and its command line.

:func:`render` writes the generic summary of a speed result: its command, the figures table
(value and unit), the goals (value, target, met) and the machine, then its config. A
reproduction's summary is its script's own text, regenerated from the cells its JSON was made
from (:data:`FROM_SCRIPT`: the script's function that returns the text for a committed JSON).

    python -m benchmarks.harness.report benchmarks/results/step_overhead.json
    python -m benchmarks.harness.report benchmarks/results/*.json --check   # differ → exit 1

Example:
    >>> text = render({"figures": {"a_ms": 1.5}, "units": {"a_ms": "ms"},
    ...                "goals": {"a": {"value": 1.5, "target": 2, "met": True}}}, "toy")
    >>> print(text.splitlines()[0]); "| a | 1.5 | 2 | met |" in text
    # toy
    True
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Reproductions render their own summary: stem pattern → "module:function(result, json_path)".
FROM_SCRIPT = {
    r"reproduce_000(\.quick)?": "benchmarks.reproduce.reproduce_000:summary_of",
    r"reproduce_002(\.quick)?": "benchmarks.reproduce.reproduce_002:summary_of",
    r"reproduce_001_fig2(\.quick)?": "benchmarks.reproduce.reproduce_001_fig2:summary_of",
    r"reproduce_003(\..+)?": "benchmarks.reproduce.reproduce_003:summary_of",
    r"reproduce_004(\..+)?": "benchmarks.reproduce.reproduce_004:summary_of",
    r"coco_trace_000(\.quick)?": "benchmarks.reproduce.coco_trace_000:summary_of",
    r"solved_by_default(_before)?": "benchmarks.reproduce.solved_by_default:summary_of",
}


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _figures(result: dict[str, Any]) -> list[str]:
    units = result.get("units", {})
    rows = [f"| {k} | {_fmt(v)} | {units.get(k, '')} |" for k, v in result["figures"].items()]
    return ["## Figures", "", "| figure | value | unit |", "|---|---|---|", *rows, ""]


# Older results' goal keys → the harness's (results.goal): many_constraints' "goal" was the
# target; step_replay's goal held "game_ms" against "cooper_ms" and said "passed".
_OLD_GOAL_KEYS = {"goal": "target", "passed": "met", "game_ms": "value", "cooper_ms": "target"}


def _as_goal(g: dict[str, Any]) -> dict[str, Any]:
    """``g`` in the layout of :func:`benchmarks.harness.results.goal` (committed results keep
    their own layout; their summaries read the same)."""
    out = dict(g)
    for old, new in _OLD_GOAL_KEYS.items():
        if old in g and new not in out:
            out[new] = g[old]
    return out


def _goals(goals: dict[str, Any]) -> list[str]:
    if "met" in goals and "value" in goals:          # one goal (compare_trees' old layout)
        goals = {"goal": goals}
    rows = []
    for k, g in goals.items():
        g = _as_goal(g)
        target = _fmt(g.get("target")) if g.get("at_most", True) else f">= {_fmt(g['target'])}"
        rows.append(f"| {k} | {_fmt(g.get('value'))} | {target} | "
                    f"{'met' if g.get('met') else 'NOT met'} |")
    return ["## Goals", "", "| goal | value | target | |", "|---|---|---|---|", *rows, ""]


def _json_block(title: str, value: Any) -> list[str]:
    return [f"## {title}", "", "```json", json.dumps(value, indent=1, default=str), "```", ""]


def render(result: dict[str, Any], stem: str) -> str:
    """The generic summary: command, figures, goals, machine, config, then the other fields'
    names (their values are in the JSON)."""
    out = [f"# {stem}", "",
           f"Generated from `{stem}.json` by `python -m benchmarks.harness.report` "
           "(do not edit: regenerate).", ""]
    if "command" in result:
        out += ["Command:", "", "```console", f"$ {result['command']}", "```", ""]
    if isinstance(result.get("figures"), dict):
        out += _figures(result)
    for key in ("goals", "goal"):
        if isinstance(result.get(key), dict):
            out += _goals(result[key])
    for key, title in (("machine", "Machine"), ("config", "Config")):
        if key in result:
            out += _json_block(title, result[key])
    shown = {"command", "figures", "units", "goals", "goal", "machine", "config"}
    rest = [k for k in result if k not in shown]
    if rest:
        out += ["## Other fields", "", ", ".join(f"`{k}`" for k in rest), ""]
    return "\n".join(out)


def summary_for(path: Path) -> str:
    """The summary text of the committed result ``path`` (a reproduction's from its script)."""
    result = json.loads(Path(path).read_text())
    stem = Path(path).stem
    for pattern, target in FROM_SCRIPT.items():
        if re.fullmatch(pattern, stem):
            module, _, name = target.partition(":")
            return getattr(importlib.import_module(module), name)(result, Path(path))
    return render(result, stem)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="result JSON files")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a summary differs from its regeneration")
    a = ap.parse_args(argv)
    from benchmarks.harness.results import summary_path, write_text

    differ = []
    for path in a.results:
        md = summary_path(path)
        try:
            text = summary_for(path)
        except Exception as e:  # noqa: BLE001 - name the file, go on with the others
            differ.append(f"{md} (cannot regenerate: {type(e).__name__}: {e})")
            continue
        if a.check:
            if not md.exists() or md.read_text() != text:
                differ.append(str(md))
        else:
            write_text(md, text)
            print(f"wrote {md}")
    for name in differ:
        print(f"{'differs' if a.check else 'not written'}: {name}", file=sys.stderr)
    if a.check and not differ:
        print(f"{len(a.results)} summaries regenerate byte-identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
