"""The fitted preprocessing of a user's table: which columns are features and how each is
encoded, how the target becomes a label and the protected column group codes. A plain
object: :meth:`TablePreprocessor.transform` applies it to new rows, ``to_dict`` /
``from_dict`` round-trip it through JSON (a run writes it as ``preprocess.json``).

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"age": [20, 30, 40, 50], "job": ["a", "b", "a", None],
    ...                    "sex": ["F", "M", "F", "M"], "y": [0, 1, 1, 0]})
    >>> pre = TablePreprocessor.fit(df, [0, 1, 2], target="y", protected="sex")
    >>> pre.feature_names
    ['age', 'job=a', 'job=b']
    >>> pre.transform(df)[3].tolist()      # age 50 standardised on rows 0-2; job unseen
    [2.4494898319244385, 0.0, 0.0]
    >>> TablePreprocessor.from_dict(pre.to_dict()) == pre
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from .dataset import LABEL_KINDS, TabularDataset
from .errors import DataArgumentError, DataError
from .table_columns import (
    CategoricalColumn,
    NumericalColumn,
    Where,
    codes_of,
    column_from_dict,
    numbers,
    row_names,
    sorted_names,
    string_columns,
    value_names,
)

FORMAT = "fairgames.table_preprocess"
VERSION = 1
# an object column this share of whose values are numbers is a numerical column with typos
NUMERIC_SHARE = 0.9


@dataclass(frozen=True)
class TablePreprocessor:
    """Features, label and groups of a table, fitted on its training rows.

    Attributes:
        columns: the feature columns' encoders, in feature order.
        target: the target column; ``label_kind`` ``"binary"`` or ``"real"``.
        positive: the target value (its name) that is label 1, or ``None`` for a 0/1 target.
        protected: the protected column; ``group_names[code]`` its values.
        include_protected: whether the protected column is among ``columns``.
    """

    columns: tuple[NumericalColumn | CategoricalColumn, ...]
    target: str
    label_kind: str
    positive: str | None
    protected: str
    group_names: tuple[str, ...]
    include_protected: bool = False

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, frame: pd.DataFrame, train: Sequence[int] | np.ndarray, *, target: str,
            protected: str, categorical: Sequence[str] | None = None,
            numerical: Sequence[str] | None = None, positive: Any = None,
            label_kind: str = "binary", include_protected: bool = False,
            source: str | None = None) -> TablePreprocessor:
        """Fit on the rows ``train`` (positions) of ``frame``; every row is checked:
        :meth:`for_target`, then :meth:`with_features`."""
        return cls.for_target(frame, target=target, protected=protected, positive=positive,
                              label_kind=label_kind, include_protected=include_protected,
                              source=source).with_features(frame, train, categorical,
                                                           numerical, source)

    @classmethod
    def for_target(cls, frame: pd.DataFrame, *, target: str, protected: str,
                   positive: Any = None, label_kind: str = "binary",
                   include_protected: bool = False, source: str | None = None
                   ) -> TablePreprocessor:
        """The label and group part (no feature yet), checked on every row of ``frame``:
        a binary target is 0/1 (or boolean) unless ``positive`` names its label-1 value; a
        real one lies in [0, 1]; neither is constant nor missing; the protected column has
        two values or more and none missing. ``source`` (a CSV file) makes messages name
        the file's lines."""
        frame = string_columns(frame)
        where = row_names(frame, source)
        check_columns(frame, target, protected)
        if label_kind not in LABEL_KINDS:
            raise DataArgumentError(f"label_kind must be one of {LABEL_KINDS}, got "
                                    f"{label_kind!r}")
        pos = binary_positive(frame[target], target, positive, where) \
            if label_kind == "binary" else _no_positive(positive, target)
        groups = tuple(sorted_names(_group_names(frame[protected], protected, where)))
        if len(groups) < 2:
            raise DataError(f"protected column {protected!r} has the single value "
                            f"{groups[0]!r}; a group constraint needs at least two groups")
        pre = cls((), target, label_kind, pos, protected, groups, bool(include_protected))
        _check_target_varies(pre.labels(frame, source), target)
        return pre

    def with_features(self, frame: pd.DataFrame, train: Sequence[int] | np.ndarray,
                      categorical: Sequence[str] | None = None,
                      numerical: Sequence[str] | None = None, source: str | None = None
                      ) -> TablePreprocessor:
        """A copy with the feature encoders fitted on the rows ``train`` of ``frame``.

        ``categorical`` / ``numerical`` name the feature columns and their encoding; when
        both are ``None`` every column but the target (and the protected one, unless
        ``include_protected``) is a feature: numbers numerical, text and booleans categorical.
        """
        frame = string_columns(frame)
        where = row_names(frame, source)
        kinds = feature_kinds(frame, self.target, self.protected, categorical, numerical,
                              self.include_protected, where)
        rows = np.asarray(train, dtype=np.int64)
        cols = tuple(NumericalColumn.fit(frame[c], c, rows, where) if k == "numerical"
                     else CategoricalColumn.fit(frame[c], c, rows) for c, k in kinds.items())
        return replace(self, columns=cols)

    # ------------------------------------------------------------------ applying
    @property
    def feature_names(self) -> list[str]:
        """One name per feature column (``age``, ``age=<missing>``, ``job=teacher``, ...)."""
        return [n for c in self.columns for n in c.feature_names()]

    def transform(self, frame: pd.DataFrame, source: str | None = None) -> torch.Tensor:
        """The ``[N, D]`` float32 features of ``frame``'s rows (the target is not needed;
        the protected column only when it is a feature).

        Raises:
            DataError: a feature column missing from ``frame`` (the message lists those it
                has) or a numerical column with text that is no number (column and row).
        """
        frame = string_columns(frame)
        _require(frame, [c.name for c in self.columns], "feature")
        where = row_names(frame, source)
        blocks = [c.encode(frame[c.name], where) for c in self.columns]
        x = (np.concatenate(blocks, axis=1) if blocks
             else np.zeros((len(frame), 0), dtype=np.float32))
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def labels(self, frame: pd.DataFrame, source: str | None = None) -> torch.Tensor:
        """The ``[N]`` float32 labels of ``frame``'s target column."""
        frame = string_columns(frame)
        _require(frame, [self.target], "target")
        where = row_names(frame, source)
        s = frame[self.target]
        _no_missing(s, self.target, "target", where)
        if self.label_kind == "real":
            y = real_target(s, self.target, where)
        elif self.positive is not None:
            y = (value_names(s) == self.positive).astype(np.float64)
        else:
            binary_positive(s, self.target, None, where)   # 0/1, else an error naming it
            y = numbers(s, self.target, where)
        return torch.from_numpy(np.asarray(y, dtype=np.float32))

    def groups(self, frame: pd.DataFrame, source: str | None = None) -> torch.Tensor:
        """The ``[N]`` int64 codes (``group_names[code]``) of the protected column."""
        frame = string_columns(frame)
        _require(frame, [self.protected], "protected")
        where = row_names(frame, source)
        names = value_names(frame[self.protected])
        _no_missing(frame[self.protected], self.protected, "protected", where)
        codes = codes_of(names, self.group_names)
        bad = np.flatnonzero(codes < 0)
        if len(bad):
            raise DataError(f"protected column {self.protected!r} holds {names[bad[0]]!r} at "
                            f"{where(int(bad[0]))}, not one of the groups "
                            f"{list(self.group_names)} it was fitted with")
        return torch.from_numpy(codes)

    def dataset(self, frame: pd.DataFrame, name: str = "table", source: str | None = None
                ) -> TabularDataset:
        """``frame``'s rows as a :class:`TabularDataset` (target and protected columns
        needed)."""
        return TabularDataset(
            features=self.transform(frame, source), labels=self.labels(frame, source),
            label_kind=self.label_kind, groups={self.protected: self.groups(frame, source)},
            group_names={self.protected: list(self.group_names)},
            feature_names=self.feature_names, label_name=self.target, name=name)

    # ------------------------------------------------------------------ plain data
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: strings, numbers, booleans, lists."""
        return {"format": FORMAT, "version": VERSION, "target": self.target,
                "label_kind": self.label_kind, "positive": self.positive,
                "protected": self.protected, "group_names": list(self.group_names),
                "include_protected": self.include_protected,
                "feature_names": self.feature_names,
                "columns": [c.to_dict() for c in self.columns]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TablePreprocessor:
        """The preprocessor :meth:`to_dict` wrote (a JSON file's content)."""
        if d.get("format") != FORMAT or d.get("version") != VERSION:
            raise DataError(f"not a table preprocessing record of version {VERSION} (format "
                            f"{d.get('format')!r}, version {d.get('version')!r})")
        return cls(tuple(column_from_dict(c) for c in d["columns"]), str(d["target"]),
                   str(d["label_kind"]), d["positive"], str(d["protected"]),
                   tuple(str(g) for g in d["group_names"]), bool(d["include_protected"]))


# ---------------------------------------------------------------------- schema checks
def check_columns(frame: pd.DataFrame, target: str, protected: str) -> None:
    """An empty frame, duplicate column names, an unknown target or protected column, or
    the same column as both: a :class:`DataError` naming it and the columns there are."""
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"expected a pandas DataFrame, got {type(frame).__name__}")
    if len(frame) == 0 or frame.shape[1] == 0:
        raise DataError(f"the table is empty ({frame.shape[0]} rows, {frame.shape[1]} "
                        "columns)")
    dupes = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
    if dupes:
        raise DataError(f"the table has duplicate column names {dupes}; rename them")
    for role, col in (("target", target), ("protected", protected)):
        if not isinstance(col, str) or col not in frame.columns:
            raise DataArgumentError(f"unknown {role} column {col!r}; the table's columns "
                                    f"are {[str(c) for c in frame.columns]}")
    if target == protected:
        raise DataArgumentError(f"the target and the protected column are both {target!r}")


