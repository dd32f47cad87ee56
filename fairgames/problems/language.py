"""A small, safe expression language for objectives and constraints written in configs.

A problem config states its objective and constraints as strings, e.g.::

    objective: "-fmeasure()"
    constraints:
      parity: "fmeasure(group=protected_group) >= fmeasure(not_group=protected_group) - tolerance"

This module turns such a string into a syntax tree with a hand-written tokenizer and a
recursive-descent parser: nothing is ever handed to Python's ``eval`` or ``ast``. The tree is
then built into rate expressions by :mod:`fairgames.problems.compiler` against the functions
of :mod:`fairgames.problems.functions`.

Grammar (``statement`` is what a constraint string may be; an objective is an ``expr``)::

    statement  := "for" loop ("," loop)* ":" comparison | comparison
    loop       := NAME "in" NAME                      -- groups, or thresholds (the grid 𝒵)
    comparison := expr (("<=" | ">=" | "==") expr)?
    expr       := term (("+" | "-") term)*
    term       := unary (("*" | "/") unary)*
    unary      := ("-" | "+") unary | primary
    primary    := NUMBER | STRING | NAME | call | "(" expr ")"
    call       := NAME "(" [argument ("," argument)*] ")"
                | NAME "(" expr "for" NAME "in" NAME ")"          -- sum / mean over groups
    argument   := NAME "=" expr | expr

Numbers are decimal (``2``, ``0.02``, ``.5``, ``1e-3``); strings use single or double quotes
(group value names such as ``"Female"``). ``<`` and ``>`` are refused with a hint: a rate
constraint is never strict. Every node keeps its column, so errors found later (an unknown
function, a product of two rates, a group value the data does not have) point at the token.

A constraint may loop over several iterables at once, ``for g in groups, z in thresholds: ...``:
one constraint per combination (paper 003's statistical parity is ``2·|𝒜|·N`` such rows).

Example:
    >>> tree = parse("fmeasure(group=1) >= fmeasure(group=0) - tolerance", "constraint")
    >>> type(tree).__name__, tree.op
    ('Compare', '>=')
    >>> sorted(free_names(tree))
    ['tolerance']
    >>> parse("sum(kld(group=g) for g in groups)").func
    'sum'
    >>> [v for v, _ in parse("for g in groups, z in thresholds: score_at_least(z, group=g) "
    ...                      "<= score_at_least(z) + tolerance", "constraint").loops]
    ['g', 'z']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .errors import ProblemSyntaxError

COMPARISONS = ("<=", ">=", "==")
_TWO_CHAR = ("<=", ">=", "==", "!=", "**")
_ONE_CHAR = "+-*/(),=:<>"
KEYWORDS = ("for", "in")


# --------------------------------------------------------------------------- tokens
@dataclass(frozen=True)
class Token:
    """One lexical token: ``kind`` is NUMBER, STRING, NAME, OP, KEYWORD or EOF.

    Example:
        >>> tokenize("tpr(group=1)")[0]
        Token(kind='NAME', text='tpr', pos=0, value=None)
        >>> tokenize("tpr(")[-1].describe()
        'the end of the statement'
    """

    kind: str
    text: str
    pos: int
    value: object = None

    def describe(self) -> str:
        """How error messages name the token (its text, or "the end of the statement")."""
        return "the end of the statement" if self.kind == "EOF" else repr(self.text)


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into tokens, ending with an EOF token.

    Raises:
        ProblemSyntaxError: on a character or operator the language does not have.

    Example:
        >>> [t.text for t in tokenize("1.1 * unconstrained_error")]
        ['1.1', '*', 'unconstrained_error', '']
    """
    if not isinstance(source, str):
        raise ProblemSyntaxError(f"a statement must be a string, got {type(source).__name__}",
                                 str(source), 0)
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c.isspace():
            i += 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and source[i + 1].isdigit()):
            tokens.append(_number(source, i))
            i += len(tokens[-1].text)
            continue
        if c.isalpha() or c == "_":
            j = i + 1
            while j < n and (source[j].isalnum() or source[j] == "_"):
                j += 1
            word = source[i:j]
            tokens.append(Token("KEYWORD" if word in KEYWORDS else "NAME", word, i))
            i = j
            continue
        if c in "\"'":
            j = source.find(c, i + 1)
            if j < 0:
                raise ProblemSyntaxError("unterminated string", source, i, n - i)
            tokens.append(Token("STRING", source[i:j + 1], i, source[i + 1:j]))
            i = j + 1
            continue
        two = source[i:i + 2]
        if two in _TWO_CHAR:
            if two == "!=":
                raise ProblemSyntaxError("'!=' is not a constraint; use '<=', '>=' or '=='",
                                         source, i, 2)
            if two == "**":
                raise ProblemSyntaxError("'**' (power) is not supported; rate metrics such as "
                                         "gmean() or qmean() provide the non-linear terms",
                                         source, i, 2)
            tokens.append(Token("OP", two, i))
            i += 2
            continue
        if c in _ONE_CHAR:
            if c in "<>":
                raise ProblemSyntaxError(f"strict '{c}' is not supported; use '{c}='",
                                         source, i)
            tokens.append(Token("OP", c, i))
            i += 1
            continue
        raise ProblemSyntaxError(f"unexpected character {c!r}", source, i)
    tokens.append(Token("EOF", "", n))
    return tokens


