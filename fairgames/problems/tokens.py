"""The problem language's tokenizer: a statement's characters into NUMBER, STRING, NAME, OP and
KEYWORD tokens (:func:`tokenize`), refusing with a hint the operators the language does not have
(``!=``, ``**``, strict ``<`` and ``>``). The parser of :mod:`fairgames.problems.language` reads
the tokens.

Example:
    >>> [(t.kind, t.text) for t in tokenize("tpr() >= 0.8")]
    [('NAME', 'tpr'), ('OP', '('), ('OP', ')'), ('OP', '>='), ('NUMBER', '0.8'), ('EOF', '')]
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ProblemSyntaxError

_TWO_CHAR = ("<=", ">=", "==", "!=", "**")
_ONE_CHAR = "+-*/(),=:<>"
KEYWORDS = ("for", "in")


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
