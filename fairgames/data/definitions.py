"""What a data set definition is: its protected attributes, targets, recipes and sources
(:class:`DatasetDef`), and the small builders the registry writes them with (a categorical or
thresholded attribute, a fixed list of one-hot or standardised columns).

The definitions themselves are :mod:`fairgames.data.registry`'s.

Example:
    >>> import pandas as pd
    >>> sex = _categorical("sex", "sex", ["Female", "Male"])
    >>> sex.codes(pd.DataFrame({"sex": ["Male", "Female", "Male"]})).tolist()
    [1, 0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .errors import DataError
from .preprocess import Col
from .sources import Source


@dataclass(frozen=True)
class Attribute:
    """A protected attribute: value names (index = code), how to compute the codes from the
    canonical frame, and the raw columns that reveal it (left out of the features unless
    ``include_protected``)."""

    name: str
    values: tuple[str, ...]
    codes: Callable[[pd.DataFrame], np.ndarray]
    columns: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True)
class Target:
    """A label: binary (0/1) or real (in [0, 1]); ``columns`` never become features."""

    name: str
    kind: str
    values: Callable[[pd.DataFrame], np.ndarray]
    columns: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True)
class Recipe:
    """One paper's protocol (or the library default, ``paper=None``) for a data set."""

    paper: str | None
    protected: str
    target: str
    features: Callable[[pd.DataFrame], list[Col]]
    split: str  # "official" or "random"
    # share of all rows held out for test by a random split; None: the data set's
    # random_test_fraction (an official-split recipe re-split with split="random")
    test_fraction: float | None
    validation_fraction: float  # share of the non-test rows
    stratify: str | None  # None, "label", "group", "label_group"
    include_protected: bool = False
    group_as_feature: bool = False
    row_filter: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    description: str = ""


@dataclass(frozen=True)
class DatasetDef:
    """A data set: its sources (in order of preference), attributes, targets and recipes."""

    name: str
    title: str
    sources: tuple[Source, ...]
    attributes: dict[str, Attribute]
    targets: dict[str, Target]
    recipes: dict[str | None, Recipe]
    base_filter: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    filter_description: str = ""
    has_official_split: bool = False
    random_test_fraction: float = 0.2
    notes: list[str] = field(default_factory=list)


def _categorical(name: str, column: str, values: Sequence[str], description: str = "",
                 mapping: dict | None = None) -> Attribute:
    vals = tuple(values)

    def codes(df: pd.DataFrame) -> np.ndarray:
        ids, uniques = pd.factorize(df[column], use_na_sentinel=False)
        lookup = {v: i for i, v in enumerate(vals)}
        names = [mapping.get(u, u) if mapping is not None else u for u in uniques]
        per_unique = np.asarray([lookup.get(str(u), -1) for u in names], dtype=np.int64)
        if (per_unique < 0).any():
            bad = [str(u) for u, c in zip(uniques, per_unique, strict=True) if c < 0][:5]
            raise DataError(f"unexpected values {bad} of column {column!r} for attribute "
                            f"{name!r} (known: {list(vals)})")
        return per_unique[ids] if len(ids) else np.zeros(0, dtype=np.int64)

    return Attribute(name, vals, codes, (column,), description)


def _threshold(name: str, column: str, values: tuple[str, str],
               fn: Callable[[np.ndarray], np.ndarray], columns: tuple[str, ...],
               description: str) -> Attribute:
    def codes(df: pd.DataFrame) -> np.ndarray:
        return fn(df[column].to_numpy(dtype=np.float64)).astype(np.int64)

    return Attribute(name, values, codes, columns, description)


def _fixed(cols: list[Col]) -> Callable[[pd.DataFrame], list[Col]]:
    return lambda df: list(cols)


def _onehot(*names: str) -> list[Col]:
    return [Col(n, "onehot") for n in names]


def _std(*names: str) -> list[Col]:
    return [Col(n, "standardize") for n in names]
