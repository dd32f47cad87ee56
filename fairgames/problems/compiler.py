"""Build parsed statements into :mod:`fairgames.rates` expressions and constraints.

The compiler walks the syntax tree of :mod:`fairgames.problems.language` in an
:class:`Environment` that says which attribute ``group=`` refers to (``data.protected``), what
values it has (so ``group="Femal"`` fails before training, pointing at the token), and what
the names of the statement are bound to (``tolerance``, ``protected_group``,
``unconstrained_error``, ... and ``groups``: the values of the protected attribute).

Values are numbers, strings (group value names) or rate expressions; arithmetic on
expressions is the rates algebra's, so ``fmeasure() - fmeasure(group=1)`` is a difference of
ratio nodes and ``2 * tpr()`` scales a leaf, while ``tpr() * fpr()`` is refused (a product of
two rates is not a rate expression).

Example:
    >>> env = Environment("sex", {"sex": ["Male", "Female"]}, {"tolerance": 0.05})
    >>> c, = compile_constraint("tpr(group='Female') >= tpr(group='Male') - tolerance", env,
    ...                         "eo")
    >>> c.name, c.sense
    ('eo', '<=')
    >>> [c.name for c in compile_constraint(
    ...     "for g in groups: ppr(group=g) <= ppr() + tolerance", env, "dp")]
    ['dp[Male]', 'dp[Female]']
    >>> sp = compile_constraint("for g in groups, z in thresholds: "
    ...                         "score_at_least(z, group=g) <= score_at_least(z) + tolerance",
    ...                         Environment("sex", {"sex": ["Male", "Female"]},
    ...                                     {"tolerance": 0.05}, grid_size=2), "sp")
    >>> [c.name for c in sp]
    ['sp[Male,0.5]', 'sp[Male,1]', 'sp[Female,0.5]', 'sp[Female,1]']
"""

from __future__ import annotations

import difflib
import itertools
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fairgames import rates as R
from fairgames.rates.thresholds import DEFAULT_GRID_SIZE

from .errors import ProblemSyntaxError
from .functions import AGGREGATORS, FUNCTIONS, Function, known_functions
from .language import parse
from .syntax import Binary, Call, Compare, Comprehension, ForAll, Name, Node, Number, String, Unary

Value = int | float | str | R.Expression
GROUPS = "groups"
THRESHOLDS = "thresholds"
ITERABLES = (GROUPS, THRESHOLDS)


@dataclass
class Environment:
    """What statements are compiled against.

    Args:
        protected: the attribute ``group=`` refers to (``data.protected``); ``None`` when the
            problem uses no group.
        group_names: attribute → value names in code order, as the data set gives them; an
            attribute missing here is not checked (its values are unknown until data loads).
        variables: name → number or string (``tolerance``, ``protected_group``, ...).
        grid_size: N of the grid ``thresholds`` = 𝒵 = {1/N, …, 1} (paper 003 §4.1; its
            values are exactly :func:`fairgames.rates.threshold_grid`'s).
        sources: the names of the data's sources (several data sets in one problem, paper
            001) that ``source=`` may name; ``None``: not checked (unknown until data loads);
            ``[]``: one data set (``source=`` is refused).
        unlabeled: the sources without labels: a rate that reads labels (``tpr``, ``error``,
            ``label=``, ...) must name a labeled source with ``source=``.

    Example:
        >>> env = Environment("sex", {"sex": ["Male", "Female"]}, {"tolerance": 0.05})
        >>> env.names()
        ['groups', 'thresholds', 'tolerance']
        >>> constraints = compile_constraint("for g in groups: tpr(group=g) >= tpr() - tolerance",
        ...                                  env, "eo")
        >>> [c.name for c in constraints]
        ['eo[Male]', 'eo[Female]']
    """

    protected: str | None = None
    group_names: Mapping[str, Sequence[str]] = field(default_factory=dict)
    variables: Mapping[str, object] = field(default_factory=dict)
    grid_size: int = DEFAULT_GRID_SIZE
    sources: Sequence[str] | None = None
    unlabeled: Sequence[str] = ()

    def names(self) -> list[str]:
        """The names statements may read: the variables, ``thresholds``, and ``groups`` if
        known."""
        out = set(self.variables) | {THRESHOLDS}
        if self.protected is not None and self.protected in self.group_names:
            out.add(GROUPS)
        return sorted(out)

    def thresholds(self) -> list[float]:
        """The grid 𝒵 = {1/N, …, 1} (:func:`fairgames.rates.threshold_grid`) as Python
        floats."""
        return R.threshold_grid(self.grid_size).tolist()