def feature_kinds(frame: pd.DataFrame, target: str, protected: str,
                  categorical: Sequence[str] | None, numerical: Sequence[str] | None,
                  include_protected: bool, where: Where) -> dict[str, str]:
    """Feature column -> ``"numerical"`` or ``"categorical"``, in the table's order; an
    unknown column, or text that is no number in a numerical one, is named."""
    if categorical is None and numerical is None:
        skip = {target} | ({protected} if not include_protected else set())
        kinds = {str(c): _inferred_kind(frame[c], str(c), where)
                 for c in frame.columns if c not in skip}
        if include_protected:    # group names, never a number to standardise
            kinds[protected] = "categorical"
    else:
        kinds = _listed_kinds(frame, target, protected, list(categorical or []),
                              list(numerical or []), include_protected)
    for c, kind in kinds.items():
        if kind == "numerical":
            numbers(frame[c], c, where)     # text or an infinity: named, before any fit
    return kinds


def _listed_kinds(frame: pd.DataFrame, target: str, protected: str, cats: list[str],
                  nums: list[str], include_protected: bool) -> dict[str, str]:
    listed = cats + nums
    unknown = [c for c in listed if c not in frame.columns]
    if unknown:
        raise DataArgumentError(f"unknown feature column(s) {unknown}; the table's columns "
                                f"are {[str(c) for c in frame.columns]}")
    both = sorted(set(cats) & set(nums))
    if both:
        raise DataArgumentError(f"column(s) {both} are listed as both categorical and "
                                "numerical")
    roles = [c for c in listed if c in (target, protected)]
    if roles:
        raise DataArgumentError(f"column(s) {roles} are the target or the protected column, "
                                "not features (include_protected=True adds the protected one)")
    if include_protected:
        cats.append(protected)
    kinds = {c: "categorical" for c in cats} | {c: "numerical" for c in nums}
    return {str(c): kinds[c] for c in frame.columns if c in kinds}


