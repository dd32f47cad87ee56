"""Resuming a run from its directory: the config comes from the checkpoint.

``python scripts/train.py trainer.resume=<run dir>`` composes the default config, which is not
the run's. So the run takes the config stored in its checkpoint (:func:`resumed_config`) and
compares only the keys the command line names explicitly (Hydra's override list): a key that
differs is refused unless a resumed run may change it (:data:`RESUME_FREE`, e.g.
``trainer.steps`` to train longer). :func:`hydra_resume_args` keeps Hydra from writing a new
``.hydra/`` record over the original run's, and from making a new run directory.

Example:
    >>> stored = {"seed": 0, "trainer": {"steps": 40, "resume": False, "log_every": 10}}
    >>> given = {"seed": 0, "trainer": {"steps": 1000, "resume": "runs/x", "log_every": 50}}
    >>> resumed_config(stored, given, ["trainer.resume=runs/x"])["trainer"]
    {'steps': 40, 'resume': 'runs/x', 'log_every': 10}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError

# Keys a resumed run may change without invalidating its checkpoint.
RESUME_FREE = {"trainer.resume", "trainer.stop_after", "trainer.progress", "trainer.steps",
               "trainer.epochs", "trainer.plots", "trainer.tensorboard", "trainer.bootstrap",
               "run_dir", "overwrite"}
# Keys that belong to one invocation, never to the stored run.
PER_INVOCATION = ("trainer.resume", "trainer.stop_after")
# Placeholders a run resolves as it loads and stores resolved: a given placeholder names no
# value, so it matches whatever the stored run resolved it to (data keys the loader fills from
# the data set's recipe, ``fairgames.train.data.loaded_keys``; the model head the problem
# picks, ``fairgames.train.helpers.resolve_output``).
RESOLVED_AT_LOAD = {"data.protected": None, "data.target": None, "data.seed": None,
                    "model.output": "auto"}
_ABSENT = object()


def override_keys(overrides: Sequence[str]) -> list[str]:
    """The config keys (or groups) that Hydra command-line overrides name.

    Example:
        >>> override_keys(["trainer.steps=5", "problem=kld_error", "+data.n=3", "~seed"])
        ['trainer.steps', 'problem', 'data.n', 'seed']
    """
    return [key for key in map(override_key, overrides) if key]


def override_key(override: str) -> str:
    """The config key (or group) one Hydra command-line override names (``""``: none).

    Example:
        >>> override_key("+hydra/launcher@hydra.launcher=joblib")
        'hydra/launcher'
    """
    return override.split("=", 1)[0].lstrip("+~").split("@", 1)[0].strip()


def resumed_config(stored: Mapping[str, Any], given: Mapping[str, Any],
                   overrides: Sequence[str]) -> dict[str, Any]:
    """The ``stored`` config of a run, with the invocation's own keys (``trainer.resume``,
    ``trainer.stop_after``) and the explicitly overridden :data:`RESUME_FREE` keys taken from
    ``given``. A given placeholder of :data:`RESOLVED_AT_LOAD` (``data.protected: null``,
    ``model.output: auto``) is no change: the stored value is what it resolved to.

    Raises:
        ConfigError: naming each explicitly overridden key (or key under an overridden group)
            whose given value differs from the stored one, stored → given.

    Example:
        >>> stored = {"problem": {"tolerance": 0.05}, "trainer": {"steps": 40}}
        >>> given = {"problem": {"tolerance": 0.1}, "trainer": {"steps": 80}}
        >>> resumed_config(stored, given, ["trainer.steps=80"])["trainer"]["steps"]
        80
        >>> try:
        ...     resumed_config(stored, given, ["problem.tolerance=0.1"])
        ... except ConfigError as e:
        ...     print(str(e).splitlines()[-1])
          problem.tolerance: 0.05 -> 0.1
    """
    merged = copy.deepcopy(dict(stored))
    for key in PER_INVOCATION:
        _set(merged, key, _get(given, key))
    diffs = []
    for key in override_keys(overrides):
        old, new = _leaves(_get(stored, key), key), _leaves(_get(given, key), key)
        for path in sorted(set(old) | set(new)):
            a, b = old.get(path, _ABSENT), new.get(path, _ABSENT)
            if path in RESUME_FREE:
                if b is not _ABSENT:
                    _set(merged, path, b)
            elif a != b and not _placeholder(path, b):
                diffs.append(f"{path}: {_show(a)} -> {_show(b)}")
    if diffs:
        raise ConfigError("trainer.resume: the command line changes settings of the run being "
                          "resumed (stored -> given); a resumed run keeps its config (drop "
                          "these overrides, or start a new run):\n  " + "\n  ".join(sorted(diffs)))
    return merged


def is_multirun(args: Sequence[str]) -> bool:
    """Whether a ``scripts/train.py`` command line is a Hydra multirun.

    Example:
        >>> is_multirun(["-m", "seed=0,1"]), is_multirun(["seed=0"])
        (True, False)
    """
    return any(a in ("-m", "--multirun") or a.startswith("hydra.mode=") for a in args)


def last_value(args: Sequence[str], key: str) -> str | None:
    """The value the last ``key=...`` of a command line gives (quotes removed), ``None`` when
    none does.

    Example:
        >>> last_value(["run_dir=a", "seed=1", "run_dir='b'"], "run_dir")
        'b'
    """
    values = [a.split("=", 1)[1].strip("'\"") for a in args if a.startswith(key + "=")]
    return values[-1] if values else None


def hydra_resume_args(argv: Sequence[str]) -> list[str]:
    """The command line, plus what makes Hydra leave a resumed run's directory alone.

    When ``argv`` resumes a run in its own directory (``trainer.resume=<dir>`` or
    ``trainer.resume=true``), ``hydra.output_subdir=null`` (no new ``.hydra/`` record over the
    original run's); for ``trainer.resume=<dir>`` also ``hydra.run.dir=<dir>`` (no new, empty
    run directory). Keys the command line sets itself, and multiruns, are left as they are.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> hydra_resume_args([f"trainer.resume={d}"])[1:] == [
        ...     "hydra.output_subdir=null", f"hydra.run.dir={d}"]
        True
        >>> hydra_resume_args(["trainer.steps=5"])
        ['trainer.steps=5']
    """
    args = list(argv)
    value = last_value(args, "trainer.resume")
    if is_multirun(args) or value is None:
        return args
    in_place = value.lower() == "true" or Path(value).is_dir()
    if in_place and not any(a.startswith("hydra.output_subdir=") for a in args):
        args.append("hydra.output_subdir=null")
    if Path(value).is_dir() and not any(a.startswith("hydra.run.dir=") for a in args):
        args.append(f"hydra.run.dir={value}")
    return args


def hydra_run_dir_args(argv: Sequence[str]) -> list[str]:
    """The command line, plus ``hydra.run.dir=<dir>`` when it sets ``run_dir=<dir>``: Hydra's
    record (``.hydra/``) and log (``train.log``) then land in the run directory, not in a
    stray ``runs/<date>/...``. A command line that sets ``hydra.run.dir`` itself, a null
    ``run_dir`` and multiruns are left as they are.

    Example:
        >>> hydra_run_dir_args(["run_dir=/tmp/r", "seed=1"])
        ['run_dir=/tmp/r', 'seed=1', 'hydra.run.dir=/tmp/r']
        >>> hydra_run_dir_args(["run_dir=null"])
        ['run_dir=null']
    """
    args = list(argv)
    if is_multirun(args) or any(a.startswith("hydra.run.dir=") for a in args):
        return args
    value = last_value(args, "run_dir")
    if value not in (None, "", "null", "None"):
        args.append(f"hydra.run.dir={value}")
    return args


def _get(config: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(config, Mapping) or part not in config:
            return _ABSENT
        config = config[part]
    return config


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    if value is _ABSENT:
        config.pop(last, None)
    else:
        config[last] = value


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    """``{dotted path: value}`` of every leaf under ``prefix`` (none when absent)."""
    if value is _ABSENT:
        return {}
    if not isinstance(value, Mapping):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(_leaves(item, f"{prefix}.{key}"))
    return out


def _placeholder(path: str, given: Any) -> bool:
    """Whether ``given`` is the placeholder a run resolves at ``path`` (no value of its own)."""
    return path in RESOLVED_AT_LOAD and given is not _ABSENT and given == RESOLVED_AT_LOAD[path]


def _show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else repr(value)
