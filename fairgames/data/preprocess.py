"""Column encoders fitted on the training rows: one-hot, standardise, log, buckets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .errors import DataError

KINDS = ("onehot", "standardize", "log1p", "passthrough", "quantile", "bins",
         "percentile_bins", "thermometer", "quantile_left")


@dataclass(frozen=True)
class Col:
    """How one raw column becomes feature columns.

    kinds:
        ``onehot``: one 0/1 column per value seen anywhere in the file (``col=value``);
        ``arg``, if given, is the missing-value marker (e.g. ``"?"``): it gets no column,
        so its rows have an all-zero block (LIBSVM's a9a);
        ``standardize``: ``(x - mean) / std`` with train mean and std;
        ``log1p``: ``log(1 + x)``, unscaled (paper 003);
        ``passthrough``: the value as is;
        ``quantile``: ``arg`` equal-frequency buckets cut at train quantiles (like
        ``pandas.qcut``, repeated edges merged), one-hot;
        ``bins``: buckets at the fixed inner edges ``arg`` (right-closed, like
        ``pandas.cut``), one-hot;
        ``percentile_bins``: buckets at the train percentiles ``arg``, one-hot;
        ``thermometer``: one column ``x > e`` per train percentile edge ``e`` in ``arg``;
        ``quantile_left``: ``arg`` equal-frequency buckets ``[e_k, e_{k+1})`` (left-closed)
        at train quantiles, a repeated edge moved up to the next distinct train value, so
        heavy ties keep ``arg`` buckets (the quintiles of LIBSVM's a9a: education-num and
        hours-per-week keep 5 buckets), one-hot.

    Example:
        >>> Col("age", "quantile", 4)
        Col(name='age', kind='quantile', arg=4)
        >>> Col("age", "zscore")
        Traceback (most recent call last):
        ...
        fairgames.data.errors.DataError: unknown column encoding 'zscore'; known: (...)
    """

    name: str
    kind: str
    arg: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DataError(f"unknown column encoding {self.kind!r}; known: {KINDS}")


def _label(value: Any) -> str:
    """A category's name: integral floats without the ``.0``."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _edges(col: Col, train: np.ndarray) -> np.ndarray:
    if col.kind == "quantile":
        q = int(col.arg)
        edges = np.quantile(train, np.arange(1, q) / q)
    elif col.kind == "bins":
        edges = np.asarray(col.arg, dtype=np.float64)
    elif col.kind == "quantile_left":
        return _untied_quantiles(train, int(col.arg))
    else:  # percentile_bins, thermometer
        edges = np.percentile(train, np.asarray(col.arg, dtype=np.float64))
    return np.unique(edges)


def _untied_quantiles(train: np.ndarray, q: int) -> np.ndarray:
    """The ``q``-quantiles of ``train`` as left-closed edges, a repeated edge moved up to the
    next distinct value (none left: dropped). Reproduces a9a's bins: education-num's
    quintiles 9, 9, 10, 13 become 9, 10, 11, 13 (see ``docs/data.md``)."""
    values = np.unique(train)
    edges: list[float] = []
    for e in np.quantile(train, np.arange(1, q) / q):
        if edges and e <= edges[-1]:
            later = values[values > edges[-1]]
            if len(later) == 0:
                break
            e = later[0]
        edges.append(float(e))
    return np.asarray(edges, dtype=np.float64)


def encode(
    frame: pd.DataFrame,
    columns: Sequence[Col],
    train_rows: np.ndarray,
) -> tuple[np.ndarray, list[str], list[dict[str, Any]]]:
    """Encode ``columns`` of ``frame``; every statistic is fitted on ``train_rows`` only.

    One-hot vocabularies are the values present in the whole frame (a value list, not a
    statistic of the labels), so feature names do not depend on the split.

    Returns:
        ``(matrix [N, D] float32, feature names, per-column fitted parameters)``.

    Example:
        >>> frame = pd.DataFrame({"age": [20.0, 30.0, 40.0, 50.0], "sex": ["F", "M", "F", "M"]})
        >>> x, names, fitted = encode(frame, [Col("age", "standardize"), Col("sex", "onehot")],
        ...                           train_rows=np.arange(3))
        >>> x.shape, names
        ((4, 3), ['age', 'sex=F', 'sex=M'])
        >>> [round(float(v), 3) for v in x[:, 0]]   # mean and std of the first three rows
        [-1.225, 0.0, 1.225, 2.449]
    """
    blocks: list[np.ndarray] = []
    names: list[str] = []
    fitted: list[dict[str, Any]] = []
    n = len(frame)
    for col in columns:
        if col.name not in frame.columns:
            raise DataError(f"column {col.name!r} is not in the data (have: "
                            f"{list(frame.columns)[:8]}...)")
        encoder = _onehot if col.kind == "onehot" else _numeric
        block, col_names, params = encoder(col, frame[col.name], train_rows)
        blocks.append(block)
        names += col_names
        fitted.append(params)
    if not blocks:
        return np.zeros((n, 0), dtype=np.float32), names, fitted
    return np.concatenate(blocks, axis=1), names, fitted


def _onehot(col: Col, s: pd.Series, train_rows: np.ndarray
            ) -> tuple[np.ndarray, list[str], dict[str, Any]]:
    """One-hot columns over the values of the whole frame, in sorted order (by value, else
    by label where values do not compare)."""
    ids, uniques = pd.factorize(s, use_na_sentinel=False)
    labels = [_label(u) for u in uniques]
    try:
        order = sorted(range(len(uniques)), key=lambda i: (uniques[i], labels[i]))
    except TypeError:
        order = sorted(range(len(uniques)), key=lambda i: labels[i])
    rank = np.empty(len(uniques), dtype=np.int64)
    rank[order] = np.arange(len(uniques))
    block = np.zeros((len(s), len(uniques)), dtype=np.float32)
    block[np.arange(len(s)), rank[ids]] = 1.0
    cats = [labels[i] for i in order]
    if col.arg is not None:     # the missing-value marker: no column, an all-zero block
        keep = [k for k, c in enumerate(cats) if c != str(col.arg)]
        block, cats = block[:, keep], [cats[k] for k in keep]
    return (block, [f"{col.name}={c}" for c in cats],
            {"column": col.name, "kind": "onehot", "values": cats})


def _numeric(col: Col, s: pd.Series, train_rows: np.ndarray
             ) -> tuple[np.ndarray, list[str], dict[str, Any]]:
    """A numeric column's block: scaled, transformed or bucketed with statistics fitted on
    ``train_rows``."""
    x = pd.to_numeric(s, errors="raise").to_numpy(dtype=np.float64)
    if np.isnan(x).any():
        raise DataError(f"column {col.name!r} has missing values; it cannot be encoded "
                        f"as {col.kind}")
    tr = x[train_rows]
    if len(tr) == 0:
        raise DataError("cannot fit the feature encoders on an empty training split")
    params: dict[str, Any] = {"column": col.name, "kind": col.kind}
    if col.kind == "standardize":
        mu, sd = float(tr.mean()), float(tr.std())
        sd = sd if sd > 0 else 1.0
        return ((x - mu) / sd).astype(np.float32)[:, None], [col.name], {
            **params, "mean": mu, "std": sd}
    if col.kind == "log1p":
        if (x < 0).any():
            raise DataError(f"log1p of column {col.name!r} needs values >= 0")
        return np.log1p(x).astype(np.float32)[:, None], [col.name], params
    if col.kind == "passthrough":
        return x.astype(np.float32)[:, None], [col.name], params
    edges = _edges(col, tr)
    params["edges"] = edges.tolist()
    if col.kind == "thermometer":
        return ((x[:, None] > edges[None, :]).astype(np.float32),
                [f"{col.name}>{e:g}" for e in edges], params)
    # quantile, bins, percentile_bins: right-closed buckets; quantile_left: left-closed
    left = col.kind == "quantile_left"
    bucket = np.searchsorted(edges, x, side="right" if left else "left")
    block = np.zeros((len(x), len(edges) + 1), dtype=np.float32)
    block[np.arange(len(x)), bucket] = 1.0
    bounds = ["-inf", *[f"{e:g}" for e in edges], "inf"]
    fmt = "{}=[{},{})" if left else "{}=({},{}]"
    return (block, [fmt.format(col.name, bounds[k], bounds[k + 1])
                    for k in range(len(edges) + 1)], params)
