"""A small, safe expression language for objectives and constraints written in configs.

A problem config states its objective and constraints as strings, e.g.::

    objective: "-fmeasure()"
    constraints:
      parity: "fmeasure(group=protected_group) >= fmeasure(not_group=protected_group) - tolerance"

This module turns such a string into a syntax tree with a hand-written tokenizer
(:mod:`fairgames.problems.tokens`) and a recursive-descent parser: nothing is ever handed to
Python's ``eval`` or ``ast``. The tree's nodes and the walks over it are
:mod:`fairgames.problems.syntax`, re-exported here. The tree is then built into rate
expressions by :mod:`fairgames.problems.compiler` against the functions of
:mod:`fairgames.problems.functions`.

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

from .errors import ProblemSyntaxError
from .syntax import (
    Binary,
    Call,
    Compare,
    Comprehension,
    ForAll,
    Keyword,
    Name,
    Node,
    Number,
    String,
    Unary,
    called_functions,
    free_names,
    walk,
)
from .tokens import KEYWORDS, Token, tokenize

# the names the language's users import from here (the tokens and the tree re-exported)
__all__ = ["COMPARISONS", "KEYWORDS", "Binary", "Call", "Compare", "Comprehension", "ForAll",
           "Keyword", "Name", "Node", "Number", "String", "Token", "Unary", "called_functions",
           "free_names", "parse", "tokenize", "walk"]

COMPARISONS = ("<=", ">=", "==")


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
