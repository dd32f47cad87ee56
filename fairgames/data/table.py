"""Your own table as seeded train / validation / test splits: :func:`from_frame` (a pandas
DataFrame) and :func:`load_table` (a CSV or Parquet file; ``data=table`` on the command line).

The conventions are the packaged loaders': one-hot categoricals and standardised numericals
fitted on the training rows, test drawn first with ``numpy.random.default_rng([seed, 0])``
and validation from the rest with ``[seed, 1]``, stratified by label × group (by group for a
real-valued target). Missing values and categories the training rows did not have are
handled as :mod:`fairgames.data.table_columns` says; the fitted
:class:`~fairgames.data.table_preprocess.TablePreprocessor` is ``metadata["preprocessor"]``.

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"age": range(40), "sex": ["F", "M"] * 20, "y": [0, 0, 1, 1] * 10})
    >>> splits = from_frame(df, target="y", protected="sex", seed=0)
    >>> [len(s) for s in splits], splits.train.feature_names
    ([24, 8, 8], ['age'])
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .dataset import DatasetSplits
from .errors import DataArgumentError, DataError
from .splits import random_split
from .table_columns import row_names, string_columns
from .table_preprocess import TablePreprocessor, feature_kinds

NAME = "table"
DEFAULT_SPLIT = (0.6, 0.2, 0.2)
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")
# Separators a CSV read as one column is checked for (data.sep names the one to use).
SEPARATORS = (";", "\t", "|")
DESCRIPTION = ("own table: one-hot categoricals (training values; others all zero; missing "
               "is <missing>), numericals standardised with the training mean and std "
               "(missing: the training median, flagged in <column>=<missing>), "
               "stratified by label x group")


def from_frame(
    frame: pd.DataFrame,
    *,
    target: str,
    protected: str,
    categorical: Sequence[str] | None = None,
    numerical: Sequence[str] | None = None,
    positive: Any = None,
    label_kind: str = "binary",
    split: Sequence[float] = DEFAULT_SPLIT,
    seed: int = 0,
    include_protected: bool = False,
    groups: Sequence[str] = (),
) -> DatasetSplits:
    """Train / validation / test :class:`~fairgames.data.TabularDataset` splits of a table.

    Args:
        frame: one row per example; the target, the protected column and the features.
        target: the label's column. ``label_kind="binary"``: 0/1 (or boolean) values, or any
            values with ``positive`` (that value is 1, every other 0); ``"real"``: numbers
            in [0, 1] (for a regression problem).
        protected: the protected attribute's column (group names: its values; it is the
            data's one attribute and, unless ``include_protected``, no feature).
        categorical, numerical: the feature columns and their encoding; both ``None``:
            every other column, numbers numerical and the rest categorical.
        split: ``(train, validation, test)`` fractions (or ``(train, test)``: no
            validation), summing to 1.
        seed: the split's seed.
        groups: more columns kept as group attributes beside ``protected`` (value names:
            their values as text; features as well unless listed elsewhere), e.g. to cross
            them (:func:`~fairgames.data.group_cross`).

    Raises:
        DataArgumentError: an unknown column (the message lists the table's), a target that
            is not binary for ``label_kind="binary"`` (its values named), bad fractions.
        DataError: an empty table, text in a numerical column, a missing target or group
            (the column and the row named), a constant target, too few rows for the split.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"job": ["a", "b"] * 10, "g": [0, 1, 1, 0] * 5,
        ...                    "y": ["no", "yes", "no", "no"] * 5})
        >>> s = from_frame(df, target="y", protected="g", positive="yes", split=(0.5, 0.5))
        >>> s.train.labels.sum().item(), len(s.validation), s.train.group_names
        (3.0, 0, {'g': ['0', '1']})
    """
    return _splits(frame, dict(target=target, protected=protected, positive=positive,
                               label_kind=label_kind, include_protected=include_protected),
                   categorical, numerical, split, seed, source=None, groups=groups)


def load_table(
    path: str | os.PathLike[str] | None = None,
    *,
    target: str | None = None,
    protected: str | None = None,
    categorical: Sequence[str] | None = None,
    numerical: Sequence[str] | None = None,
    positive: Any = None,
    label_kind: str = "binary",
    split: Sequence[float] = DEFAULT_SPLIT,
    seed: int = 0,
    include_protected: bool = False,
    groups: Sequence[str] = (),
    sep: str | None = None,
) -> DatasetSplits:
    """:func:`from_frame` of a CSV (``.csv``, compressed ``.csv.gz`` ..., ``.tsv``) or
    Parquet (``.parquet``, ``.pq``; needs pyarrow) file: ``data=table data.path=...``.
    Messages about a row name the file and, for a CSV, its line. ``groups`` as for
    :func:`from_frame` (``data.protected=sex*race`` on the command line). ``sep``: a CSV's
    field separator (``data.sep``; ``None``: ``,``, and a tab for ``.tsv``); a file that
    reads as one column whose header holds ``;``, a tab or ``|`` is refused, naming it
    (no silent guess: the separator a run read its table with is in its config).

    Example:
        >>> splits = load_table("my.csv", target="y", protected="sex")   # doctest: +SKIP
    """
    for key, value in (("path", path), ("target", target), ("protected", protected)):
        if value is None:
            raise DataArgumentError(f"own table data needs {key} (data.{key}=... on the "
                                    "command line)")
    frame = read_table(path, sep=sep)
    p = Path(path)
    _check_separator(frame, p, sep)
    try:
        splits = _splits(frame, dict(target=target, protected=protected, positive=positive,
                                     label_kind=label_kind, include_protected=include_protected),
                         categorical, numerical, split, seed,
                         source=str(p) if p.name.lower().endswith(CSV_SUFFIXES) else None,
                         groups=groups)
    except DataError as e:
        if str(p) in str(e):      # a row of a CSV file: its line names the file already
            raise
        raise type(e)(f"{p}: {e}") from e
    splits.metadata["sources"] = [{"path": str(p.resolve()), "sha256": _sha256(p),
                                   "rows": len(frame)}]
    splits.metadata["title"] = f"own table {p.name}"
    return splits


def read_table(path: str | os.PathLike[str], sep: str | None = None) -> pd.DataFrame:
    """The file as a DataFrame (pandas' CSV reader, fields separated by ``sep``, default
    ``,`` and a tab for ``.tsv``; pyarrow's Parquet reader). A missing, unreadable or damaged
    file, or an unknown suffix, is a :class:`DataError` naming it.

    Example:
        >>> read_table("no/such.csv")
        Traceback (most recent call last):
        ...
        fairgames.data.errors.DataError: the table file no/such.csv does not exist
    """
    p = Path(path)
    name = p.name.lower()
    if not name.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES):
        raise DataArgumentError(f"the table file {p} has no known suffix; use a CSV "
                                f"{CSV_SUFFIXES} or a Parquet file {PARQUET_SUFFIXES}")
    if not p.exists():
        raise DataError(f"the table file {p} does not exist")
    if not p.is_file():
        raise DataError(f"the table file {p} is not a file")
    if name.endswith(PARQUET_SUFFIXES):
        _require_pyarrow(p)
    separator = _separator(sep, name)
    try:
        if name.endswith(PARQUET_SUFFIXES):
            return pd.read_parquet(p, engine="pyarrow")
        return pd.read_csv(p, sep=separator)
    except Exception as exc:   # pandas', pyarrow's, codecs' and the decompressors' alike
        raise DataError(f"cannot read the table file {p} ({type(exc).__name__}: {exc}); is it "
                        "a complete file of that format?") from exc


def _separator(sep: str | None, name: str) -> str:
    """The CSV field separator: ``sep`` (``\\t`` as typed on a command line is a tab), or
    by the suffix (a tab for ``.tsv``, else ``,``)."""
    if sep is None:
        return "\t" if name.endswith(".tsv") else ","
    sep = "\t" if sep in ("\\t", "tab") else sep
    if not isinstance(sep, str) or len(sep) != 1:
        raise DataArgumentError(f"sep must be one character (data.sep=';', data.sep='\\t' "
                                f"for a tab), got {sep!r}")
    return sep


def _check_separator(frame: pd.DataFrame, path: Path, sep: str | None) -> None:
    """A CSV read as one column whose header holds another separator was written with that
    one (a table needs a target and a protected column, so one column is never right)."""
    if len(frame.columns) != 1 or path.name.lower().endswith(PARQUET_SUFFIXES):
        return
    header = str(frame.columns[0])
    shown = header if len(header) <= 60 else header[:57] + "..."
    found = [c for c in SEPARATORS if c in header]
    if found:
        used = _separator(sep, path.name.lower())
        raise DataArgumentError(
            f"the table file {path} has one column {shown!r} when read with sep={used!r}; "
            f"its header holds {found[0]!r}, so it looks {found[0]!r}-separated: give "
            f"data.sep={found[0]!r} (load_table(..., sep={found[0]!r}))")


def _splits(frame: pd.DataFrame, target_args: dict[str, Any],
            categorical: Sequence[str] | None, numerical: Sequence[str] | None,
            split: Sequence[float], seed: int, source: str | None,
            groups: Sequence[str] = ()) -> DatasetSplits:
    test_fraction, vfrac = _fractions(split)
    frame = string_columns(frame)
    base = TablePreprocessor.for_target(frame, **target_args, source=source)
    # the columns' schema is checked on every row before the split can be too small
    feature_kinds(frame, base.target, base.protected, categorical, numerical,
                  base.include_protected, row_names(frame, source))
    labels, codes = base.labels(frame, source), base.groups(frame, source)
    _check_group_sizes(base.protected, codes.numpy(), len(frame))
    kind = "label_group" if base.label_kind == "binary" else "group"
    strata = codes.numpy() * 2 + labels.numpy().astype(np.int64) if kind == "label_group" \
        else codes.numpy()
    n = len(frame)
    pool, test = random_split(n, (1.0 - test_fraction, test_fraction), seed=[seed, 0],
                              stratify=strata)
    tr, va = random_split(len(pool), (1.0 - vfrac, vfrac), seed=[seed, 1],
                          stratify=strata[pool])
    train, val = pool[tr], pool[va]
    if len(train) == 0 or len(test) == 0:
        raise DataError(f"{n} row(s) are too few for the split {tuple(split)}: train "
                        f"{len(train)}, validation {len(val)}, test {len(test)} rows")
    pre = base.with_features(frame, train, categorical, numerical, source)
    full = pre.dataset(frame, NAME, source)
    metadata = {
        "name": NAME, "title": "own table (DataFrame)", "paper": None,
        "protected": pre.protected, "target": pre.target, "label_kind": pre.label_kind,
        "positive": pre.positive, "include_protected": pre.include_protected,
        "split": "random", "seed": int(seed), "test_fraction": test_fraction,
        "validation_fraction": vfrac, "stratify": kind, "preprocessing": DESCRIPTION,
        "rows": {"used": n, "train": len(train), "validation": len(val), "test": len(test)},
        "sources": [], "encoders": pre.to_dict()["columns"],
        "split_indices": {"train": train, "validation": val, "test": test},
        "preprocessor": pre,
    }
    splits = DatasetSplits(*(full.subset(torch.from_numpy(i)) for i in (train, val, test)),
                           metadata=metadata)
    return with_group_columns(splits, frame, groups)


def _check_group_sizes(protected: str, codes: np.ndarray, n: int) -> None:
    """More groups than half the rows (an identifier, a raw number) leave most groups one
    row, which cannot lie in both the training and the test split (a stratum of one row
    stays in train), so no constraint on them could be trained and measured: refused here,
    naming the column, rather than later as a split too small."""
    distinct = len(np.unique(codes))
    if distinct > n / 2 and distinct > 2:
        raise DataArgumentError(
            f"the protected column {protected!r} has {distinct} distinct values over {n} rows "
            "(it looks like an identifier): a group needs rows in both the training and the "
            "test split; choose another protected column (data.protected=...), or bin it "
            "into a few groups (e.g. pandas.cut for a number) before loading the table")


def with_group_columns(splits: DatasetSplits, frame: pd.DataFrame, columns: Sequence[str]
                       ) -> DatasetSplits:
    """``splits`` (of ``frame``'s rows, ``metadata["split_indices"]``) with each of
    ``columns`` as one more group attribute (value names: the column's values as text, in
    sorted order).

    Raises:
        DataArgumentError: an unknown column (the table's columns listed).
        DataError: a missing value (the column and row named).
    """
    index = splits.metadata["split_indices"]
    parts = dict(splits.items())
    for column in columns:
        if column not in frame.columns:
            raise DataArgumentError(f"unknown group column {column!r}; the table has "
                                    f"{list(frame.columns)[:20]}")
        missing = frame[column].isna().to_numpy()
        if missing.any():
            raise DataError(f"group column {column!r} has no value in row "
                            f"{int(np.flatnonzero(missing)[0])}: every row needs its group")
        text = frame[column].astype(str)
        names = sorted(text.unique())
        codes = torch.from_numpy(pd.Categorical(text, categories=names).codes.astype(np.int64))
        for part, ds in parts.items():
            parts[part] = replace(ds, groups={**ds.groups, column: codes[index[part]]},
                                  group_names={**ds.group_names, column: names},
                                  validate=False)
    return DatasetSplits(parts["train"], parts["validation"], parts["test"],
                         metadata=splits.metadata)


def _fractions(split: Sequence[float]) -> tuple[float, float]:
    """``(test fraction, validation share of the non-test rows)`` of ``split``."""
    try:
        fr = [float(f) for f in split]
    except (TypeError, ValueError):
        fr = []
    ok = len(fr) in (2, 3) and all(np.isfinite(f) and f >= 0 for f in fr) \
        and abs(sum(fr) - 1.0) <= 1e-6 and fr[0] > 0 and fr[-1] > 0
    if not ok:
        raise DataArgumentError(f"split must be (train, validation, test) or (train, test) "
                                f"fractions, train and test positive, summing to 1; got "
                                f"{split!r}")
    train, val, test = fr if len(fr) == 3 else (fr[0], 0.0, fr[1])
    return test, val / (train + val)


def _require_pyarrow(path: Path) -> None:
    try:
        import pyarrow  # noqa: F401  (only to say how to install it)
    except ImportError as exc:
        raise DataError(f"reading the Parquet file {path} needs pyarrow: pip install pyarrow "
                        "(or save the table as CSV)") from exc


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