def _inferred_kind(s: pd.Series, column: str, where: Where) -> str:
    if pd.api.types.is_bool_dtype(s):
        return "categorical"
    if pd.api.types.is_numeric_dtype(s):
        return "numerical"
    if pd.api.types.is_datetime64_any_dtype(s) or pd.api.types.is_timedelta64_dtype(s):
        raise DataError(f"column {column!r} holds dates or times; convert it to numbers, or "
                        "give the feature lists (categorical / numerical) with it in "
                        "categorical or left out")
    present = s.notna().to_numpy()
    parsed = pd.to_numeric(s, errors="coerce").notna().to_numpy()
    if present.any() and 1.0 > parsed.sum() / present.sum() >= NUMERIC_SHARE:
        numbers(s, column, where)      # names the first cell that is no number
    return "categorical"


def binary_positive(s: pd.Series, target: str, positive: Any, where: Where
                    ) -> str | None:
    """The checked ``positive`` value's name; ``None`` for a 0/1 (or boolean) target, and
    any other target a :class:`DataError` naming the column and the values it holds."""
    _no_missing(s, target, "target", where)
    names = value_names(s)
    seen = sorted_names(names.tolist())
    if positive is not None:
        pos = value_names(pd.Series([positive]))[0]
        if pos not in seen:
            raise DataArgumentError(f"positive={positive!r} is not a value of the target "
                                    f"column {target!r} (it holds {_shown(seen)})")
        return str(pos)
    if set(seen) <= {"0", "1"} or set(seen) <= {"False", "True"}:
        return None
    raise DataArgumentError(
        f"the target column {target!r} is not binary: it holds {_shown(seen)}; for a "
        "classification problem give positive=<value> (data.positive: the value that is "
        "label 1, every other value 0), for a regression problem label_kind='real' "
        "(data.label_kind=real, values in [0, 1])")


