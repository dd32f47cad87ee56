"""Load a repository script (a benchmark, an example, a command-line script) as a module, the
one way every test does it: the scripts are files, not an installed package.

Example:
    >>> from pathlib import Path
    >>> root = Path(__file__).resolve().parents[1]
    >>> load_script(root / "benchmarks" / "cell_archive.py").__name__
    'cell_archive'
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None, *, register: bool = False,
                path_entry: Path | None = None) -> ModuleType:
    """Execute the script at ``path`` as module ``name`` (default: the file's stem).

    ``register``: put it in ``sys.modules`` first (a script whose dataclasses, pickles or
    launched jobs look their module up by name). ``path_entry``: a directory on ``sys.path``
    while the script runs its imports (a script importing a sibling, e.g. the benchmarks'
    shared ``rates_eval``), removed again afterwards.
    """
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    if path_entry is not None:
        sys.path.insert(0, str(path_entry))
    try:
        spec.loader.exec_module(module)
    finally:
        if path_entry is not None:
            sys.path.remove(str(path_entry))
    return module