def _number(source: str, i: int) -> Token:
    n = len(source)
    j = i
    while j < n and source[j].isdigit():
        j += 1
    is_int = True
    if j < n and source[j] == ".":
        is_int = False
        j += 1
        while j < n and source[j].isdigit():
            j += 1
    if j < n and source[j] in "eE":
        k = j + 1
        if k < n and source[k] in "+-":
            k += 1
        if k < n and source[k].isdigit():
            is_int = False
            j = k
            while j < n and source[j].isdigit():
                j += 1
    text = source[i:j]
    if j < n and (source[j].isalpha() or source[j] == "_"):
        raise ProblemSyntaxError(f"malformed number {source[i:j + 1]!r}", source, i, j + 1 - i)
    return Token("NUMBER", text, i, int(text) if is_int else float(text))


# --------------------------------------------------------------------------- syntax tree
@dataclass(frozen=True)
class Node:
    """A syntax tree node; ``pos`` and ``length`` locate it in the source for errors.

    Example:
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
        >>> parse("0.5")
        Number(pos=0, length=3, value=0.5)
    """

    value: int | float


@dataclass(frozen=True)
class String(Node):
    """A quoted string literal (a group value name).

    Example:
        >>> parse('"Female"')
        String(pos=0, length=8, value='Female')
    """

    value: str


@dataclass(frozen=True)
class Name(Node):
    """A name read from the environment (``tolerance``, a loop variable, ...).

    Example:
        >>> parse("tolerance")
        Name(pos=0, length=9, id='tolerance')
    """

    id: str