def real_target(s: pd.Series, target: str, where: Where) -> np.ndarray:
    """A regression target's values, which must be numbers in [0, 1]."""
    y = numbers(s, target, where)
    lo, hi = float(np.nanmin(y)), float(np.nanmax(y))
    if lo < 0.0 or hi > 1.0:
        raise DataError(f"the real-valued target {target!r} ranges over [{lo:g}, {hi:g}]; "
                        "regression targets must lie in [0, 1] (the regression problems "
                        "predict in [0, 1]): rescale it, e.g. (y - min) / (max - min)")
    return y


def _no_positive(positive: Any, target: str) -> None:
    if positive is not None:
        raise DataArgumentError(f"positive={positive!r} binarises a classification target; "
                                f"the target {target!r} is declared real-valued "
                                "(label_kind='real')")


def _check_target_varies(labels: torch.Tensor, target: str) -> None:
    if len(labels) and bool((labels == labels[0]).all()):
        raise DataError(f"the target column {target!r} is constant (every row's label is "
                        f"{float(labels[0]):g}); nothing to learn")


def _group_names(s: pd.Series, protected: str, where: Where) -> list[str]:
    _no_missing(s, protected, "protected", where)
    return value_names(s).tolist()


def _no_missing(s: pd.Series, column: str, role: str, where: Where) -> None:
    miss = np.flatnonzero(s.isna().to_numpy())
    if len(miss):
        raise DataError(f"the {role} column {column!r} has {len(miss)} missing value(s), "
                        f"first at {where(int(miss[0]))}; fill them in or drop those rows")


def _require(frame: pd.DataFrame, columns: Sequence[str], role: str) -> None:
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise DataError(f"{role} column(s) {absent} are not in the table; it has "
                        f"{[str(c) for c in frame.columns]}")


def _shown(names: Sequence[str], limit: int = 8) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"{len(names)} distinct values {list(names[:limit])}{more}"
