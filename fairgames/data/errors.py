"""Errors raised by :mod:`fairgames.data`. Each message names the offending input."""


class DataError(ValueError):
    """A data set, attribute, file or argument that the data layer cannot use.

    The message says what is wrong and, for a missing file, how to get it.

    Example:
        >>> from fairgames.data import load
        >>> try:
        ...     load("no_such_dataset")
        ... except DataError as e:
        ...     print(str(e).split(";")[0])
        unknown data set 'no_such_dataset'
    """


class DataArgumentError(DataError):
    """An argument of :func:`fairgames.data.load` that names nothing the data set has (data
    set, protected attribute, target, split, paper) or is out of range: a config error,
    raised before any file is read (a missing or damaged file is a plain :class:`DataError`).

    Example:
        >>> from fairgames.data import load
        >>> try:
        ...     load("adult", protected="colour")
        ... except DataArgumentError as e:
        ...     print(str(e).split(";")[0])
        unknown protected attribute 'colour' for data set 'adult'
    """
