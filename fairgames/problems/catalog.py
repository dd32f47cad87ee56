"""The problem catalog: ``configs/problem/*.yaml`` of a source checkout, loaded by name.

Each file holds a :class:`~fairgames.problems.spec.ProblemSpec`'s fields (plus the run-level
``baseline_fraction``, ``data_sets``, the data sets the problem is documented on, and
``recipe``, the data settings it is documented with).
``scripts/train.py problem=<name>`` uses the same files through Hydra.

Example:
    >>> "fmeasure_parity" in available_problems()
    True
    >>> load_problem("kld_error").unconstrained_metrics()
    ['error']
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import yaml

from .errors import ProblemError
from .spec import ProblemSpec

RUN_KEYS = ("baseline_fraction", "data_sets", "recipe")


def catalog_dir() -> Path:
    """``configs/problem`` of the checkout (``FAIRGAMES_CONFIGS`` overrides ``configs``).

    Example:
        >>> catalog_dir().parts[-2:]
        ('configs', 'problem')
    """
    root = os.environ.get("FAIRGAMES_CONFIGS")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "configs"
    return base / "problem"


def available_problems() -> list[str]:
    """Names of the catalog's problems.

    Example:
        >>> {"demographic_parity", "fmeasure_parity"} <= set(available_problems())
        True
    """
    d = catalog_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def documented_data_sets(name: str) -> list[str]:
    """The data sets a catalog problem documents (its ``data_sets`` key).

    Example:
        >>> documented_data_sets("fmeasure_parity")[:2]
        ['adult', 'compas']
    """
    load_problem(name)                   # an unknown name fails here, listing the known ones
    values = yaml.safe_load((catalog_dir() / f"{name}.yaml").read_text()) or {}
    return [str(d) for d in values.get("data_sets") or []]


def load_problem(name: str | os.PathLike[str]) -> ProblemSpec:
    """A catalog problem by name, or a YAML file by path.

    Raises:
        ProblemError: unknown name (listing the known ones), unknown keys in the file.

    Example:
        >>> spec = load_problem("fmeasure_parity")
        >>> spec.objective, spec.tolerance
        ('1 - fmeasure()', 0.02)
        >>> spec.constraints["f1_parity"]
        'fmeasure(group=protected_group) >= fmeasure(not_group=protected_group) - tolerance'
    """
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        path = catalog_dir() / f"{name}.yaml"
        if not path.is_file():
            raise ProblemError(f"unknown problem {str(name)!r}; the catalog ({catalog_dir()}) "
                               f"has {available_problems()}")
    elif not path.is_file():
        raise ProblemError(f"no problem file at {path}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ProblemError(f"{path}: expected a mapping of problem keys")
    data.pop("defaults", None)
    allowed = {f.name for f in fields(ProblemSpec)}
    unknown = sorted(set(data) - allowed - set(RUN_KEYS))
    if unknown:
        raise ProblemError(f"{path}: unknown key(s) {unknown}; known: {sorted(allowed)}")
    return ProblemSpec(**{k: v for k, v in data.items() if k in allowed})
