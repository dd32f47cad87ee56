"""Goals and the one writer of a benchmark's result: ``<stem>.json`` and its ``<stem>.md``.

A result is a JSON object; the speed scripts' carry ``figures`` (name → value), ``units``,
``goals`` (name → ``{"value", "target", "met", ...}``, built with :func:`goal`), ``machine``
(:func:`benchmarks.harness.machine.machine`), ``config`` and ``command`` (how it was run).
The reproductions keep their own layouts (their committed JSON must regenerate byte for byte
from their cell archives), and their own summary text.

:func:`write` writes the JSON atomically (a temporary file beside it, then a rename: a killed
run leaves the old file or the new one, never half of one) and, beside it, ``<stem>.md``:
the text given, else the generic summary of :func:`benchmarks.harness.report.render`.

A speed script builds each goal with :func:`goal` and prints them all with
:func:`print_goals` (one line per goal, the same wording in every script).

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> g = goal(1.4, 2.0)
    >>> g
    {'value': 1.4, 'target': 2.0, 'met': True}
    >>> print_goals({"x": g, "y": goal(0.5, 0.75, at_most=False, worst="mlp")}, show=("worst",))
    goal x: 1.4 (target <= 2) met
    goal y: 0.5 (target >= 0.75) NOT met, by 0.25; worst mlp
    >>> out = Path(tempfile.mkdtemp()) / "toy.json"
    >>> _ = write(out, {"figures": {"x_ms": 1.4}, "goals": {"x": g}})
    >>> json.loads(out.read_text())["goals"]["x"]["met"], out.with_suffix(".md").exists()
    (True, True)
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def goal(value: float, target: float, *, at_most: bool = True, **extra: Any) -> dict[str, Any]:
    """A goal: ``value`` against ``target`` (met when ``value ≤ target``, or ``≥`` with
    ``at_most=False``, which the goal then records as ``"at_most": False``); ``extra`` fields
    are kept (e.g. where a reference came from, the statistic, the worst case)."""
    met = value <= target if at_most else value >= target
    side = {} if at_most else {"at_most": False}
    return {"value": value, "target": target, "met": bool(met), **side, **extra}


def goal_line(name: str, g: dict[str, Any], show: Sequence[str] = ()) -> str:
    """One goal as ``goal NAME: VALUE (target <= T) met`` (``NOT met, by D`` when it is not),
    then the ``show`` fields the goal has (``; field value``)."""
    at_most = g.get("at_most", True)
    line = f"goal {name}: {g['value']:.4g} (target {'<=' if at_most else '>='} {g['target']:.4g}) "
    line += "met" if g["met"] else f"NOT met, by {abs(g['value'] - g['target']):.4g}"
    return line + "".join(f"; {k} {g[k]}" for k in show if k in g)


def print_goals(goals: dict[str, dict[str, Any]], show: Sequence[str] = ()) -> None:
    """Print every goal of ``goals`` (name → :func:`goal`) with :func:`goal_line`."""
    for name, g in goals.items():
        print(goal_line(name, g, show))


def command(argv: list[str] | None = None) -> str:
    """The command line that ran this process (``python -m <module> args...``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = [f"-m {spec.name}"] if spec is not None else [sys.argv[0]]
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", *head, *(shlex.quote(a) for a in args)])


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file in the same directory, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps(result: dict[str, Any], indent: int = 2, newline: bool = False) -> str:
    """The JSON text of a result (``default=float``: numpy scalars are written as floats).
    ``indent`` and ``newline`` keep each script's committed layout, so that a result
    regenerated from its archive is the same bytes."""
    return json.dumps(result, indent=indent, default=float) + ("\n" if newline else "")


def write(path: Path, result: dict[str, Any], *, markdown: str | None = None,
          indent: int = 2, newline: bool = False) -> Path:
    """Write ``result`` to ``path`` (``<stem>.json``) and its summary to ``<stem>.md``
    (``markdown``, else :func:`benchmarks.harness.report.render`); returns ``path``."""
    from benchmarks.harness.report import render  # report imports nothing back from here

    path = Path(path)
    write_text(path, dumps(result, indent, newline))
    md = markdown if markdown is not None else render(result, path.stem)
    write_text(summary_path(path), md)
    return path


def write_run(path: Path, result: dict[str, Any], argv: list[str] | None = None,
              **options: Any) -> dict[str, Any]:
    """:func:`write` of ``result`` with the command that ran it (:func:`command`) as its
    first key, the record every speed script and study keeps; ``options`` go to
    :func:`write`. Returns the dict written."""
    result = {"command": command(argv), **result}
    write(path, result, **options)
    return result


def summary_path(path: Path) -> Path:
    """``<stem>.md`` beside ``<stem>.json`` (``rates_eval.cpu.json`` → ``rates_eval.cpu.md``)."""
    return Path(path).with_suffix(".md")
