"""Subsets of the examples over which rates are conditioned.

A subset is a boolean formula over *factors* of an example that do not depend on the model:
its label, the value of a named group attribute, its source data set and the prediction of a
baseline model (churn). Formulas combine with ``&``, ``|`` and ``~``.

Example:
    >>> from fairgames.rates import group, positive_label
    >>> s = group("sex", "Female") & positive_label()
    >>> str(s)
    "(group('sex', 'Female') & label(1))"
"""

from __future__ import annotations

from dataclasses import dataclass

GroupValue = str | int


class Subset:
    """A boolean formula over model-independent factors of an example.

    Example:
        >>> s = (group("race", "Black") | group("race", "White")) & ~positive_label()
        >>> str(s)
        "((group('race', 'Black') | group('race', 'White')) & ~label(1))"
        >>> [str(lit) for lit in s.literals()]
        ["group('race', 'Black')", "group('race', 'White')", 'label(1)']
    """

    def __and__(self, other: Subset) -> Subset:
        _check_subset(other)
        if isinstance(self, Everything):
            return other
        if isinstance(other, Everything):
            return self
        return And(self, other)

    def __or__(self, other: Subset) -> Subset:
        _check_subset(other)
        if isinstance(self, Everything) or isinstance(other, Everything):
            return Everything()
        return Or(self, other)

    def __invert__(self) -> Subset:
        return Not(self)

    def key(self) -> tuple:
        """A hashable structural key (equal formulas written alike share it)."""
        raise NotImplementedError

    def literals(self) -> list[Literal]:
        """The factor literals this formula reads."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return str(self)


def _check_subset(other: object) -> None:
    if not isinstance(other, Subset):
        raise TypeError(f"subsets combine only with subsets, got {type(other).__name__}")


@dataclass(frozen=True, repr=False)
class Everything(Subset):
    """All examples (the identity of ``&``).

    Example:
        >>> str(Everything() & positive_label())
        'label(1)'
    """

    def key(self) -> tuple:
        """The structural key ``("all",)``."""
        return ("all",)

    def literals(self) -> list[Literal]:
        """No literal: every example belongs."""
        return []

    def __str__(self) -> str:
        return "all"


class Literal(Subset):
    """A test of one factor: ``factor == value``.

    Example:
        >>> lit = group("sex", "Female")
        >>> isinstance(lit, Literal), lit.factor, lit.value
        (True, 'group:sex', 'Female')
    """

    factor: str
    value: GroupValue

    def literals(self) -> list[Literal]:
        """The literal itself."""
        return [self]


@dataclass(frozen=True, repr=False)
class LabelIs(Literal):
    """Examples whose binary label equals ``value`` (0 or 1).

    Example:
        >>> LabelIs(1).factor, LabelIs(1).key()
        ('label', ('label', 1))
    """

    value: int

    @property
    def factor(self) -> str:  # type: ignore[override]
        """The factor read: ``"label"``."""
        return "label"

    def key(self) -> tuple:
        """The structural key ``("label", value)``."""
        return ("label", int(self.value))

    def __str__(self) -> str:
        return f"label({int(self.value)})"


@dataclass(frozen=True, repr=False)
class GroupIs(Literal):
    """Examples whose attribute ``attribute`` takes ``value`` (a name or an integer code).

    Example:
        >>> g = GroupIs("race", "Black")
        >>> g.factor, g.key()
        ('group:race', ('group', 'race', 'Black'))
    """

    attribute: str
    value: GroupValue

    @property
    def factor(self) -> str:  # type: ignore[override]
        """The factor read: ``"group:<attribute>"``."""
        return "group:" + self.attribute

    def key(self) -> tuple:
        """The structural key ``("group", attribute, value)``."""
        return ("group", self.attribute, self.value)

    def __str__(self) -> str:
        return f"group({self.attribute!r}, {self.value!r})"


@dataclass(frozen=True, repr=False)
class SourceIs(Literal):
    """Examples drawn from the named source data set (several data sets in one problem).

    Example:
        >>> str(SourceIs("adult")), SourceIs("adult").factor
        ("source('adult')", 'source')
    """

    value: GroupValue

    @property
    def factor(self) -> str:  # type: ignore[override]
        """The factor read: ``"source"``."""
        return "source"

    def key(self) -> tuple:
        """The structural key ``("source", value)``."""
        return ("source", self.value)

    def __str__(self) -> str:
        return f"source({self.value!r})"


@dataclass(frozen=True, repr=False)
class BaselineIs(Literal):
    """Examples the baseline model predicts as ``value`` (1: positive, 0: negative).

    Example:
        >>> str(BaselineIs(1)), BaselineIs(1).factor
        ('baseline(1)', 'baseline')
    """

    value: int

    @property
    def factor(self) -> str:  # type: ignore[override]
        """The factor read: ``"baseline"``."""
        return "baseline"

    def key(self) -> tuple:
        """The structural key ``("baseline", value)``."""
        return ("baseline", int(self.value))

    def __str__(self) -> str:
        return f"baseline({int(self.value)})"


@dataclass(frozen=True, repr=False)
class And(Subset):
    """Examples in both ``left`` and ``right`` (what ``left & right`` builds).

    Example:
        >>> s = group("sex", "Female") & positive_label()
        >>> isinstance(s, And), s.key()
        (True, ('and', ('group', 'sex', 'Female'), ('label', 1)))
    """

    left: Subset
    right: Subset

    def key(self) -> tuple:
        """``("and", a, b)`` with the operands' keys sorted (``&`` is commutative)."""
        a, b = sorted([self.left.key(), self.right.key()], key=repr)
        return ("and", a, b)

    def literals(self) -> list[Literal]:
        """The literals of both operands."""
        return self.left.literals() + self.right.literals()

    def __str__(self) -> str:
        return f"({self.left} & {self.right})"