class _Compiler:
    def __init__(self, source: str, env: Environment) -> None:
        self.source = source
        self.env = env

    def error(self, message: str, node: Node | None = None, pos: int | None = None,
              length: int = 1) -> ProblemSyntaxError:
        if node is not None:
            pos, length = node.pos, node.length
        return ProblemSyntaxError(message, self.source, pos or 0, length)

    # ------------------------------------------------------------------ values
    def value(self, node: Node, scope: Mapping[str, object]) -> Value:
        if isinstance(node, Number):
            return node.value
        if isinstance(node, String):
            return node.value
        if isinstance(node, Name):
            return self.name(node, scope)
        if isinstance(node, Unary):
            v = self.value(node.operand, scope)
            self.check_arithmetic(v, node.operand, node.op)
            return -v if node.op == "-" else v  # type: ignore[operator]
        if isinstance(node, Binary):
            return self.binary(node, scope)
        if isinstance(node, Call):
            return self.call(node, scope)
        if isinstance(node, Comprehension):
            raise self.error("'... for g in groups' is only allowed inside sum(...) or "
                             "mean(...)", node)
        raise self.error(f"a {type(node).__name__} is not a value here", node)

    def name(self, node: Name, scope: Mapping[str, object]) -> Value:
        if node.id in scope:
            return scope[node.id]  # type: ignore[return-value]
        if node.id in self.env.variables:
            v = self.env.variables[node.id]
            if v is None:
                raise self.error(f"{node.id!r} has no value (it is null in the config)", node)
            if isinstance(v, bool) or not isinstance(v, numbers.Real | str):
                raise self.error(f"{node.id!r} must be a number or a string, got "
                                 f"{type(v).__name__}", node)
            return v  # type: ignore[return-value]
        if node.id in ITERABLES:
            raise self.error(f"{node.id!r} can only be looped over: sum(... for x in "
                             f"{node.id}) or 'for x in {node.id}: ...'", node)
        if node.id in FUNCTIONS or node.id in AGGREGATORS:
            raise self.error(f"{node.id!r} is a function; call it: {node.id}()", node)
        known = list(scope) + self.env.names()
        raise self.error(f"unknown name {node.id!r}{_suggest(node.id, known)}; known names: "
                         f"{', '.join(sorted(known)) or '(none)'}", node)

    def check_arithmetic(self, v: Value, node: Node, op: str) -> None:
        if isinstance(v, str):
            raise self.error(f"a string ({v!r}) cannot take part in '{op}'; strings name "
                             "group values, e.g. group=\"Female\"", node)

    def binary(self, node: Binary, scope: Mapping[str, object]) -> Value:
        a = self.value(node.left, scope)
        b = self.value(node.right, scope)
        self.check_arithmetic(a, node.left, node.op)
        self.check_arithmetic(b, node.right, node.op)
        try:
            if node.op == "+":
                return a + b  # type: ignore[operator]
            if node.op == "-":
                return a - b  # type: ignore[operator]
            if node.op == "*":
                return a * b  # type: ignore[operator]
            if isinstance(b, numbers.Real) and b == 0:
                raise self.error("division by zero", node.right)
            return a / b  # type: ignore[operator]
        except (TypeError, ValueError) as e:
            raise self.error(f"cannot compute '{node.op}' here: {e}", node) from None

    # ------------------------------------------------------------------ calls
    def call(self, node: Call, scope: Mapping[str, object]) -> Value:
        if node.func in AGGREGATORS:
            return self.aggregate(node, scope)
        fn = FUNCTIONS.get(node.func)
        if fn is None:
            raise self.error(
                f"unknown function {node.func!r}{_suggest(node.func, known_functions())}; "
                f"known functions: {', '.join(known_functions())}", pos=node.pos,
                length=len(node.func))
        params: dict[str, Value] = {}
        group_arg: tuple[Value, Node] | None = None
        for i, arg in enumerate(node.args):
            if isinstance(arg, Comprehension):
                raise self.error(f"'... for g in groups' belongs inside sum(...) or mean(...), "
                                 f"not {fn.name}(...)", arg)
            if i < len(fn.params):
                params[fn.params[i]] = self.value(arg, scope)
            elif i == len(fn.params):
                group_arg = (self.value(arg, scope), arg)
            else:
                raise self.error(f"{fn.name}() takes at most {len(fn.params) + 1} positional "
                                 f"argument(s): {', '.join(fn.params + ('group',))}", arg)
        kw: dict[str, tuple[Value, Node]] = {}
        for k in node.keywords:
            if k.name not in fn.keywords:
                raise self.error(
                    f"unknown keyword {k.name!r} for {fn.name}()"
                    f"{_suggest(k.name, fn.keywords)}; it takes: {', '.join(fn.keywords)}",
                    pos=k.pos, length=len(k.name))
            if k.name in fn.params:
                if k.name in params:
                    raise self.error(f"{fn.name}() got {k.name!r} twice", pos=k.pos,
                                     length=len(k.name))
                params[k.name] = self.value(k.value, scope)
            else:
                kw[k.name] = (self.value(k.value, scope), k.value)
        if group_arg is not None:
            if "group" in kw:
                raise self.error(f"{fn.name}() got the group twice (positional and group=)",
                                 node.args[len(fn.params)])
            kw["group"] = group_arg
        missing = [p for p in fn.params if p not in params]
        if missing:
            raise self.error(f"{fn.name}() needs {', '.join(missing)}, e.g. "
                             f"{_example(fn)}", pos=node.pos, length=node.length)
        for p, kind in zip(fn.params, fn.param_types, strict=True):
            v = params[p]
            if kind == "number" and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
                raise self.error(f"{p} of {fn.name}() must be a number, got {_show(v)}",
                                 pos=node.pos, length=node.length)
            if kind == "string" and not isinstance(v, str):
                raise self.error(f"{p} of {fn.name}() must be a string, got {_show(v)}",
                                 pos=node.pos, length=node.length)
        where = self.subset(fn, kw)
        try:
            out = fn.build(where, *[params[p] for p in fn.params])
        except (TypeError, ValueError) as e:
            raise self.error(f"{fn.name}(): {e}", pos=node.pos, length=node.length) from None
        if self.env.unlabeled:
            self.check_labeled(fn, out, kw.get("source"), node)
        return out

    def check_labeled(self, fn: Function, out: Value, src: tuple[Value, Node] | None,
                      node: Node) -> None:
        """Refuse a rate that reads labels over an unlabeled source (paper 001: such a data
        set has no labels; coverage and churn there read none)."""
        if src is not None and src[0] not in self.env.unlabeled:
            return              # one labeled source: the subset excludes every other
        if not (isinstance(out, R.Expression)
                and any(lf.reads_labels for lf in R.leaves_of([out]))):
            return
        labeled = [s for s in self.env.sources or () if s not in self.env.unlabeled]
        fix = (f"restrict it with source={_quote(labeled[0])}" if labeled
               else "name a labeled source with source=")
        if src is not None:
            what, at = f"on the unlabeled source {src[0]!r}", src[1]
        else:
            names = ", ".join(repr(u) for u in self.env.unlabeled)
            what, at = f"without source= it reads every source, and {names} is unlabeled", node
        raise self.error(f"{fn.name}() reads labels, but {what}: {fix}, or give that source "
                         "its label column", at)

    def subset(self, fn: Function, kw: Mapping[str, tuple[Value, Node]]) -> R.Subset | None:
        attr = self.env.protected
        if "attribute" in kw:
            a, anode = kw["attribute"]
            if not isinstance(a, str):
                raise self.error(f"attribute= must be an attribute name, got {_show(a)}", anode)
            if self.env.group_names and a not in self.env.group_names:
                raise self.error(f"unknown attribute {a!r}; the data has "
                                 f"{', '.join(sorted(self.env.group_names))}", anode)
            if "group" not in kw and "not_group" not in kw:
                raise self.error("attribute= needs group= or not_group=", anode)
            attr = a
        where: R.Subset = R.everything()
        for key in ("group", "not_group"):
            if key not in kw:
                continue
            v, vnode = kw[key]
            if attr is None:
                raise self.error(f"{key}= needs a protected attribute (set data.protected)",
                                 vnode)
            s = R.group(attr, self.group_value(attr, v, vnode))
            where = where & (s if key == "group" else ~s)
        if "source" in kw:
            where = where & self.source_subset(*kw["source"])
        if "label" in kw:
            v, vnode = kw["label"]
            if fn.conditions_on_label:
                raise self.error(f"{fn.name}() already conditions on the label; label= is not "
                                 "allowed here", vnode)
            if isinstance(v, bool) or v not in (0, 1) or isinstance(v, str):
                raise self.error(f"label= must be 0 or 1, got {_show(v)}", vnode)
            where = where & (R.positive_label() if v == 1 else R.negative_label())
        return where

    def source_subset(self, v: Value, node: Node) -> R.Subset:
        """``source=NAME``: the rows of that source data set (paper 001)."""
        if not isinstance(v, str):
            raise self.error(f"source= must be a source name (a string), got {_show(v)}", node)
        known = self.env.sources
        if known is not None and not known:
            raise self.error(f"source={v!r} names a source data set, but the data is one data "
                             "set (no sources): give a data config with several sources "
                             "(fairgames.data.combine_splits), or drop source=", node)
        if known is not None and v not in known:
            raise self.error(f"unknown source {v!r}{_suggest(v, known)}; the data's sources "
                             f"are {', '.join(known) or 'none (one data set)'}", node)
        return R.source(v)

    def group_value(self, attr: str, v: Value, node: Node) -> str | int:
        names = self.env.group_names.get(attr)
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise self.error(f"a group value is a name or an integer code, got {_show(v)}",
                             node)
        if names is None:
            return v
        names = [str(x) for x in names]
        if isinstance(v, int):
            if not 0 <= v < len(names):
                raise self.error(f"group code {v} is out of range for {attr!r} (codes "
                                 f"0..{len(names) - 1}: {names})", node)
            return names[v]
        if v not in names:
            raise self.error(f"unknown value {v!r} of {attr!r}{_suggest(v, names)}; its values "
                             f"are {names}", node)
        return v

    def aggregate(self, node: Call, scope: Mapping[str, object]) -> Value:
        if node.keywords or len(node.args) != 1 or not isinstance(node.args[0], Comprehension):
            raise self.error(f"{node.func}() takes one '... for g in groups', e.g. "
                             f"{node.func}(kld(group=g) for g in groups)", pos=node.pos,
                             length=node.length)
        comp = node.args[0]
        assert isinstance(comp, Comprehension)
        items = [self.value(comp.body, {**scope, comp.var: g})
                 for g in self.loop_values(comp.iterable)]
        total: Value = 0
        for v in items:
            self.check_arithmetic(v, comp.body, node.func)
            total = total + v  # type: ignore[operator]
        if node.func == "mean":
            total = total / len(items)  # type: ignore[operator]
        return total

    def loop_values(self, it: Name) -> list[str] | list[float]:
        if it.id == THRESHOLDS:
            return self.env.thresholds()
        if it.id != GROUPS:
            raise self.error(f"can only loop over 'groups' (the values of the protected "
                             f"attribute) or 'thresholds' (the grid 1/N, ..., 1), not "
                             f"{it.id!r}{_suggest(it.id, ITERABLES)}", it)
        attr = self.env.protected
        if attr is None:
            raise self.error("'groups' needs a protected attribute (set data.protected)", it)
        if attr not in self.env.group_names:
            raise self.error(f"the values of {attr!r} are unknown (the data set has no such "
                             f"attribute, or has not been loaded)", it)
        return [str(x) for x in self.env.group_names[attr]]

    # ------------------------------------------------------------------ statements
    def constraint(self, node: Node, scope: Mapping[str, object], name: str) -> R.Constraint:
        assert isinstance(node, Compare)
        a = self.value(node.left, scope)
        b = self.value(node.right, scope)
        for v, side in ((a, node.left), (b, node.right)):
            if isinstance(v, str):
                raise self.error(f"cannot compare the string {v!r}", side)
        if not isinstance(a, R.Expression) and not isinstance(b, R.Expression):
            raise self.error("this comparison has no rate on either side, so it does not "
                             "depend on the model", node)
        ea, eb = R.as_expression(a), R.as_expression(b)
        try:
            c = ea <= eb if node.op == "<=" else ea >= eb if node.op == ">=" else ea == eb
        except ValueError as e:
            raise self.error(str(e), node) from None
        return c.named(name)


