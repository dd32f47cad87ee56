"""Two runs of ``reproduce_000.py`` (old and new code) compared: tables and cell records.

Checks that the two ``<stem>.md`` tables are byte-identical and lists how the cells' records
differ: cells only in one run, and per leaf name (``fmeasure``, ``error``, ...) how many
values differ and by how much (largest relative difference). Cells are read with
``harness.cells.CellStore``, which reads archives and the older loose ``<key>.json`` files
alike. Timings and run directories are not compared; ``--ignore`` adds keys (e.g.
``overrides``, which the pinned script records in full).

Usage::

    python -m benchmarks.reproduce.compare_reproduce /tmp/old /tmp/new --stem reproduce_000.quick \
        --ignore overrides --out benchmarks/results/reproduce_000_quick_compare.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness.cells import CellStore
from benchmarks.harness.results import write_run

NOT_COMPARED = {"wall_s", "seconds", "run_dir"}


def leaf_diffs(old: Any, new: Any, ignore: set[str], path: str = "") -> list[tuple]:
    """(path, old, new) of every leaf that differs; a key in one record only → None there."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple] = []
        for k in sorted(set(old) | set(new)):
            if k in ignore:
                continue
            if k not in old or k not in new:
                out.append((f"{path}/{k}", old.get(k), new.get(k)))
            else:
                out += leaf_diffs(old[k], new[k], ignore, f"{path}/{k}")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True))
                for d in leaf_diffs(a, b, ignore, f"{path}[{i}]")]
    return [] if json.dumps(old) == json.dumps(new) else [(path, old, new)]


def compare_cells(old_dir: Path, new_dir: Path, ignore: set[str]) -> dict[str, Any]:
    old, new = CellStore(old_dir), CellStore(new_dir)
    keys_old, keys_new = old.keys(), new.keys()
    by_leaf: Counter[str] = Counter()
    rel: dict[str, float] = {}
    other: list[tuple] = []
    differing = 0
    for key in sorted(keys_old & keys_new):
        diffs = leaf_diffs(old.get(key), new.get(key), ignore)
        differing += bool(diffs)
        for path, a, b in diffs:
            leaf = path.rsplit("/", 1)[-1]
            if isinstance(a, float) and isinstance(b, float):
                by_leaf[leaf] += 1
                r = abs(a - b) / max(abs(a), abs(b), 1e-300)
                rel[leaf] = max(rel.get(leaf, 0.0), r)
            else:
                other.append((key, path, a, b))
    kinds = Counter(path.rsplit("/", 1)[-1] for _, path, _, _ in other)
    return {"cells_old": len(keys_old), "cells_new": len(keys_new),
            "only_old": sorted(keys_old - keys_new), "only_new": sorted(keys_new - keys_old),
            "cells_differing": differing,
            "float_leaves_differing": dict(by_leaf.most_common()),
            "max_relative_difference": rel,
            "other_leaves_differing": dict(kinds.most_common()),
            "other_examples": [list(map(str, o))[:4] for o in other[:5]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="--results folder of the old run")
    parser.add_argument("new", type=Path, help="--results folder of the new run")
    parser.add_argument("--stem", default="reproduce_000.quick")
    parser.add_argument("--ignore", nargs="*", default=[], help="record keys not compared")
    parser.add_argument("--out", type=Path, default=None)
    a = parser.parse_args()
    md = {side: (d / f"{a.stem}.md").read_bytes() for side, d in (("old", a.old),
                                                                 ("new", a.new))}
    result: dict[str, Any] = {
        "tables_identical": md["old"] == md["new"],
        "sha256": {side: hashlib.sha256(b).hexdigest() for side, b in md.items()},
        "wall_s": {side: json.loads((d / f"{a.stem}.json").read_text())["config"].get(
            "wall_s_this_invocation") for side, d in (("old", a.old), ("new", a.new))},
        "ignored_keys": sorted(NOT_COMPARED | set(a.ignore)),
        "cells": compare_cells(a.old / f"{a.stem}.cells", a.new / f"{a.stem}.cells",
                               NOT_COMPARED | set(a.ignore)),
    }
    print(json.dumps(result, indent=1))
    if a.out:
        write_run(a.out, result, indent=1, newline=True)
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
