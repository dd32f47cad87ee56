"""Per-example events whose (weighted) expectation over a subset is a rate.

Every event is affine in one prediction indicator ``ŷ_z``: ``e = a(y, ŷ₀) + b(y, ŷ₀) · ŷ_z``,
where ``y`` is the binary label, ``ŷ₀`` the baseline model's prediction and the coefficients
come from a 2×2 table indexed ``[y][ŷ₀]``. Because the coefficients depend only on factors
that also define subsets, the fused evaluator sums ``w`` and ``w·ŷ_z`` once per cell of the
partition and reads every rate off those sums (see ``evaluator/``).

Example:
    >>> from fairgames.rates.events import ERROR
    >>> ERROR.a, ERROR.b   # error = y + (1 - 2y)·ŷ
    (((0.0, 0.0), (1.0, 1.0)), ((1.0, 1.0), (-1.0, -1.0)))
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

Table = tuple[tuple[float, float], tuple[float, float]]


@dataclass(frozen=True)
class Indicator:
    """The prediction indicator an event reads: ``1[s > z]`` (strict) or ``1[s >= z]``.

    Example:
        >>> str(Indicator()), str(Indicator(0.5, strict=False))
        ('s > 0', 's >= 0.5')
    """

    threshold: float = 0.0
    strict: bool = True

    def __str__(self) -> str:
        op = ">" if self.strict else ">="
        return f"s {op} {self.threshold:g}"


DEFAULT_INDICATOR = Indicator(0.0, True)


def _table(f) -> Table:
    return tuple(tuple(float(f(y, b0)) for b0 in (0, 1)) for y in (0, 1))  # type: ignore[return-value]


@dataclass(frozen=True)
class Event:
    """``e = a[y][ŷ₀] + b[y][ŷ₀] · ŷ`` with ``ŷ`` read through ``indicator``.

    Example:
        >>> ERROR.uses_label, ERROR.uses_baseline, ERROR.depends_on_model
        (True, False, True)
        >>> WIN.uses_baseline, LABEL.depends_on_model
        (True, False)
    """

    name: str
    a: Table
    b: Table
    indicator: Indicator = DEFAULT_INDICATOR

    @property
    def uses_label(self) -> bool:
        """Whether the coefficients depend on the label ``y``."""
        return any(self.a[0][j] != self.a[1][j] or self.b[0][j] != self.b[1][j] for j in (0, 1))

    @property
    def uses_baseline(self) -> bool:
        """Whether the coefficients depend on the baseline's prediction ``ŷ₀``."""
        return any(self.a[y][0] != self.a[y][1] or self.b[y][0] != self.b[y][1] for y in (0, 1))

    @functools.cached_property
    def depends_on_model(self) -> bool:
        """Whether the event reads the model's prediction (some ``b`` coefficient is non-zero)."""
        return any(self.b[y][j] != 0.0 for y in (0, 1) for j in (0, 1))

    def key(self) -> tuple:
        """A hashable structural key (the indicator counts only if the model is read)."""
        return ("event", self.a, self.b, self.indicator) if self.depends_on_model else (
            "event", self.a, self.b)

    def __str__(self) -> str:
        return self.name


def _event(name: str, a, b, indicator: Indicator = DEFAULT_INDICATOR) -> Event:
    return Event(name, _table(a), _table(b), indicator)


PREDICTED_POSITIVE = _event("predicted_positive", lambda y, o: 0, lambda y, o: 1)
PREDICTED_NEGATIVE = _event("predicted_negative", lambda y, o: 1, lambda y, o: -1)
TRUE_POSITIVE = _event("true_positive", lambda y, o: 0, lambda y, o: y)
FALSE_POSITIVE = _event("false_positive", lambda y, o: 0, lambda y, o: 1 - y)
TRUE_NEGATIVE = _event("true_negative", lambda y, o: 1 - y, lambda y, o: -(1 - y))
FALSE_NEGATIVE = _event("false_negative", lambda y, o: y, lambda y, o: -y)
ERROR = _event("error", lambda y, o: y, lambda y, o: 1 - 2 * y)
CORRECT = _event("correct", lambda y, o: 1 - y, lambda y, o: 2 * y - 1)
# Churn (paper 001): the new prediction differs from the baseline's.
DISAGREES_WITH_BASELINE = _event("disagrees_with_baseline", lambda y, o: o, lambda y, o: 1 - 2 * o)
AGREES_WITH_BASELINE = _event("agrees_with_baseline", lambda y, o: 1 - o, lambda y, o: 2 * o - 1)
# Win: the baseline was wrong and the new model is right; loss: the reverse (paper 000 Table 1).
WIN = _event("win", lambda y, o: (o != y) * (1 - y), lambda y, o: (o != y) * (2 * y - 1))
LOSS = _event("loss", lambda y, o: (o == y) * y, lambda y, o: (o == y) * (1 - 2 * y))
# Model-independent: E[y | S] (the base rate p of KLD), and the constant 1.
LABEL = _event("label", lambda y, o: y, lambda y, o: 0)
ONE = _event("one", lambda y, o: 1, lambda y, o: 0)


def score_at_least(threshold: float) -> Event:
    """The event ``f(x) >= z`` (paper 003's statistical-parity constraints at grid point z).

    Example:
        >>> e = score_at_least(0.5)
        >>> e.name, str(e.indicator)
        ('score>=0.5', 's >= 0.5')
    """
    z = float(threshold)
    if not math.isfinite(z):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    return _event(f"score>={z:g}", lambda y, o: 0, lambda y, o: 1, Indicator(z, strict=False))


def predicted_positive_at(threshold: float) -> Event:
    """The event ``f(x) > z``: predicted positive after shifting the decision threshold.

    Example:
        >>> e = predicted_positive_at(-1.0)
        >>> e.name, str(e.indicator)
        ('score>-1', 's > -1')
    """
    z = float(threshold)
    if not math.isfinite(z):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    return _event(f"score>{z:g}", lambda y, o: 0, lambda y, o: 1, Indicator(z, strict=True))


EVENTS = {
    e.name: e
    for e in (
        PREDICTED_POSITIVE, PREDICTED_NEGATIVE, TRUE_POSITIVE, FALSE_POSITIVE, TRUE_NEGATIVE,
        FALSE_NEGATIVE, ERROR, CORRECT, DISAGREES_WITH_BASELINE, AGREES_WITH_BASELINE, WIN,
        LOSS, LABEL, ONE,
    )
}