def compile_expression(source: str, env: Environment,
                       context: str = "objective") -> R.Expression:
    """Parse and build an objective (a rate expression to minimise).

    Raises:
        ProblemSyntaxError: a parse error, an unknown name, function or keyword, a bad group
            value or an expression the rates algebra refuses, with the token underlined.

    Example:
        >>> env = Environment("group", {"group": ["0", "1"]})
        >>> e = compile_expression("sum(kld(group=g) for g in groups)", env)
        >>> len(e.nodes)
        2
    """
    try:
        tree = parse(source, "expression")
        comp = _Compiler(source, env)
        v = comp.value(tree, {})
        if not isinstance(v, R.Expression) or not v.depends_on_model:
            raise comp.error(f"the {context} does not depend on the model (it is the constant "
                             f"{_show(v)})", tree)
        return v
    except ProblemSyntaxError as e:
        raise e.with_context(context) from None


def compile_constraint(source: str, env: Environment, name: str) -> list[R.Constraint]:
    """Parse and build one constraint statement: one constraint, or one per group under a
    ``for g in groups:`` prefix (named ``name[value]``).

    Example:
        >>> env = Environment("sex", {"sex": ["Male", "Female"]}, {"tolerance": 0.1})
        >>> [c.name for c in compile_constraint("error() <= 0.2", env, "cap")]
        ['cap']
    """
    try:
        tree = parse(source, "constraint")
        comp = _Compiler(source, env)
        if isinstance(tree, ForAll):
            names = [v for v, _ in tree.loops]
            combos = itertools.product(*(comp.loop_values(it) for _, it in tree.loops))
            return [comp.constraint(tree.body, dict(zip(names, combo, strict=True)),
                                    f"{name}[{','.join(map(_label, combo))}]")
                    for combo in combos]
        return [comp.constraint(tree, {}, name)]
    except ProblemSyntaxError as e:
        raise e.with_context(f"constraint {name!r}") from None


def _label(value: object) -> str:
    """How a loop value appears in a constraint's name: a group's name, a threshold's short
    decimal (``0.025``)."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _suggest(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _quote(name: str) -> str:
    """``name`` as a statement's double-quoted string."""
    return '"' + name.replace('"', '\\"') + '"'


def _show(v: object) -> str:
    if isinstance(v, R.Expression):
        return "a rate expression"
    return repr(v)


def _example(fn: Function) -> str:
    if fn.name == "fbeta":
        return "fbeta(2)"
    if fn.name == "group_loss":
        return "group_loss(\"logistic\", group=1)"
    return f"{fn.name}()"
