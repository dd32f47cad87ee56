"""Checks and encoders of single columns of a user's table: values as names, numbers with
the offending row named, and the fitted encoders of a numerical and a categorical column.

Every encoder is fitted on the training rows only. A numerical column is standardised with
the mean and standard deviation of its observed training values; a missing value becomes the
training median, and a 0/1 column ``<name>=<missing>`` marks such rows when the training rows
had any. A categorical column is one-hot over the values of the training rows (a missing value
is the category ``<missing>``); a value the training rows did not have is all zeros.

Example:
    >>> import pandas as pd
    >>> col = NumericalColumn.fit(pd.Series([1.0, 3.0, None, 100.0]), "x", train=[0, 1, 2])
    >>> col.feature_names(), col.mean, col.fill
    (['x', 'x=<missing>'], 2.0, 2.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .errors import DataError
from .preprocess import _label

MISSING = "<missing>"
"""The name of a missing value: a categorical column's category, a numerical column's flag."""

Where = Callable[[int], str]
"""Row position -> how a message names that row (``row 7``, ``row 7 (line 9 of f.csv)``)."""


def row_names(frame: pd.DataFrame, source: str | None = None) -> Where:
    """How messages name the rows of ``frame``: its index label and, for a CSV file
    ``source`` (header on line 1, no quoted line breaks), the line of the file.

    Example:
        >>> row_names(pd.DataFrame({"a": [1, 2]}), "t.csv")(1)
        'row 1 (line 3 of t.csv)'
    """
    index = frame.index

    def where(i: int) -> str:
        text = f"row {index[i]!r}"
        return f"{text} (line {i + 2} of {source})" if source else text
    return where


def string_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its column names as strings (``0`` is ``"0"``), so that a column is
    named the same in the table, the messages, the feature names and ``preprocess.json``.

    Example:
        >>> list(string_columns(pd.DataFrame({0: [1], "a": [2]})).columns)
        ['0', 'a']
    """
    if isinstance(frame, pd.DataFrame) and not all(isinstance(c, str) for c in frame.columns):
        return frame.rename(columns=str)
    return frame


