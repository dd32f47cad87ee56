"""Errors of the problem language and catalog. Each message names the offending input.

A :class:`ProblemSyntaxError` carries the source text and the column of the offending token,
and renders a caret under it:

Example:
    >>> from fairgames.problems.language import parse
    >>> try:
    ...     parse("fmeasure(group=1)) >= 0", "constraint")
    ... except ValueError as e:     # a ProblemSyntaxError
    ...     print(e)
    unexpected ')' after the end of the statement
      fmeasure(group=1)) >= 0
                       ^
"""

from __future__ import annotations


class ProblemError(ValueError):
    """A problem definition that cannot be built (unknown name, bad value, wrong type).

    Example:
        >>> from fairgames.problems import load_problem
        >>> try:
        ...     load_problem("no_such_problem")
        ... except ProblemError as e:
        ...     print(str(e).split(";")[0])
        unknown problem 'no_such_problem'
    """


class ProblemSyntaxError(ProblemError):
    """A statement of the problem language that does not parse or does not type-check.

    Attributes:
        message: what is wrong, without the source excerpt.
        source: the statement's text.
        position: 0-based column of the offending token.
        length: width of the offending token (the caret underlines all of it).
        context: where the statement comes from (e.g. ``"constraint 'parity'"``), or ``""``.

    Example:
        >>> from fairgames.problems import parse
        >>> try:
        ...     parse("tpr(group=", "expression")
        ... except ProblemSyntaxError as e:
        ...     print(e.message, e.position)
        the statement ends where a value was expected 10
    """

    def __init__(self, message: str, source: str, position: int, length: int = 1,
                 context: str = "") -> None:
        self.message = message
        self.source = source
        self.position = max(0, min(position, len(source)))
        self.length = max(1, length)
        self.context = context
        super().__init__(self._render())

    def with_context(self, context: str) -> ProblemSyntaxError:
        """The same error, saying where the statement comes from."""
        return ProblemSyntaxError(self.message, self.source, self.position, self.length, context)

    def _render(self) -> str:
        head = f"in {self.context}: {self.message}" if self.context else self.message
        caret = " " * self.position + "^" * min(self.length, max(1, len(self.source)
                                                                 - self.position))
        return f"{head}\n  {self.source}\n  {caret}"
