"""The registry of config checks: each config group declares its keys and its validators.

:func:`fairgames.train.validate` runs two passes over this registry and reports every problem
of a pass in one :class:`~fairgames.train.ConfigError`:

1. **keys** (:func:`key_errors`): every top-level key is a field of the root schema, and every
   key of a group with a schema is one of its fields or a key a validator declared. Hydra's
   ``+key=value`` forces keys past the schema's struct flag, so they are caught here; this
   pass stops the run before the values are read, since a misspelt key would be misread.
2. **values** (:func:`value_errors`): every registered validator, groups in registration
   order and a group's validators in theirs. A validator is ``fn(cfg, check)``: it reads the
   whole config (some rules span groups, e.g. a held-out constraint split needs a gradient
   θ-player) and records problems on ``check`` (:class:`Checks`), never raises.

A group, a preset or a player adds its keys and rules without editing a central function::

    @register_validator("algorithm", keys=("dual_decay",))
    def _check_dual_decay(cfg, check):
        check.positive("algorithm.dual_decay", cfg.algorithm.get("dual_decay", 1.0))

Example:
    >>> from dataclasses import dataclass
    >>> from omegaconf import OmegaConf
    >>> @dataclass
    ... class Shop:
    ...     price: float = 1.0
    >>> register_group("shop", Shop)
    >>> def check_price(cfg, check):
    ...     check.positive("shop.price", cfg.shop.price)
    >>> _ = register_validator("shop", check_price)
    >>> cfg = OmegaConf.create({"shop": {"price": -2.0}})
    >>> value_errors(cfg, groups=["shop"])
    ['shop.price=-2.0: must be positive and finite']
    >>> key_errors(OmegaConf.create({"shop": {"prize": 1}}), root=None, groups=["shop"])
    ["unknown key shop.prize; shop takes ['price']"]
    >>> unregister_group("shop")
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig


class Checks:
    """Collects a config's problems as ``"key=value: what is expected"`` lines.

    Example:
        >>> check = Checks()
        >>> check.choice("trainer.device", "tpu", ("cpu", "cuda"))
        >>> check.positive("trainer.steps", 0, integer=True)
        >>> for line in check.errors:
        ...     print(line)
        trainer.device='tpu': expected one of ['cpu', 'cuda']
        trainer.steps=0: must be positive and finite
    """

    def __init__(self) -> None:
        self.errors: list[str] = []

    def bad(self, key: str, value: object, expected: str) -> None:
        """Record that ``key`` has a bad ``value`` and what is ``expected`` instead."""
        self.errors.append(f"{key}={value!r}: {expected}")

    def choice(self, key: str, value: object, options: Collection[Any]) -> None:
        """``value`` must be one of ``options``."""
        if value not in options:
            self.bad(key, value, f"expected one of {sorted(options)}")

    def positive(self, key: str, value: object, allow_none: bool = False,
                 integer: bool = False, zero: bool = False) -> None:
        """``value`` must be a finite number above 0 (``zero``: at least 0), an ``int`` if
        ``integer``; ``None`` is allowed only with ``allow_none``."""
        if value is None:
            if not allow_none:
                self.bad(key, value, "must be set")
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                integer and not isinstance(value, int)):
            self.bad(key, value, "expected a number")
            return
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            self.bad(key, value, "must be " + ("non-negative" if zero else "positive")
                     + " and finite")


Validator = Callable[[DictConfig, Checks], None]


@dataclass
class GroupRules:
    """A config group's ``schema`` (no schema: the group checks its own keys, as ``data``'s
    loaders do) and its validators, each with the keys it declares."""

    schema: type | None = None
    validators: dict[Validator, tuple[str, ...]] = field(default_factory=dict)

    def keys(self) -> set[str] | None:
        """The keys the group takes (its schema's fields and its validators' keys), or
        ``None`` when it checks its own."""
        if self.schema is None:
            return None
        declared = {k for keys in self.validators.values() for k in keys}
        return {f.name for f in fields(self.schema)} | declared


_GROUPS: dict[str, GroupRules] = {}


def register_group(group: str, schema: type | None = None) -> None:
    """Declare a config group (``schema``: the dataclass whose fields are its keys).

    Registering a group again replaces its schema and keeps its validators.
    """
    rules = _GROUPS.setdefault(group, GroupRules())
    rules.schema = schema


def unregister_group(group: str) -> None:
    """Forget a group, its keys and its validators."""
    _GROUPS.pop(group, None)


def register_validator(group: str, fn: Validator | None = None, *,
                       keys: Iterable[str] = ()) -> Any:
    """Add ``fn(cfg, check)`` to ``group``'s validators, and ``keys`` to the keys the group
    takes; usable as a decorator, ``@register_validator("trainer")``. Returns ``fn``.
    Registering ``fn`` again replaces its keys and keeps its place in the order."""
    def add(f: Validator) -> Validator:
        _GROUPS.setdefault(group, GroupRules()).validators[f] = tuple(keys)
        return f
    return add if fn is None else add(fn)


def unregister_validator(group: str, fn: Validator) -> None:
    """Remove a validator added by :func:`register_validator`, and the keys it declared."""
    if group in _GROUPS:
        _GROUPS[group].validators.pop(fn, None)


def key_errors(cfg: DictConfig, root: type | None,
               groups: Iterable[str] | None = None) -> list[str]:
    """Unknown keys: top-level keys not fields of ``root`` (``None``: not checked), and keys a
    group (of ``groups``; ``None``: all registered) does not take."""
    errors = []
    if root is not None:
        top = {f.name for f in fields(root)}
        errors += [f"unknown key {key!r}; known: {sorted(top)}" for key in cfg if key not in top]
    for group in (_GROUPS if groups is None else groups):
        known = _GROUPS[group].keys()
        if known is None:
            continue
        errors += [f"unknown key {group}.{key}; {group} takes {sorted(known)}"
                   for key in cfg.get(group, {}) if key not in known]
    return errors


def value_errors(cfg: DictConfig, groups: Iterable[str] | None = None) -> list[str]:
    """Every problem the validators of ``groups`` (``None``: all registered) find."""
    check = Checks()
    for group in (list(_GROUPS) if groups is None else groups):
        for fn in list(_GROUPS[group].validators):
            fn(cfg, check)
    return check.errors