def codes_of(names: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    """Each name's position in ``vocabulary``, ``-1`` for a name not in it (one lookup per
    distinct name).

    Example:
        >>> codes_of(np.asarray(["b", "z", "a"], dtype=object), ["a", "b"]).tolist()
        [1, -1, 0]
    """
    lookup = {c: i for i, c in enumerate(vocabulary)}
    ids, uniques = pd.factorize(names)
    per_unique = np.asarray([lookup.get(u, -1) for u in uniques], dtype=np.int64)
    return per_unique[ids] if len(ids) else np.zeros(0, dtype=np.int64)


def value_names(s: pd.Series) -> np.ndarray:
    """Each value's name (``1.0`` is ``"1"``; a missing value is ``<missing>``), as an
    object array; one conversion per distinct value.

    Example:
        >>> value_names(pd.Series([1.0, None, 2.5])).tolist()
        ['1', '<missing>', '2.5']
    """
    ids, uniques = pd.factorize(s, use_na_sentinel=False)
    names = np.asarray([MISSING if _isna(u) else _label(u) for u in uniques], dtype=object)
    return names[ids] if len(ids) else np.zeros(0, dtype=object)


def sorted_names(names: Sequence[str]) -> list[str]:
    """Distinct names in a stable order: numbers by value first, then text.

    Example:
        >>> sorted_names(["10", "b", "2", "a", "2"])
        ['2', '10', 'a', 'b']
    """
    def key(name: str) -> tuple[int, float, str]:
        try:
            return (0, float(name), name)
        except ValueError:
            return (1, 0.0, name)
    return sorted(set(names), key=key)


def numbers(s: pd.Series, column: str, where: Where) -> np.ndarray:
    """The column as float64 (missing values NaN); text that is no number, or an infinite
    value, is a :class:`DataError` naming the column and the first such row.

    Example:
        >>> numbers(pd.Series(["1", None, "x"]), "age", lambda i: f"row {i}")
        Traceback (most recent call last):
        ...
        fairgames.data.errors.DataError: column 'age' is numerical but row 2 holds 'x' ...
    """
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.flatnonzero(np.isnan(x) & s.notna().to_numpy())
    if len(bad):
        raise DataError(f"column {column!r} is numerical but {where(int(bad[0]))} holds "
                        f"{s.iloc[bad[0]]!r} ({len(bad)} row(s) are not numbers); fix the "
                        "values, or list the column in categorical")
    inf = np.flatnonzero(np.isinf(x))
    if len(inf):
        raise DataError(f"column {column!r} holds an infinite value at {where(int(inf[0]))}; "
                        "replace it by a finite number or leave the cell empty (missing)")
    return x


@dataclass(frozen=True)
class NumericalColumn:
    """A standardised number column: ``(x - mean) / std``, missing ``x`` taken as ``fill``
    (the training median) and, when ``indicator``, flagged in a column ``name=<missing>``."""

    name: str
    mean: float
    std: float
    fill: float
    indicator: bool

    @classmethod
    def fit(cls, s: pd.Series, name: str, train: Sequence[int] | np.ndarray,
            where: Where | None = None) -> NumericalColumn:
        """Fitted on the rows ``train`` of ``s`` (every row's values are checked)."""
        x = numbers(s, name, where or (lambda i: f"row {i}"))[np.asarray(train, dtype=np.int64)]
        seen = x[~np.isnan(x)]
        if len(seen) == 0:
            raise DataError(f"column {name!r} has no value in the training rows; drop it, or "
                            "fill it in")
        std = float(seen.std())
        # a constant column carries no information; unscaled it stays finite (as load's)
        return cls(name, float(seen.mean()), std if std > 0 else 1.0, float(np.median(seen)),
                   bool(len(seen) < len(x)))

    def feature_names(self) -> list[str]:
        return [self.name, f"{self.name}={MISSING}"] if self.indicator else [self.name]

    def encode(self, s: pd.Series, where: Where) -> np.ndarray:
        """``[N, 1]`` (or ``[N, 2]`` with the indicator) float32."""
        x = numbers(s, self.name, where)
        missing = np.isnan(x)
        z = (np.where(missing, self.fill, x) - self.mean) / self.std
        cols = [z, missing.astype(np.float64)] if self.indicator else [z]
        return np.stack(cols, axis=1).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.name, "kind": "numerical", "mean": self.mean, "std": self.std,
                "fill": self.fill, "indicator": self.indicator}


@dataclass(frozen=True)
class CategoricalColumn:
    """A one-hot column over ``categories`` (value names of the training rows, ``<missing>``
    among them when a training value was missing); any other value is all zeros."""

    name: str
    categories: tuple[str, ...]

    @classmethod
    def fit(cls, s: pd.Series, name: str, train: Sequence[int] | np.ndarray
            ) -> CategoricalColumn:
        """Fitted on the rows ``train`` of ``s``."""
        seen = value_names(s.iloc[np.asarray(train, dtype=np.int64)])
        return cls(name, tuple(sorted_names(seen.tolist())))

    def feature_names(self) -> list[str]:
        return [f"{self.name}={c}" for c in self.categories]

    def encode(self, s: pd.Series, where: Where) -> np.ndarray:
        """``[N, len(categories)]`` float32, all zeros for a category unseen in training."""
        code = codes_of(value_names(s), self.categories)
        block = np.zeros((len(s), len(self.categories)), dtype=np.float32)
        known = np.flatnonzero(code >= 0)
        block[known, code[known]] = 1.0
        return block

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.name, "kind": "categorical", "categories": list(self.categories)}


def column_from_dict(d: dict[str, Any]) -> NumericalColumn | CategoricalColumn:
    """The encoder a :meth:`to_dict` wrote.

    Example:
        >>> column_from_dict({"column": "c", "kind": "categorical", "categories": ["a"]})
        CategoricalColumn(name='c', categories=('a',))
    """
    kind = d.get("kind")
    if kind == "numerical":
        return NumericalColumn(str(d["column"]), float(d["mean"]), float(d["std"]),
                               float(d["fill"]), bool(d["indicator"]))
    if kind == "categorical":
        return CategoricalColumn(str(d["column"]), tuple(str(c) for c in d["categories"]))
    raise DataError(f"unknown column encoder kind {kind!r} in {d!r}; known: numerical, "
                    "categorical")


def _isna(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):   # a list-like cell: not missing
        return False