@dataclass(frozen=True, repr=False)
class Or(Subset):
    """Examples in ``left`` or ``right`` (what ``left | right`` builds).

    Example:
        >>> str(group("race", "Black") | group("race", "White"))
        "(group('race', 'Black') | group('race', 'White'))"
    """

    left: Subset
    right: Subset

    def key(self) -> tuple:
        """``("or", a, b)`` with the operands' keys sorted (``|`` is commutative)."""
        a, b = sorted([self.left.key(), self.right.key()], key=repr)
        return ("or", a, b)

    def literals(self) -> list[Literal]:
        """The literals of both operands."""
        return self.left.literals() + self.right.literals()

    def __str__(self) -> str:
        return f"({self.left} | {self.right})"


@dataclass(frozen=True, repr=False)
class Not(Subset):
    """Examples not in ``inner`` (what ``~inner`` builds).

    Example:
        >>> str(~positive_label()), (~positive_label()).key()
        ('~label(1)', ('not', ('label', 1)))
    """

    inner: Subset

    def key(self) -> tuple:
        """``("not", inner_key)``."""
        return ("not", self.inner.key())

    def literals(self) -> list[Literal]:
        """The literals of ``inner``."""
        return self.inner.literals()

    def __str__(self) -> str:
        return f"~{self.inner}"


def everything() -> Subset:
    """All examples.

    Example:
        >>> str(everything())
        'all'
    """
    return Everything()


def positive_label() -> Subset:
    """Examples with label 1 (binary labels only).

    Example:
        >>> str(positive_label())
        'label(1)'
    """
    return LabelIs(1)


def negative_label() -> Subset:
    """Examples with label 0 (binary labels only).

    Example:
        >>> str(negative_label())
        'label(0)'
    """
    return LabelIs(0)


def group(attribute: str, value: GroupValue) -> Subset:
    """Examples whose protected attribute ``attribute`` equals ``value``.

    ``value`` is a value name (as in the batch's ``group_values``) or an integer code.
    For a soft attribute (memberships ``[B, G]``) the subset weights each example by its
    membership of ``value``.

    Example:
        >>> str(group("sex", "Female")), str(group("sex", 1))
        ("group('sex', 'Female')", "group('sex', 1)")
    """
    if not isinstance(attribute, str) or not attribute:
        raise TypeError(f"group attribute must be a non-empty string, got {attribute!r}")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"group value must be a name or an integer code, got {value!r}")
    return GroupIs(attribute, value)


def source(name: GroupValue) -> Subset:
    """Examples from the named source data set.

    Example:
        >>> str(source("compas"))
        "source('compas')"
    """
    return SourceIs(name)


def baseline_positive() -> Subset:
    """Examples the baseline model predicts positive (score > 0).

    Example:
        >>> str(baseline_positive())
        'baseline(1)'
    """
    return BaselineIs(1)


def baseline_negative() -> Subset:
    """Examples the baseline model predicts negative (score <= 0).

    Example:
        >>> str(baseline_negative())
        'baseline(0)'
    """
    return BaselineIs(0)


def as_subset(where: Subset | None) -> Subset:
    """``None`` means every example.

    Example:
        >>> str(as_subset(None)), str(as_subset(positive_label()))
        ('all', 'label(1)')
    """
    if where is None:
        return Everything()
    _check_subset(where)
    return where
