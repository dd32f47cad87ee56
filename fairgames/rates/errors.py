"""Errors raised by the rates layer. Each message names the offending input."""


class RatesError(ValueError):
    """Malformed input to the rates layer (shape, dtype, unknown group, empty subset, NaN).

    Example:
        >>> import torch
        >>> from fairgames.rates import Batch
        >>> try:
        ...     Batch(scores=torch.zeros(0), labels=torch.zeros(0))
        ... except RatesError as e:
        ...     print(e)
        a batch needs at least one example (labels has shape [0])
    """


class EmptySubsetError(RatesError):
    """A subset has no (weighted) example over a whole split, so its rate is undefined.

    Example:
        >>> issubclass(EmptySubsetError, RatesError), issubclass(RatesError, ValueError)
        (True, True)
    """


class NonFiniteScoresError(RatesError):
    """The model produced NaN or infinite scores.

    Example:
        >>> raise NonFiniteScoresError("2 scores are NaN")
        Traceback (most recent call last):
        ...
        fairgames.rates.errors.NonFiniteScoresError: 2 scores are NaN
    """
