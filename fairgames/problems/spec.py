"""A problem as configs write it: an objective and named constraints in the problem language.

:class:`ProblemSpec` is the plain-data form of ``configs/problem/*.yaml``. :meth:`ProblemSpec.build`
compiles it against a data set's groups into rate expressions and named constraints, which
:class:`fairgames.game.Problem` turns into a game.

Names a statement may read:

* ``tolerance`` — the problem's slack (``problem.tolerance``); ``tolerance_kind`` documents
  whether it is a ``difference`` of two rates, a multiplicative ``ratio`` or an absolute
  ``bound`` on a rate;
* ``protected_group`` — the value of the protected attribute (``data.protected``) that a
  parity protects (``problem.protected_group``; ``null`` picks the least frequent value of the
  training split, e.g. ``Female`` for Adult's ``sex``);
* ``unconstrained_<metric>`` — a metric (any argument-free function, e.g.
  ``unconstrained_error``) of an unconstrained model that the run trains first on the same
  training split (paper 000, Table 3: error ≤ 1.1 × UncError's error);
* ``baseline_<metric>`` / ``baseline_<metric>_<source>`` — a metric (argument-free, e.g.
  ``baseline_tpr``) of the baseline (deployed) model's predictions on the training split's
  labeled rows, or on one source's (``baseline_tpr_d2``: ``tpr(source="d2")``); paper 001's
  churn scenario: recall on D2 ≥ the deployed model's, ``tpr(source="d2") >= baseline_tpr_d2``;
* ``target_loss`` — the loss that fits the data's target (paper 003 §2): ``"squared"`` for a
  real-valued target, ``"bounded_logistic"`` (its Ex. 2, C = 5) for a binary one, as in
  ``group_loss(target_loss)``;
* any name of ``problem.variables``; ``groups`` — the values of the protected attribute, for
  ``sum(... for g in groups)`` and ``for g in groups: ...``; ``thresholds`` — the grid
  𝒵 = {1/N, …, 1} with N = ``grid_size`` (paper 003 §4.1; default 40, the paper's), for
  ``for g in groups, z in thresholds: ...``.

A statement that calls ``churn``, ``win_rate``, ``loss_rate`` or ``win_loss_ratio`` needs a
baseline model: loaded from ``problem.baseline_path`` or trained by the run.

Example:
    >>> spec = ProblemSpec("eo", "error()",
    ...                    {"eo": "for g in groups: tpr(group=g) >= tpr() - tolerance"},
    ...                    tolerance=0.05, tolerance_kind="difference")
    >>> built = spec.build("sex", {"sex": ["Male", "Female"]})
    >>> [c.name for c in built.constraints]
    ['eo[Male]', 'eo[Female]']
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fairgames import rates as R
from fairgames.rates.subsets import LabelIs
from fairgames.rates.thresholds import DEFAULT_GRID_SIZE

from .compiler import Environment, compile_constraint, compile_expression
from .errors import ProblemError
from .functions import FUNCTIONS
from .language import parse
from .syntax import Call, String, called_functions, free_names, walk

TOLERANCE_KINDS = ("difference", "ratio", "bound", "none")
UNCONSTRAINED_PREFIX = "unconstrained_"
BASELINE_PREFIX = "baseline_"
BASELINE_FUNCTIONS = frozenset({"churn", "win_rate", "loss_rate", "win_loss_ratio"})
RESERVED = ("tolerance", "protected_group", "groups", "thresholds", "target_loss")
# The loss ``target_loss`` names for each label kind (paper 003: least squares for a real
# target, the bounded logistic loss of its Ex. 2 for a binary one).
TARGET_LOSSES = {"real": "squared", "binary": "bounded_logistic"}
# The games of paper 003's reduction a problem can name (``reduction``): the constraints of
# fairgames.fair_regression.reduction.CONSTRAINTS (problems does not import game; a test
# holds the two equal).
REDUCTION_GAMES = (None, "sp", "bgl")
# Losses paper 003 defines for predictions in [0, 1] (the others are margin losses on scores).
BOUNDED_LOSSES = frozenset({"squared", "absolute", "bounded_logistic"})


# Each kind's allowed tolerances: (lowest, whether it is allowed, highest, whether it is
# allowed, words).
TOLERANCE_RANGES = {
    "difference": (0.0, True, 1.0, False, "is a difference of rates and must lie in [0, 1) "
                   "(two rates differ by less than 1: at 1 or more the constraint holds for "
                   "any model)"),
    "ratio": (0.0, False, math.inf, False, "is a ratio and must be > 0"),
    "bound": (0.0, True, 1.0, True, "bounds a rate and must lie in [0, 1]"),
}


def _check_tolerance(name: str, kind: str, tolerance: float, readers: Sequence[str]) -> None:
    """A tolerance outside its kind's range states a different problem than its name says
    (a negative difference demands the protected group do *better*; a difference of 1 or
    more is vacuous), so it is refused, naming the constraints that read it."""
    where = (f"problem {name!r}, constraint{'s' if len(readers) > 1 else ''} "
             f"{', '.join(map(repr, readers))} (tolerance_kind={kind})" if readers
             else f"problem {name!r} (tolerance_kind={kind})")
    if not math.isfinite(tolerance):
        raise ProblemError(f"{where}: tolerance must be finite, got {tolerance}")
    if kind not in TOLERANCE_RANGES:
        return
    low, low_closed, high, high_closed, words = TOLERANCE_RANGES[kind]
    low_ok = tolerance >= low if low_closed else tolerance > low
    high_ok = tolerance <= high if high_closed else tolerance < high
    if not (low_ok and high_ok):
        raise ProblemError(f"{where}: tolerance {words}, got {tolerance}")


@dataclass
class BuiltProblem:
    """A compiled problem: the objective to minimise and the named constraints.

    Example:
        >>> spec = ProblemSpec("dp", "error()",
        ...                    {"dp": "ppr(group=protected_group) >= ppr() - 0.05"})
        >>> built = spec.build("sex", {"sex": ["Male", "Female"]},
        ...                    group_counts={"Male": 700, "Female": 300})
        >>> print(built.objective)
        +1·E[error | all]
        >>> print(built.constraints[0].expression)
        +1·E[predicted_positive | all] -1·E[predicted_positive | group('sex', 'Female')] -0.05
    """

    objective: R.Expression
    constraints: list[R.Constraint]
    variables: dict[str, object]
    group_values: dict[str, list[str]] = field(default_factory=dict)
    """The data set's attribute → value names it was compiled against (pass them to
    ``Problem(group_values=...)`` so that batches need not repeat them)."""


@dataclass
class ProblemSpec:
    """An objective and constraints as statements of the problem language.

    Args:
        name: the problem's name (for logs and results).
        objective: an expression to minimise, e.g. ``"1 - fmeasure()"``.
        constraints: name → statement (or a list of statements, named ``c0, c1, ...``).
        tolerance: the value of the name ``tolerance``.
        tolerance_kind: ``difference``, ``ratio``, ``bound`` or ``none`` (documentation and
            reports; the statement says how the tolerance enters).
        protected_group: the value ``protected_group`` names (a value name or code of the
            protected attribute); ``None``: the least frequent value of the training split.
        variables: more names and their values.
        baseline_path: a saved model to use as the churn baseline (``None``: trained by the run).
        description: one line for reports.
        grid_size: N of the name ``thresholds`` (𝒵 = {1/N, …, 1}).
        reduction: the paper-003 game this problem is, ``"sp"`` (statistical parity of a
            regressor, its problem (11)) or ``"bgl"`` (bounded group loss, (4)): what
            ``algorithm=reduction`` plays (on ``tolerance`` and ``grid_size``); ``None``: not
            one of them.
        objective_surrogate: the surrogate θ sees the (affine) objective through by default
            for this problem (``"logistic"``: the cross-entropy for an error objective), where
            the run leaves ``algorithm.objective_surrogate`` null and the algorithm's θ trains
            on surrogates; ``None``: the constraints' own. A measured recommendation
            (benchmarks/results/solved_by_default.discussion.md), not part of the problem's meaning.

    Example:
        >>> spec = ProblemSpec("dp", "error()",
        ...                    {"dp": "ppr(group=protected_group) >= ppr() - tolerance"},
        ...                    tolerance=0.05, tolerance_kind="difference")
        >>> sorted(spec.free_names()), spec.needs_baseline()
        (['protected_group', 'tolerance'], False)
        >>> built = spec.build("sex", {"sex": ["Male", "Female"]},
        ...                    group_counts={"Male": 700, "Female": 300})
        >>> [c.name for c in built.constraints], built.variables
        (['dp'], {'tolerance': 0.05, 'protected_group': 'Female'})
        >>> ProblemSpec("bad", "error()", {"tpr": "tpr(group=1) >= tpr() - tolerance"},
        ...             tolerance=1.5, tolerance_kind="difference")
        Traceback (most recent call last):
        ...
        fairgames.problems.errors.ProblemError: problem 'bad', constraint 'tpr' ... [0, 1) ...
    """

    name: str
    objective: str
    constraints: Mapping[str, str] | Sequence[str] = field(default_factory=dict)
    tolerance: float | None = None
    tolerance_kind: str = "none"
    protected_group: str | int | None = None
    variables: Mapping[str, object] = field(default_factory=dict)
    baseline_path: str | None = None
    description: str = ""
    grid_size: int = DEFAULT_GRID_SIZE
    reduction: str | None = None
    objective_surrogate: str | None = None

    def __post_init__(self) -> None:
        if self.reduction not in REDUCTION_GAMES:
            raise ProblemError(f"problem {self.name!r}: reduction must be one of "
                               f"{list(REDUCTION_GAMES)}, got {self.reduction!r}")
        if isinstance(self.grid_size, bool) or not isinstance(self.grid_size, int) or \
                self.grid_size < 1:
            raise ProblemError(f"problem {self.name!r}: grid_size must be a positive whole "
                               f"number (N of the thresholds 1/N, ..., 1), got "
                               f"{self.grid_size!r}")
        if not isinstance(self.objective, str):
            raise ProblemError(f"problem {self.name!r}: objective must be a string, got "
                               f"{type(self.objective).__name__}")
        if self.tolerance_kind not in TOLERANCE_KINDS:
            raise ProblemError(f"problem {self.name!r}: tolerance_kind must be one of "
                               f"{TOLERANCE_KINDS}, got {self.tolerance_kind!r}")
        if self.tolerance is not None and (isinstance(self.tolerance, bool) or not isinstance(
                self.tolerance, numbers.Real)):
            raise ProblemError(f"problem {self.name!r}: tolerance must be a number, got "
                               f"{self.tolerance!r}")
        clash = sorted(set(self.variables) & set(RESERVED))
        if clash:
            raise ProblemError(f"problem {self.name!r}: variables may not redefine {clash} "
                               "(set problem.tolerance / problem.protected_group instead)")
        for key in self.variables:
            if key.startswith(UNCONSTRAINED_PREFIX):
                raise ProblemError(f"problem {self.name!r}: variable {key!r} is reserved; "
                                   f"names starting with {UNCONSTRAINED_PREFIX!r} are computed "
                                   "by the run")
        for cname, text in self.statements():
            if not isinstance(text, str):
                raise ProblemError(f"problem {self.name!r}: constraint {cname!r} must be a "
                                   f"string, got {type(text).__name__}")
        readers = self._readers()
        if self.tolerance is not None:
            _check_tolerance(self.name, self.tolerance_kind, float(self.tolerance),
                             [] if readers is None else readers.get("tolerance", []))
        if (self.protected_group is not None and readers is not None
                and "protected_group" not in readers):
            raise ProblemError(
                f"problem {self.name!r}: protected_group={self.protected_group!r} is set but "
                "no statement reads protected_group (the objective and constraints "
                f"{[c for c, _ in self.statements()]} do not), so it would be ignored; unset "
                "problem.protected_group, or use a problem that reads it (e.g. "
                "fmeasure_parity)")

    def _readers(self) -> dict[str, list[str]] | None:
        """Name → the statements that read it (``"objective"`` or a constraint's name);
        ``None`` when a statement does not parse (:meth:`build` reports it, underlined)."""
        out: dict[str, list[str]] = {}
        try:
            for where, tree in self._trees():
                for n in free_names(tree):
                    out.setdefault(n, []).append(where)
        except ProblemError:
            return None
        return out

    # ------------------------------------------------------------------ inspection
    def statements(self) -> list[tuple[str, str]]:
        """``[(constraint name, statement)]`` in order."""
        if isinstance(self.constraints, Mapping):
            return [(str(k), v) for k, v in self.constraints.items()]
        if isinstance(self.constraints, str):
            raise ProblemError(f"problem {self.name!r}: constraints must be a list or a "
                               "mapping of statements, not one string")
        return [(f"c{i}", v) for i, v in enumerate(self.constraints)]

    def _trees(self):
        yield "objective", parse(self.objective, "expression")
        for cname, text in self.statements():
            yield cname, parse(text, "constraint")

    def free_names(self) -> set[str]:
        """Every name the statements read (parsing them; syntax errors raise here)."""
        out: set[str] = set()
        for _, tree in self._trees():
            out |= free_names(tree)
        return out

    def unconstrained_metrics(self) -> list[str]:
        """Metrics of an unconstrained model the statements need, e.g. ``["error"]``."""
        out = []
        for n in sorted(self.free_names()):
            if n.startswith(UNCONSTRAINED_PREFIX):
                metric = n[len(UNCONSTRAINED_PREFIX):]
                fn = FUNCTIONS.get(metric)
                if fn is None or fn.params:
                    known = sorted(k for k, f in FUNCTIONS.items() if not f.params)
                    raise ProblemError(f"problem {self.name!r}: {n!r} names no metric; use "
                                       f"{UNCONSTRAINED_PREFIX}<metric> with one of {known}")
                out.append(metric)
        return out

    def baseline_metrics(self, sources: Sequence[str] | None) -> dict[str, str]:
        """``{name: expression}`` of the ``baseline_<metric>[_<source>]`` names the statements
        read: what the run evaluates on the baseline model's training-split predictions.

        Example:
            >>> ProblemSpec("cr", "error()", {"r": "tpr(source='d2') >= baseline_tpr_d2"}
            ...             ).baseline_metrics(["d1", "d2"])
            {'baseline_tpr_d2': 'tpr(source="d2")'}
        """
        out = {}
        for n in sorted(self.free_names()):
            if n.startswith(BASELINE_PREFIX) and n not in self.variables:  # a variable wins
                out[n] = self._baseline_metric(n, list(sources or []))
        return out

    def _baseline_metric(self, name: str, sources: list[str]) -> str:
        rest = name[len(BASELINE_PREFIX):]
        candidates = [(rest, None)] + [(rest[:-len(s) - 1], s) for s in sources
                                       if rest.endswith("_" + s)]
        for metric, src in candidates:
            fn = FUNCTIONS.get(metric)
            if fn is not None and not fn.params:
                return f"{metric}()" if src is None else f'{metric}(source="{src}")'
        known = sorted(k for k, f in FUNCTIONS.items() if not f.params)
        raise ProblemError(f"problem {self.name!r}: {name!r} names no metric; use "
                           f"{BASELINE_PREFIX}<metric> or {BASELINE_PREFIX}<metric>_<source> "
                           f"with a metric of {known} and a source of "
                           f"[{', '.join(sources)}]")

    def needs_baseline(self) -> bool:
        """Whether a statement reads a baseline model's predictions (churn, wins, losses)
        or a ``baseline_<metric>`` value."""
        return (any(called_functions(t) & BASELINE_FUNCTIONS for _, t in self._trees())
                or any(n.startswith(BASELINE_PREFIX) and n not in self.variables
                        for n in self.free_names()))

    def bounded_predictions(self) -> bool:
        """Whether the statements assume predictions in [0, 1] (paper 003's f: 𝒳 → [0, 1]):
        they read thresholds (``score_at_least``), ``target_loss`` or a group loss bounded on
        [0, 1] (``squared``, ``absolute``, ``bounded_logistic``). ``model.output=auto`` puts
        a sigmoid head on such a problem's model.

        Example:
            >>> ProblemSpec("bgl", "group_loss('squared')").bounded_predictions()
            True
            >>> ProblemSpec("eo", "error()").bounded_predictions()
            False
        """
        for _, tree in self._trees():
            if "target_loss" in free_names(tree) or "score_at_least" in called_functions(tree):
                return True
            for node in walk(tree):
                if isinstance(node, Call) and node.func == "group_loss" and any(
                        isinstance(a, String) and a.value in BOUNDED_LOSSES
                        for a in (*node.args, *(k.value for k in node.keywords))):
                    return True
        return False

    def uses_protected_group(self) -> bool:
        """Whether a statement reads the name ``protected_group``."""
        return "protected_group" in self.free_names()

    # ------------------------------------------------------------------ compilation
    def resolve_protected_group(self, protected: str,
                                group_counts: Mapping[str, int] | None) -> str | int:
        """``protected_group``, or the least frequent value of ``group_counts`` if unset."""
        if self.protected_group is not None:
            return self.protected_group
        if not group_counts:
            raise ProblemError(f"problem {self.name!r} reads protected_group but it is unset "
                               f"and the group counts of {protected!r} are unknown; set "
                               "problem.protected_group")
        return min(group_counts, key=lambda k: (group_counts[k], k))

    def build(self, protected: str | None, group_names: Mapping[str, Sequence[str]],
              values: Mapping[str, object] | None = None,
              group_counts: Mapping[str, int] | None = None,
              label_kind: str | None = None, sources: Sequence[str] | None = None,
              unlabeled: Sequence[str] = ()) -> BuiltProblem:
        """Compile against a data set's groups.

        Args:
            protected: the attribute ``group=`` refers to (``data.protected``).
            group_names: attribute → value names of the data set.
            values: run-computed names (``unconstrained_error``, ...).
            group_counts: value name → count on the training split of ``protected`` (used
                when ``protected_group`` is unset).
            label_kind: the target's kind (``"binary"`` or ``"real"``): what ``target_loss``
                names; a statement reading it needs it.
            sources: the data's source names (``[]``: one data set; ``None``: unknown), so
                that ``source=`` is checked before training (paper 001).
            unlabeled: the sources without labels: a rate reading labels there is refused.

        Raises:
            ProblemSyntaxError: with the offending token underlined.
            ProblemError: a missing run-computed value or an unusable definition.
        """
        if protected is not None and group_names and protected not in group_names:
            raise ProblemError(f"protected attribute {protected!r} is not in the data; it has "
                               f"{sorted(group_names)}")
        variables: dict[str, object] = dict(self.variables)
        if self.tolerance is not None:
            variables["tolerance"] = float(self.tolerance)
        names = self.free_names()
        if "protected_group" in names:
            if protected is None:
                raise ProblemError(f"problem {self.name!r} reads protected_group but no "
                                   "protected attribute is set (data.protected)")
            variables["protected_group"] = self.resolve_protected_group(protected, group_counts)
        values = dict(values or {})
        for metric in self.unconstrained_metrics():
            key = UNCONSTRAINED_PREFIX + metric
            if key not in values:
                raise ProblemError(f"problem {self.name!r} reads {key!r}, which the run "
                                   "computes by training an unconstrained model first; none "
                                   "was given")
        for key in self.baseline_metrics(sources):
            if key not in values:
                raise ProblemError(f"problem {self.name!r} reads {key!r}, which the run "
                                   "computes from the baseline model's predictions on the "
                                   "training split; none was given")
        variables.update(values)
        if "target_loss" in names:
            if label_kind not in TARGET_LOSSES:
                raise ProblemError(f"problem {self.name!r} reads target_loss, which names the "
                                   f"loss of the data's target; give the label kind (one of "
                                   f"{sorted(TARGET_LOSSES)}), got {label_kind!r}")
            variables["target_loss"] = TARGET_LOSSES[label_kind]
        env = Environment(protected, group_names, variables, grid_size=self.grid_size,
                          sources=sources, unlabeled=unlabeled)
        objective = compile_expression(self.objective, env, f"objective of {self.name!r}")
        constraints: list[R.Constraint] = []
        for cname, text in self.statements():
            constraints += compile_constraint(text, env, cname)
        if label_kind == "real":
            self._refuse_binary_rates(objective, constraints)
        seen: set[str] = set()
        for c in constraints:
            if c.name in seen:
                raise ProblemError(f"problem {self.name!r}: two constraints are named "
                                   f"{c.name!r}")
            seen.add(c.name)  # type: ignore[arg-type]
        return BuiltProblem(objective, constraints, variables,
                            {k: [str(v) for v in vs] for k, vs in group_names.items()})

    def _refuse_binary_rates(self, objective: R.Expression,
                             constraints: Sequence[R.Constraint]) -> None:
        """A real-valued target has no classes: refuse, before training, the statements that
        read a binary label (``tpr``, ``error``, ``label=``, ...), naming them."""
        def binary(e: R.Expression) -> bool:
            return any((lf.event is not None and lf.event.uses_label)
                       or any(isinstance(x, LabelIs) for x in lf.where.literals())
                       for lf in R.leaves_of([e]))
        where = (["objective"] if binary(objective) else []) + list(dict.fromkeys(
            str(c.name).split("[")[0] for c in constraints if binary(c.expression)))
        if where:
            raise ProblemError(
                f"problem {self.name!r}: {', '.join(where)} read a binary label (error, tpr, "
                "precision, label=, ...), but the data's target is real-valued; train a "
                "regression problem (sp_regression, bounded_group_loss, group_loss(...) "
                "statements) or pick a binary target (data.target=...)")

    @staticmethod
    def from_mapping(d: Mapping[str, object]) -> ProblemSpec:
        """From a config mapping (unknown keys are an error naming them).

        Example:
            >>> ProblemSpec.from_mapping({"name": "f1", "objective": "1 - fmeasure()"}).name
            'f1'
        """
        allowed = set(ProblemSpec.__dataclass_fields__)
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ProblemError(f"unknown problem key(s) {unknown}; known: {sorted(allowed)}")
        return ProblemSpec(**d)  # type: ignore[arg-type]
