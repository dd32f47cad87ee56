"""Saving and loading a solution (a stochastic model or a plain module).

A saved solution is one ``torch.save`` file holding plain tensors and metadata, loaded with
``weights_only=True`` (no pickled code)::

    {"format": "fairgames.solution", "version": 1, "kind": "stochastic" | "deterministic",
     "names": [...], "members": {name: [R, *shape]}, "weights": [R], "steps": [...] | None,
     "metadata": {...}}

A deterministic solution is one member (``R = 1``) and loads as a plain module.

Example:
    >>> import io, torch
    >>> f = io.BytesIO()
    >>> save_solution(f, torch.nn.Linear(2, 1), metadata={"split": "train"})
    >>> _ = f.seek(0)
    >>> type(load_solution(f, torch.nn.Linear(2, 1))).__name__
    'Linear'
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import IO, Any

import torch
from torch import nn

from .snapshots import model_state
from .stochastic import ModuleSource, StochasticModel, materialize, skeleton_of

FORMAT, VERSION = "fairgames.solution", 1
PathOrFile = str | os.PathLike | IO[bytes]



def save_solution(path: PathOrFile, solution: StochasticModel | nn.Module,
                  metadata: Mapping[str, Any] | None = None) -> None:
    """Save a stochastic (:class:`StochasticModel`) or deterministic (any module) solution.

    ``metadata`` must be plain data (str, numbers, bool, None, lists / tuples / dicts of them),
    so that loading needs no pickled code.
    """
    meta = _plain(dict(metadata or {}), "metadata")
    if isinstance(solution, StochasticModel):
        payload = {"kind": "stochastic", "names": list(solution.names),
                   "members": {n: t.detach().cpu() for n, t in solution.members.items()},
                   "weights": solution.weights.detach().cpu(), "steps": solution.steps}
    elif isinstance(solution, nn.Module):
        state = list(model_state(solution))
        payload = {"kind": "deterministic", "names": [n for n, _ in state],
                   "members": {n: t.detach().cpu()[None] for n, t in state},
                   "weights": torch.ones(1, dtype=torch.float64), "steps": None}
    else:
        raise TypeError(f"expected a StochasticModel or an nn.Module, got "
                        f"{type(solution).__name__}")
    torch.save({"format": FORMAT, "version": VERSION, **payload, "metadata": meta}, path)


def load_solution(path: PathOrFile, template: ModuleSource,
                  map_location: torch.device | str = "cpu", *,
                  with_metadata: bool = False) -> Any:
    """Load a solution saved by :func:`save_solution` onto ``map_location``.

    ``template`` gives the architecture (a module, whose values are ignored, or a factory).
    Returns a :class:`StochasticModel` for a stochastic solution and a plain module for a
    deterministic one; with ``with_metadata=True`` returns ``(solution, metadata)``.
    """
    data = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("not a fairgames solution file (missing format marker)")
    if data.get("version") != VERSION:
        raise ValueError(f"unsupported solution file version {data.get('version')!r}; this "
                         f"fairgames reads version {VERSION}")
    members = data["members"]
    expected = [n for n, _ in model_state(skeleton_of(template))]
    if sorted(expected) != sorted(members):
        raise ValueError(f"the template's state {sorted(expected)} does not match the saved "
                         f"solution's {sorted(members)}")
    if data["kind"] == "stochastic":
        out: Any = StochasticModel(template, members, data["weights"], steps=data["steps"])
    elif data["kind"] == "deterministic":
        out = materialize(template, {n: t[0] for n, t in members.items()}, map_location)
    else:
        raise ValueError(f"unknown solution kind {data['kind']!r}")
    return (out, data["metadata"]) if with_metadata else out


def _plain(value: Any, where: str) -> Any:
    """A copy of ``value`` made of builtin types (numpy scalars become int / float)."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} keys must be strings, got {k!r}")
            out[k] = _plain(v, f"{where}[{k!r}]")
        return out
    raise TypeError(f"{where} must be plain data (str, numbers, bool, None, lists, dicts); "
                    f"got {type(value).__name__}")
