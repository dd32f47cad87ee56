"""The problem language's syntax tree: the nodes the parser of :mod:`fairgames.problems.language`
builds (each keeps its place in the source, so a later error points at the token) and the walks
that ask a tree what it reads (:func:`walk`, :func:`free_names`, :func:`called_functions`).

Example:
    >>> from fairgames.problems.language import parse
    >>> sorted(called_functions(parse("tpr(group=1) - tpr(group=0)")))
    ['tpr']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """A syntax tree node; ``pos`` and ``length`` locate it in the source for errors.

    Example:
        >>> from fairgames.problems.language import parse
        >>> parse("tpr() - 0.1")
        Binary(pos=6, length=1, op='-', left=Call(pos=0, length=5, func='tpr', args=(),
            keywords=()), right=Number(pos=8, length=3, value=0.1))
    """

    pos: int
    length: int


@dataclass(frozen=True)
class Number(Node):
    """A numeric literal.

    Example:
        >>> from fairgames.problems.language import parse
        >>> parse("0.5")
        Number(pos=0, length=3, value=0.5)
    """

    value: int | float


@dataclass(frozen=True)
class String(Node):
    """A quoted string literal (a group value name).

    Example:
        >>> from fairgames.problems.language import parse
        >>> parse('"Female"')
        String(pos=0, length=8, value='Female')
    """

    value: str


@dataclass(frozen=True)
class Name(Node):
    """A name read from the environment (``tolerance``, a loop variable, ...).

    Example:
        >>> from fairgames.problems.language import parse
        >>> parse("tolerance")
        Name(pos=0, length=9, id='tolerance')
    """

    id: str


@dataclass(frozen=True)
class Unary(Node):
    """A sign applied to an operand: ``-x`` or ``+x``.

    Example:
        >>> from fairgames.problems.language import parse
        >>> parse("-tpr()").op
        '-'
    """

    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    """An arithmetic operation ``left op right`` with ``op`` one of ``+ - * /``.

    Example:
        >>> from fairgames.problems.language import parse
        >>> node = parse("tpr() - 0.1")
        >>> node.op, node.right.value
        ('-', 0.1)
    """

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Keyword:
    """A keyword argument ``name=value`` of a call.

    Example:
        >>> from fairgames.problems.language import parse
        >>> parse("tpr(group=1)").keywords
        (Keyword(name='group', value=Number(pos=10, length=1, value=1), pos=4),)
    """

    name: str
    value: Node
    pos: int


@dataclass(frozen=True)
class Call(Node):
    """A function call with positional ``args`` and ``keywords``.

    Example:
        >>> from fairgames.problems.language import parse
        >>> call = parse("fbeta(2, group=1)")
        >>> call.func, call.args[0].value, [k.name for k in call.keywords]
        ('fbeta', 2, ['group'])
    """

    func: str
    args: tuple[Node, ...]
    keywords: tuple[Keyword, ...]


@dataclass(frozen=True)
class Comprehension(Node):
    """``body for var in iterable`` (only as the single argument of ``sum`` / ``mean``).

    Example:
        >>> from fairgames.problems.language import parse
        >>> comp = parse("mean(tpr(group=g) for g in groups)").args[0]
        >>> comp.var, comp.iterable.id, comp.body.func
        ('g', 'groups', 'tpr')
    """

    body: Node
    var: str
    iterable: Name


@dataclass(frozen=True)
class Compare(Node):
    """A constraint's comparison ``left op right`` with ``op`` one of ``<= >= ==``.

    Example:
        >>> from fairgames.problems.language import parse
        >>> cmp = parse("tpr() <= 0.9", "constraint")
        >>> cmp.op, cmp.right.value
        ('<=', 0.9)
    """

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class ForAll(Node):
    """``for var in iterable[, var2 in iterable2 ...]: comparison``: one constraint per value
    of ``iterable`` (per combination of values, the first loop outermost, when ``more`` holds
    further ``(var, iterable)`` loops).

    Example:
        >>> from fairgames.problems.language import parse
        >>> loop = parse("for g in groups: tpr(group=g) >= 0.8", "constraint")
        >>> loop.var, loop.iterable.id, loop.body.op
        ('g', 'groups', '>=')
        >>> two = parse("for g in groups, z in thresholds: score_at_least(z, group=g) <= 0.5",
        ...             "constraint")
        >>> [(v, it.id) for v, it in two.loops]
        [('g', 'groups'), ('z', 'thresholds')]
    """

    var: str
    iterable: Name
    body: Compare
    more: tuple[tuple[str, Name], ...] = ()

    @property
    def loops(self) -> tuple[tuple[str, Name], ...]:
        """Every ``(loop variable, iterable)``, outermost first."""
        return ((self.var, self.iterable), *self.more)



def walk(node: Node) -> Iterator[Node]:
    """Every node of a tree, parents first.

    Example:
        >>> from fairgames.problems.language import parse
        >>> [type(n).__name__ for n in walk(parse("1 - tpr(group=g)"))]
        ['Binary', 'Number', 'Call', 'Name']
    """
    yield node
    if isinstance(node, Unary):
        yield from walk(node.operand)
    elif isinstance(node, Binary | Compare):
        yield from walk(node.left)
        yield from walk(node.right)
    elif isinstance(node, Call):
        for a in node.args:
            yield from walk(a)
        for k in node.keywords:
            yield from walk(k.value)
    elif isinstance(node, Comprehension):
        yield node.iterable
        yield from walk(node.body)
    elif isinstance(node, ForAll):
        for _, it in node.loops:
            yield it
        yield from walk(node.body)


def free_names(node: Node) -> set[str]:
    """Names a tree reads from its environment (loop variables excluded).

    Example:
        >>> from fairgames.problems.language import parse
        >>> sorted(free_names(parse("for g in groups: ppr(group=g) <= ppr() + tolerance",
        ...                         "constraint")))
        ['groups', 'tolerance']
    """
    out: set[str] = set()

    def visit(n: Node, bound: frozenset[str]) -> None:
        if isinstance(n, Name):
            if n.id not in bound:
                out.add(n.id)
        elif isinstance(n, Unary):
            visit(n.operand, bound)
        elif isinstance(n, Binary | Compare):
            visit(n.left, bound)
            visit(n.right, bound)
        elif isinstance(n, Call):
            for a in n.args:
                visit(a, bound)
            for k in n.keywords:
                visit(k.value, bound)
        elif isinstance(n, Comprehension):
            visit(n.iterable, bound)
            visit(n.body, bound | {n.var})
        elif isinstance(n, ForAll):
            for _, it in n.loops:
                visit(it, bound)
            visit(n.body, bound | {v for v, _ in n.loops})

    visit(node, frozenset())
    return out


def called_functions(node: Node) -> set[str]:
    """Names of the functions a tree calls.

    Example:
        >>> from fairgames.problems.language import parse
        >>> sorted(called_functions(parse("fmeasure() - 0.5 * precision(group=1)")))
        ['fmeasure', 'precision']
    """
    return {n.func for n in walk(node) if isinstance(n, Call)}
