"""Load a repository script that is a file, not a module of a package (a command-line script
of ``scripts/``, an example of ``examples/``, a test's helper file) as a module, the one way
every test does it. Benchmarks are the ``benchmarks`` package: tests import them by name.

Example:
    >>> from pathlib import Path
    >>> load_script(Path(__file__).resolve(), "loader_itself").__name__
    'loader_itself'
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None, *, register: bool = False) -> ModuleType:
    """Execute the script at ``path`` as module ``name`` (default: the file's stem).

    ``register``: put it in ``sys.modules`` first (a script whose dataclasses, pickles or
    launched jobs look their module up by name).
    """
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
