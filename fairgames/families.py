"""The paper families a run can use, found by name: the package's own, those installed under the
``fairgames.families`` entry-point group, and a user's own modules.

A family registers what it adds to a run (methods, extensions, config groups: the seam,
:mod:`fairgames.train.method`) when its registering module is imported; :func:`load` imports
them. Importing :mod:`fairgames.train.config` (the run's schema) or :mod:`fairgames.train.run`
(the pipeline) loads the package's own and the installed ones; the ``families`` config
key names a user's own modules, which the command line imports before it composes the config
(:func:`from_argv`), so that their config groups and options compose::

    python scripts/train.py families=[my_family] algorithm=my_method

A distribution can declare its family in its ``pyproject.toml`` instead::

    [project.entry-points."fairgames.families"]
    my_family = "my_package.my_family"

Example:
    >>> from_argv(["data=adult", "families=[a.b,c]", "seed=1"])
    ['a.b', 'c']
    >>> from_argv(["+families=a"])
    ['a']
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Iterable, Sequence

# the modules through which the package's own families register (papers 004, 003, 001)
BUILT_IN = ("fairgames.noisy_groups.plugin", "fairgames.fair_regression.plugin",
            "fairgames.dataset_constraints.plugin")
ENTRY_POINTS = "fairgames.families"


class FamilyError(ImportError):
    """A family module named by the ``families`` config key, or by an entry point, that does
    not import."""


def load(modules: Iterable[str] = (), *, importer: str | None = None) -> list[str]:
    """Import the package's own families, the installed ones and ``modules`` (dotted names;
    the working directory is searched like ``python -m`` does). Returns the modules imported.

    ``importer``: the module calling this while it is itself being imported
    (:mod:`fairgames.train.config`, :mod:`fairgames.train.run`). If another module of the
    package is being imported at that moment — a family's module or a core module that
    imported the config — a family's registering module could read it half-made, so nothing is
    loaded then: ``validate``, ``run`` and ``fit`` call this again before they read the
    registry.

    Raises:
        FamilyError: a module that does not import (the message names it and the remedy).
    """
    if importer is not None and _busy(importer):
        return []
    modules = list(modules)
    names = [*BUILT_IN, *_entry_points(), *modules]
    for name in names:
        if name in sys.modules:
            continue
        if name in modules and "" not in sys.path:   # beside the command, as `python -m` finds
            sys.path.insert(0, "")
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise FamilyError(f"families: cannot import {name!r} ({e}); give the dotted name "
                              "of a module on the Python path (e.g. families=[my_family] for "
                              "my_family.py in the working directory)") from e
    return names


def _busy(importer: str) -> bool:
    """Whether a module of the package other than ``importer`` (and the packages holding it,
    complete before it starts) is being imported now."""
    holders = {importer.rsplit(".", k)[0] for k in range(importer.count(".") + 1)}
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for key, module in list(sys.modules.items())
               if key.split(".")[0] == "fairgames" and key not in holders)


def _entry_points() -> list[str]:
    return [ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)]


def from_argv(argv: Sequence[str]) -> list[str]:
    """The modules a command line's ``families=`` override names (``[a,b]``, ``a``)."""
    found: list[str] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "families":
            found += [v.strip().strip("'\"") for v in value.strip().strip("[]").split(",")
                      if v.strip()]
    return found
