"""The registry the paper families fill through the seam (:mod:`fairgames.train.method`): the
methods, extensions, config groups and tune-grid steps registered by name. A leaf: it imports
nothing of the pipeline, so that the config schema and the seam can both read it.

Example:
    >>> method_for({"algorithm": {"name": "proxy_lagrangian"}}) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

METHODS: dict[tuple[str, str], Any] = {}          # (config key, name) → Method
EXTENSIONS: dict[str, Any] = {}                    # config group → Extension


@dataclass(frozen=True)
class FamilyGroup:
    """A family's own config group: its ``schema`` (a dataclass; its default instance is the
    group's value when the command line names no option)."""

    name: str
    schema: type


FAMILY_GROUPS: dict[str, FamilyGroup] = {}
# trainer.tune_grid's step sizes a family adds: name → (the config key it scales, default)
TUNE_STEPS: dict[str, tuple[str, tuple[float, ...]]] = {}


def methods(key: str = "algorithm.name") -> dict[str, Any]:
    """The registered methods ``key`` names, by name."""
    return {name: m for (k, name), m in METHODS.items() if k == key}


def method_for(config: Mapping[str, Any]) -> Any:
    """The registered method a run's ``config`` (a plain mapping) names, ``None`` for the
    default game.

    Raises:
        ValueError: the config names two methods at once.
    """
    found = [m for (key, name), m in METHODS.items() if _get(config, key) == name]
    if len(found) > 1:
        names = ", ".join(f"{m.key}={m.name}" for m in found)
        raise ValueError(f"the config names two methods ({names}): choose one")
    return found[0] if found else None


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def extensions() -> list[Any]:
    """The registered extensions, in registration order."""
    return list(EXTENSIONS.values())


def results_schemas() -> dict[str, Mapping[str, Any]]:
    """The ``results.json`` blocks the registered extensions declare, by key."""
    return {e.group: e.results_schema for e in EXTENSIONS.values()
            if e.results_schema is not None}


def family_groups() -> dict[str, FamilyGroup]:
    """The registered family config groups, by name."""
    return dict(FAMILY_GROUPS)


def tune_steps() -> dict[str, tuple[str, tuple[float, ...]]]:
    """The registered families' step sizes: name → (config key, default factors)."""
    return dict(TUNE_STEPS)
