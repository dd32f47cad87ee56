"""Errors raised by :mod:`fairgames.data`. Each message names the offending input."""


class DataError(ValueError):
    """A data set, attribute, file or argument that the data layer cannot use.

    The message says what is wrong and, for a missing file, how to get it.
    """
