"""Errors raised by the rates layer. Each message names the offending input."""


class RatesError(ValueError):
    """Malformed input to the rates layer (shape, dtype, unknown group, empty subset, NaN)."""


class EmptySubsetError(RatesError):
    """A subset has no (weighted) example over a whole split, so its rate is undefined."""


class NonFiniteScoresError(RatesError):
    """The model produced NaN or infinite scores."""
