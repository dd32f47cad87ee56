"""The settings a player takes from a run's config, declared by the player class.

A player class lists its settings in ``config_keys``: each :class:`ConfigKey` names a key of
the run config's ``algorithm`` group (``algorithm.<name>``), its type and default, the rule
its value must meet and the constructor argument it becomes. The game layer only declares
them (plain Python, no config library): the training layer builds the ``algorithm`` schema
and its validation from the declarations of every registered strategy, and a preset builds
its players from a config's values (:meth:`~fairgames.game.Preset.optimizer_arguments`).
So a new strategy joins the command line by declaring its keys, without a central list:

    class Dro(MultiplierPlayer):
        strategy = "dro"
        config_keys = (ConfigKey("dro_lr", float, 0.1, "the DRO step", positive(),
                                 argument="lr"),)

Registries of strategies (``MULTIPLIER_PLAYERS``, ``THETA_PLAYERS``) announce changes through
:func:`strategies_changed`; the training layer listens with :func:`watch_strategies` to
rebuild its schema.

Example:
    >>> key = ConfigKey("theta_steps", int, 20, "inner steps", positive(integer=True),
    ...                 argument="steps")
    >>> key.problem(0), key.problem(5), key.argument_name
    ('must be positive and finite', None, 'steps')
    >>> one_of(("sgd", "adam"))("rmsprop")
    "expected one of ['adam', 'sgd']"
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

Check = Callable[[Any], "str | None"]
"""A value's rule: ``None`` when the value is fine, else what is expected instead."""


@dataclass(frozen=True)
class ConfigKey:
    """One setting of a player, ``algorithm.<name>`` in a run config.

    Attributes:
        name: the config key (unique across the players of a game; two classes that declare
            the same name must declare the same ``type`` and ``default``).
        type: ``float``, ``int``, ``str`` or ``bool``.
        default: the value when the config does not set it; ``None`` means "the player's
            own default" (the argument is then not passed at all).
        doc: what the setting does (shown in errors and docs).
        check: the rule a set value must meet (see :func:`positive`, :func:`one_of`).
        argument: the player constructor's argument it becomes (default: ``name``).
        convert: maps the config value to the argument's value (e.g. a name to a class).
    """

    name: str
    type: type
    default: Any = None
    doc: str = ""
    check: Check | None = None
    argument: str | None = None
    convert: Callable[[Any], Any] | None = None

    @property
    def argument_name(self) -> str:
        return self.argument or self.name

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (``None``: nothing). ``None`` is allowed when the
        default is ``None`` (the player's own default)."""
        if value is None:
            return None if self.default is None else "must be set"
        return self.check(value) if self.check is not None else None

    def argument_value(self, value: Any) -> Any:
        """The constructor argument's value for a (valid, non-``None``) config value."""
        return self.convert(value) if self.convert is not None else value


def positive(*, integer: bool = False) -> Check:
    """A finite number above 0 (an ``int`` if ``integer``); bools are not numbers."""
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                integer and not isinstance(value, int)):
            return "expected a number"
        if not math.isfinite(value) or value <= 0:
            return "must be positive and finite"
        return None
    return check


def at_least(bound: float) -> Check:
    """A finite number at or above ``bound``; bools are not numbers."""
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "expected a number"
        return None if math.isfinite(value) and value >= bound else (
            f"must be finite and >= {bound:g}")
    return check


def one_of(options: Collection[Any]) -> Check:
    """One of ``options``."""
    def check(value: Any) -> str | None:
        return None if value in options else f"expected one of {sorted(options)}"
    return check


def merge_keys(owners: dict[str, tuple[ConfigKey, list[Any]]], key: ConfigKey,
               owner: Any) -> None:
    """Add ``owner``'s ``key`` to ``owners`` (``name -> (key, [owner, ...])``); refuse a name
    declared twice with another type or default."""
    if key.name in owners:
        known, who = owners[key.name]
        if (known.type, known.default) != (key.type, key.default):
            raise ValueError(
                f"config key {key.name!r} is declared by {who[0]!r} as {known.type.__name__} "
                f"(default {known.default!r}) and by {owner!r} as {key.type.__name__} "
                f"(default {key.default!r}); a key means one thing in every player")
        if owner not in who:
            who.append(owner)
    else:
        owners[key.name] = (key, [owner])


_WATCHERS: list[Callable[[], None]] = []


def watch_strategies(fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn()`` whenever a strategy registry changes (the training layer rebuilds its
    config schema); returns ``fn``."""
    if fn not in _WATCHERS:
        _WATCHERS.append(fn)
    return fn


def strategies_changed() -> None:
    """Tell the watchers that a strategy was registered or removed."""
    for fn in list(_WATCHERS):
        fn()


def register_in(registry: dict[str, Any], name: str, cls: Any) -> None:
    """``registry[name] = cls`` and tell the watchers; if one refuses (e.g. a config key
    that clashes with another player's), the registry is left as it was."""
    had, before = name in registry, registry.get(name)
    registry[name] = cls
    try:
        strategies_changed()
    except Exception:
        if had:
            registry[name] = before
        else:
            del registry[name]
        strategies_changed()
        raise
