"""The seam between the run pipeline and a paper family: methods and extensions.

The pipeline (:mod:`fairgames.train.run`) is load → helpers → problem → method → solutions →
report. What a paper family adds plugs in here, by name, without an edit of the pipeline:

* a **method** (:class:`Method`) is how a run trains: the game (the default,
  :class:`fairgames.train.game.GameMethod`), paper 003's reduction (``algorithm=reduction``),
  paper 004's ideal algorithm (``robust=soft_assignments_ideal``). A config key names it
  (:attr:`Method.key`, e.g. ``algorithm.name``). It receives the loaded run and its compiled
  problem and returns a :class:`Trained`: the candidates the pipeline scores, selects and
  recommends, the model :class:`~fairgames.train.run.RunResult` hands back, and its
  ``training`` record, built by the one writer :func:`training_record` (checked against the
  results schema);
* an **extension** (:class:`Extension`) is what a family adds to the default game and to every
  run's report, read from its own config group: players, logged scalars, state snapshotted
  beside the model, a solution selector, a ``results.json`` block and its line on the command
  line (``robust=dro``).

A family registers on import: :func:`register_method`, :func:`register_extension`,
:func:`register_group` (its config group, a field of the run's root schema),
:func:`register_tune_step` (a step size ``trainer.tune_grid`` may scale). The package's own
families are imported with :mod:`fairgames.train` (:mod:`fairgames.families`); a family of
your own is a module named by the ``families`` config key (imported before the config is
composed) or installed under the ``fairgames.families`` entry-point group.

Example:
    >>> class Constant(Method):
    ...     name = "constant_demo"
    >>> _ = register_method(Constant())
    >>> type(method_for({"algorithm": {"name": "constant_demo"}})).__name__
    'Constant'
    >>> method_for({"algorithm": {"name": "proxy_lagrangian"}}) is None
    True
    >>> unregister_method(Constant())
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from fairgames.game.players import ConfigKey, Player

from .config import ConfigError, store_schema
from .config.checks import Checks, register_validator
from .config.checks import register_group as register_check_group
from .config.checks import unregister_group as unregister_check_group
from .registry import (
    EXTENSIONS,
    FAMILY_GROUPS,
    METHODS,
    TUNE_STEPS,
    FamilyGroup,
    extensions,
    family_groups,
    method_for,
    methods,
    results_schemas,
    tune_steps,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from .context import Helpers, RunContext, RunInputs, RunProblem
    from .evaluation import SolutionEvaluator
    from .loop.engine import Engine
    from .loop.logger import RunLogger
    from .results.solutions import Candidates, Selector


# --------------------------------------------------------------------------- methods
@dataclass
class Trained:
    """What a method hands the pipeline.

    Attributes:
        candidates: the iterates the pipeline scores on every split and chooses the final,
            best-iterate, stochastic and recommended solutions from (``None`` when the run
            stopped early).
        model: the model :class:`~fairgames.train.run.RunResult` hands back.
        record: ``choice -> results.json's training section``: the method's end state as
            :func:`training_record` writes it, given how the solutions were chosen.
        engine: the training loop, when the method has one (``RunResult.engine``).
        logger: an open TensorBoard logger the final metrics go to (the pipeline closes it);
            ``None``: the pipeline opens its own.
        write: the method's own outputs beside the pipeline's (plots, curves):
            ``write(run_dir, results, logger)``.
        metadata: plain data saved in every solution file (e.g. the grid it was rounded to).
        steps: the step the final metrics are logged at.
        stopped: the run stopped before its end (``trainer.stop_after``), with a checkpoint.
    """

    candidates: Candidates | None
    model: torch.nn.Module
    record: Callable[[Mapping[str, Any]], dict[str, Any]]
    engine: Engine | None = None
    logger: RunLogger | None = None
    write: Callable[[Path, Mapping[str, Any], RunLogger], None] | None = None
    metadata: Mapping[str, Any] | None = None
    steps: int = 0
    stopped: bool = False


class Method:
    """How a run trains. Subclass it, set :attr:`name` (and :attr:`key`), override
    :meth:`train`; register an instance with :func:`register_method`.

    Attributes:
        name: the value of :attr:`key` that selects the method.
        key: the dotted config key that names it (``algorithm.name``: an ``algorithm``
            option; ``robust.name``: a ``robust`` option).
        config_keys: its own settings in ``key``'s group (``algorithm.<name>``), typed, with
            their defaults and rules: composed by Hydra and checked like the players' keys.
        players: the player classes, by role, whose declared keys it reads (their keys are
            then accepted for it; e.g. ``radius`` and ``multiplier_lr`` of an
            exponentiated-gradient λ).
        helpers: it plays with the helper models (the unconstrained model of
            ``unconstrained_<metric>`` names, a churn baseline).
        surrogates: θ sees surrogate rates (the problem's ``objective_surrogate`` applies);
            ``False``: it fits the exact Lagrangian.
        raw_scores: its iterates are raw scores deployed as they are (``model.output=auto``
            keeps ``score`` even where the problem assumes predictions in [0, 1]).
    """

    name: str = ""
    key: str = "algorithm.name"
    config_keys: tuple[ConfigKey, ...] = ()
    players: ClassVar[Mapping[str, type[Player]]] = {}
    helpers: bool = False
    surrogates: bool = True
    raw_scores: bool = False

    def prepare(self, inputs: RunInputs) -> RunInputs:
        """The run's inputs as this method plays them (e.g. another default recommendation);
        before anything is loaded."""
        return inputs

    def train(self, ctx: RunContext, problem: RunProblem, helpers: Helpers) -> Trained:
        """Train on ``ctx`` (the loaded run: splits on the device, inputs, checkpoint) and
        ``problem`` (compiled); ``helpers``: the helper models' values and baseline."""
        raise NotImplementedError(f"{type(self).__name__}.train")

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        """What the command line prints about a finished run of this method."""
        return []


def register_method(method: Method, option: Mapping[str, Any] | None = None) -> Method:
    """Make ``method`` selectable by ``method.key=method.name``; ``option``: also its config
    group option (``<group>=<name>`` on the command line, Hydra's ConfigStore), e.g.
    ``{"name": "my_method", "my_key": 1}``. Registering a name again replaces it.
    Returns ``method``."""
    if not method.name or "." not in method.key:
        raise ValueError(f"a method needs a name and a dotted key (e.g. algorithm.name), got "
                         f"name={method.name!r}, key={method.key!r}")
    METHODS[(method.key, method.name)] = method
    if option is not None:
        from hydra.core.config_store import ConfigStore

        ConfigStore.instance().store(group=method.key.split(".")[0], name=method.name,
                                     node=dict(option))
    _schema_changed()
    return method


def unregister_method(method: Method) -> None:
    """Forget a method registered by :func:`register_method`."""
    METHODS.pop((method.key, method.name), None)
    _schema_changed()


# --------------------------------------------------------------------------- extensions
class Extension:
    """What a family adds to the default game and to every run's report, read from its own
    config group (:attr:`group`, in ``ctx.inputs.groups``). Every hook adds nothing unless
    overridden; register an instance with :func:`register_extension`.

    Attributes:
        group: the config group it reads (registered with :func:`register_group`); its
            ``results.json`` block, if any, is ``results[group]``.
        results_schema: the JSON schema of that block (a family outside the package declares
            it; the package's own blocks are in the shipped ``results.schema.json``).
    """

    group: str = ""
    results_schema: ClassVar[Mapping[str, Any] | None] = None

    def settings(self, ctx: RunContext) -> Any:
        """This run's settings of :attr:`group` (``None``: the run has none)."""
        return ctx.inputs.groups.get(self.group)

    def players(self, ctx: RunContext) -> list[Player]:
        """Players the game adds beside θ's and the problem's."""
        return []

    def log_scalars(self, ctx: RunContext, problem: RunProblem, evaluator: SolutionEvaluator
                    ) -> Callable[[torch.nn.Module], Mapping[str, float | None]] | None:
        """TensorBoard scalars of the model at each log interval (the loop's only host
        reads), or ``None``."""
        return None

    def snapshot_state(self, ctx: RunContext, game: Any) -> torch.nn.Module | None:
        """State read afresh and snapshotted beside the model at every snapshot (its buffers),
        or ``None``; ``game`` is the :class:`~fairgames.game.ConstrainedOptimizer`."""
        return None

    def selector(self, ctx: RunContext, problem: RunProblem, trained: Trained
                 ) -> Selector | None:
        """Constraint values that choose the best iterate and the recommended solution in
        place of the problem's own, or ``None``."""
        return None

    def report(self, ctx: RunContext, problem: RunProblem, evaluator: SolutionEvaluator,
               recommended: torch.nn.Module, selector: Selector | None
               ) -> dict[str, Any] | None:
        """``results.json[group]`` for the recommended solution, or ``None``."""
        return None

    def verdict(self, results: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The verdict of the constraints the run was asked to meet, where the family asks
        others than the problem's own (paper 004: the robust ones), merged over
        ``results["verdict"]`` (its ``constraints``, and a ``judged`` sentence saying what they
        are); ``None``: the problem's own constraints stand. Read after :meth:`report`'s
        block is in ``results``."""
        return None

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        """What the command line prints about a finished run."""
        return []


def register_extension(extension: Extension) -> Extension:
    """Add ``extension`` to every run (it decides from its settings whether it acts);
    registering its group again replaces it. Returns ``extension``."""
    if not extension.group:
        raise ValueError("an extension needs the config group it reads (group=...)")
    EXTENSIONS[extension.group] = extension
    _schema_changed()
    return extension


def unregister_extension(extension: Extension) -> None:
    """Forget an extension registered by :func:`register_extension`."""
    EXTENSIONS.pop(extension.group, None)
    _schema_changed()


def summary_lines(results: Mapping[str, Any]) -> list[str]:
    """What the registered extensions, then the run's method, print about a finished run."""
    lines = [line for e in EXTENSIONS.values() for line in e.lines(results)]
    method = method_for(results.get("config") or {})
    return lines + (method.lines(results) if method is not None else [])



def one_extension(what: str, answer: Callable[[Extension], T | None]) -> T | None:
    """The one extension's non-``None`` ``answer`` (``None`` when none gives one), for a part of
    the run only one family may own, e.g. the solutions' selector.

    Raises:
        ConfigError: two extensions answer; the message says ``what`` they both do.
    """
    found = [(ext.group, a) for ext in extensions() if (a := answer(ext)) is not None]
    if len(found) > 1:
        raise ConfigError(f"two extensions {what} ({', '.join(g for g, _ in found)}): use one "
                          "of them at a time")
    return found[0][1] if found else None

# --------------------------------------------------------------------------- config groups
def register_group(name: str, schema: type,
                   validator: Callable[[Any, Checks], None] | None = None) -> None:
    """A family's config group ``name`` (``robust``): a field of the run's root schema typed by
    ``schema`` (so ``name=<option>`` and ``name.<key>=...`` compose, and an unknown key is
    refused), with ``validator(cfg, check)`` among the value checks."""
    if not dataclasses.is_dataclass(schema):
        raise ValueError(f"config group {name!r}: its schema must be a dataclass")
    FAMILY_GROUPS[name] = FamilyGroup(name, schema)
    register_check_group(name, schema)
    if validator is not None:
        register_validator(name, validator)
    _schema_changed()


def unregister_group(name: str) -> None:
    """Forget a family's config group registered by :func:`register_group`."""
    FAMILY_GROUPS.pop(name, None)
    unregister_check_group(name)
    _schema_changed()


def register_tune_step(name: str, key: str, default: Sequence[float] = (1.0,)) -> None:
    """A step size ``trainer.tune_grid.<name>`` sweeps as multiples of config ``key`` (e.g.
    ``robust_lr`` of ``robust.lr``); ``default``: its factors in the default grid."""
    TUNE_STEPS[name] = (key, tuple(float(f) for f in default))
    _schema_changed()


def _schema_changed() -> None:
    """Re-register the run's schema with Hydra (its groups, the algorithm group's keys and the
    tune grid's default follow the registry)."""
    store_schema()


# --------------------------------------------------------------------------- the record
TRAINING_GAME_KEYS = ("preset_note", "surrogate", "objective_surrogate", "temperature")


def training_record(*, steps: int, preset: str, multipliers: Mapping[str, float],
                    slacks: Mapping[str, float], likely_infeasible: bool, seconds: float,
                    snapshots: Iterable[int], choice: Mapping[str, Any],
                    constraint_data: Mapping[str, Any], problem: Mapping[str, Any],
                    game: Mapping[str, Any] | None = None,
                    objective_weight: float | None = None,
                    early_stop: Mapping[str, Any] | None = None,
                    unconstrained: Mapping[str, Any] | None = None,
                    baseline: Mapping[str, Any] | None = None,
                    own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``results.json``'s ``training`` section, in its one order, checked against the
    shipped schema: the end state (``steps``, ``preset``, ``multipliers``, ``slacks``,
    ``likely_infeasible``, ``seconds``, the ``snapshots``' steps), how the solutions were
    chosen (``choice``: ``best_iterate``, ``stochastic``, ``recommended``), the helper models
    (``unconstrained``, ``baseline``), where the constraints were played
    (``constraint_data``) and the game's rows (``problem``). ``game``: the surrogate game's
    own keys (:data:`TRAINING_GAME_KEYS`), with ``objective_weight`` and ``early_stop``;
    ``own``: the method's own block(s) (e.g. ``{"reduction": ...}``).

    Raises:
        jsonschema.ValidationError: the record does not fit the schema (a method's bug).

    Example:
        >>> record = training_record(
        ...     steps=3, preset="demo", multipliers={"c": 0.5}, slacks={},
        ...     likely_infeasible=False, seconds=0.1, snapshots=[1, 2], choice={},
        ...     constraint_data=whole_training_split(10),
        ...     problem={"constraints": ["c"], "multiplier_rows": ["c"], "slacks": []})
        >>> list(record)[:4]
        ['steps', 'preset', 'multipliers', 'slacks']
    """
    game = dict(game or {})
    unknown = sorted(set(game) - set(TRAINING_GAME_KEYS))
    if unknown:
        raise ValueError(f"training_record: unknown game keys {unknown}")
    record: dict[str, Any] = {"steps": int(steps), "preset": preset,
                              **{k: game[k] for k in TRAINING_GAME_KEYS if k in game},
                              "multipliers": dict(multipliers)}
    if objective_weight is not None:
        record["objective_weight"] = float(objective_weight)
    record.update({"slacks": dict(slacks), "likely_infeasible": bool(likely_infeasible),
                   "seconds": float(seconds), "snapshots": {"steps": list(snapshots)}})
    if game:
        record["early_stop"] = None if early_stop is None else dict(early_stop)
    record.update({**choice, "unconstrained": unconstrained, "baseline": baseline,
                   "constraint_data": dict(constraint_data), "problem": dict(problem),
                   **(own or {})})
    _check_training(record)
    return record


def whole_training_split(rows: int) -> dict[str, Any]:
    """``training_record``'s ``constraint_data`` of a method that plays the constraints on the
    whole training split of ``rows`` rows (no held-out rows, no rows file)."""
    return {"split": "train", "theta_rows": int(rows), "heldout_rows": 0, "rows_file": None}


def _check_training(record: Mapping[str, Any]) -> None:
    from .results.report import check_section

    check_section("training", record)


__all__ = ["Extension", "FamilyGroup", "Method", "Trained", "extensions", "family_groups",
           "method_for", "methods", "one_extension", "register_extension", "register_group",
           "register_method", "register_tune_step", "results_schemas", "summary_lines",
           "training_record", "tune_steps", "unregister_extension", "unregister_group",
           "unregister_method", "whole_training_split"]