@dataclass(frozen=True)
class Unary(Node):
    """A sign applied to an operand: ``-x`` or ``+x``.

    Example:
        >>> parse("-tpr()").op
        '-'
    """

    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    """An arithmetic operation ``left op right`` with ``op`` one of ``+ - * /``.

    Example:
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


# --------------------------------------------------------------------------- parser
class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.i = 0

    # -- helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        t = self.tokens[self.i]
        if t.kind != "EOF":
            self.i += 1
        return t

    def error(self, message: str, tok: Token | None = None) -> ProblemSyntaxError:
        t = tok or self.tok
        return ProblemSyntaxError(message, self.source, t.pos, max(1, len(t.text)))

    def expect(self, kind: str, text: str | None = None, what: str = "") -> Token:
        t = self.tok
        if t.kind != kind or (text is not None and t.text != text):
            want = what or (repr(text) if text else kind.lower())
            raise self.error(f"expected {want}, found {t.describe()}")
        return self.advance()

    def at(self, kind: str, *texts: str) -> bool:
        return self.tok.kind == kind and (not texts or self.tok.text in texts)

    # -- grammar
    def statement(self) -> Node:
        if self.at("KEYWORD", "for"):
            start = self.advance()
            loops: list[tuple[str, Name]] = []
            while True:
                var, it = self.loop()
                if any(var.text == v for v, _ in loops):
                    raise self.error(f"loop variable {var.text!r} is used twice", var)
                loops.append((var.text, it))
                if not self.at("OP", ","):
                    break
                self.advance()
            self.expect("OP", ":", what="':' (or ', name in ...' for another loop)")
            body = self.comparison(required=True)
            assert isinstance(body, Compare)
            (v0, it0), *more = loops
            return ForAll(start.pos, len(self.source) - start.pos, v0, it0, body, tuple(more))
        return self.comparison(required=False)

    def loop(self) -> tuple[Token, Name]:
        """``NAME in NAME`` of a constraint's ``for`` prefix."""
        var = self.expect("NAME", what="a loop variable name after 'for'")
        self.expect("KEYWORD", "in")
        it = self.expect("NAME", what="what to loop over (e.g. 'groups' or 'thresholds')")
        return var, Name(it.pos, len(it.text), it.text)

    def comparison(self, required: bool) -> Node:
        left = self.expr()
        if self.at("OP", *COMPARISONS):
            op = self.advance()
            right = self.expr()
            if self.at("OP", *COMPARISONS):
                raise self.error("chained comparisons are not supported; write one constraint "
                                 "per comparison")
            return Compare(op.pos, len(op.text), op.text, left, right)
        if required:
            raise self.error(f"expected a comparison ('<=', '>=' or '=='), found "
                             f"{self.tok.describe()}")
        return left

    def expr(self) -> Node:
        node = self.term()
        while self.at("OP", "+", "-"):
            op = self.advance()
            node = Binary(op.pos, 1, op.text, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.at("OP", "*", "/"):
            op = self.advance()
            node = Binary(op.pos, 1, op.text, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.at("OP", "-", "+"):
            op = self.advance()
            return Unary(op.pos, 1, op.text, self.unary())
        return self.primary()

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "NUMBER":
            self.advance()
            return Number(t.pos, len(t.text), t.value)  # type: ignore[arg-type]
        if t.kind == "STRING":
            self.advance()
            return String(t.pos, len(t.text), t.value)  # type: ignore[arg-type]
        if t.kind == "NAME":
            self.advance()
            if self.at("OP", "("):
                return self.call(t)
            return Name(t.pos, len(t.text), t.text)
        if t.kind == "OP" and t.text == "(":
            self.advance()
            inner = self.expr()
            self.expect("OP", ")", what="')' to close the parenthesis")
            return inner
        if t.kind == "EOF":
            raise self.error("the statement ends where a value was expected")
        raise self.error(f"unexpected {t.describe()} where a value was expected")

    def call(self, name: Token) -> Node:
        self.expect("OP", "(")
        args: list[Node] = []
        keywords: list[Keyword] = []
        if not self.at("OP", ")"):
            while True:
                if self.tok.kind == "NAME" and self.tokens[self.i + 1].text == "=" and \
                        self.tokens[self.i + 1].kind == "OP":
                    key = self.advance()
                    self.advance()
                    if any(k.name == key.text for k in keywords):
                        raise self.error(f"keyword argument {key.text!r} given twice", key)
                    keywords.append(Keyword(key.text, self.expr(), key.pos))
                else:
                    if keywords:
                        raise self.error("a positional argument cannot follow a keyword "
                                         "argument")
                    arg = self.expr()
                    if self.at("KEYWORD", "for"):
                        arg = self.comprehension(arg)
                        if args or not self.at("OP", ")"):
                            raise self.error("'... for g in groups' must be the only argument")
                    args.append(arg)
                if self.at("OP", ","):
                    self.advance()
                    continue
                break
        close = self.expect("OP", ")", what="',' or ')' in the argument list")
        return Call(name.pos, close.pos + 1 - name.pos, name.text, tuple(args), tuple(keywords))

    def comprehension(self, body: Node) -> Comprehension:
        start = self.advance()  # "for"
        var = self.expect("NAME", what="a loop variable name after 'for'")
        self.expect("KEYWORD", "in")
        it = self.expect("NAME", what="what to loop over (e.g. 'groups')")
        return Comprehension(start.pos, it.pos + len(it.text) - start.pos, body, var.text,
                             Name(it.pos, len(it.text), it.text))


def parse(source: str, kind: str = "expression") -> Node:
    """Parse an objective (``kind="expression"``) or a constraint (``kind="constraint"``).

    A constraint must contain exactly one top-level comparison (optionally under a
    ``for g in groups:`` prefix); an expression must contain none.

    Raises:
        ProblemSyntaxError: with the offending token underlined.

    Example:
        >>> parse("error() <= 1.1 * unconstrained_error", "constraint").op
        '<='
    """
    if kind not in ("expression", "constraint"):
        raise ValueError(f"kind must be 'expression' or 'constraint', got {kind!r}")
    p = _Parser(source)
    if not source.strip():
        raise ProblemSyntaxError(f"empty {kind}", source, 0)
    if kind == "expression":
        if p.at("KEYWORD", "for"):
            raise p.error("'for ... :' introduces constraints; an objective is one expression "
                          "(use sum(... for g in groups) to add over groups)")
        node = p.expr()
        if p.at("OP", *COMPARISONS):
            raise p.error("an objective cannot contain a comparison; put constraints under "
                          "'constraints'")
    else:
        node = p.statement()
    if p.tok.kind != "EOF":
        raise p.error(f"unexpected {p.tok.describe()} after the end of the statement")
    if kind == "constraint" and not isinstance(node, Compare | ForAll):
        raise ProblemSyntaxError(
            "a constraint needs a comparison ('<=', '>=' or '=='), e.g. "
            "'tpr(group=1) >= tpr(group=0) - tolerance'", source, len(source.rstrip()))
    return node


# --------------------------------------------------------------------------- analysis
def walk(node: Node) -> Iterator[Node]:
    """Every node of a tree, parents first.

    Example:
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
        >>> sorted(called_functions(parse("fmeasure() - 0.5 * precision(group=1)")))
        ['fmeasure', 'precision']
    """
    return {n.func for n in walk(node) if isinstance(n, Call)}
