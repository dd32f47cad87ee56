"""Child processes that import this repository's ``benchmarks`` package.

Two kinds: a timing case run on another source tree of fairgames (``--before DIR``,
``compare_trees``'s OLD NEW), where the child must import fairgames from that tree but the
benchmark code from this one; and the reproductions' cells launched as jobs of a Hydra
launcher, whose processes import their task by module name. Neither edits ``sys.path``: the
child's ``PYTHONPATH`` names what it imports.

For a tree, the child runs with ``PYTHONPATH=<shim>:<tree>``, the shim a temporary directory
holding only a link ``benchmarks`` → this package (so the tree's own ``fairgames`` is the one
found, and this repository's ``fairgames`` never is), and the shim as its working directory
(``python -m`` puts the working directory first on the path).

Example:
    >>> env = job_env({"PYTHONPATH": "/elsewhere"})
    >>> env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    True
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent


@functools.cache
def _shim() -> Path:
    shim = Path(tempfile.mkdtemp(prefix="fairgames-bench-"))
    (shim / "benchmarks").symlink_to(PACKAGE, target_is_directory=True)
    return shim


def run_on_tree(module: str, args: Sequence[str], tree: Path, *,
                env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Any:
    """Run ``python -m module args`` importing fairgames from ``tree``; the JSON of its last
    line of output. ``env``: more variables (e.g. one thread); ``cwd``: default the shim."""
    shim = _shim()
    child_env = {**os.environ, **(env or {}),
                 "PYTHONPATH": os.pathsep.join([str(shim), str(Path(tree).resolve())])}
    proc = subprocess.run([sys.executable, "-m", module, *args], env=child_env,
                          cwd=str(cwd or shim), capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{module} {' '.join(args)} on {tree} failed:\n"
                           f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def job_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` with this repository's root first on ``PYTHONPATH``."""
    environ = dict(os.environ if environ is None else environ)
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *rest])
    return environ


def launch_task(module: str, function: str) -> str:
    """The launcher task ``"module:function"``, with this process's environment set so that
    the launcher's job processes (they inherit it) import ``module`` from this repository."""
    os.environ.update(job_env())
    return f"{module}:{function}"
