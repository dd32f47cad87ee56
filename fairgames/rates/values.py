"""Value checks of the data rates are computed on: labels, group codes, weights, finiteness.

Each check reads its tensor once (a host-device sync, so it runs where data enters — a
:class:`~fairgames.data.TabularDataset`, a whole-split evaluation, a ``strict``
optimizer — never in a training step) and returns ``None`` or the message of the problem:
what is wrong, how many rows, the first few offending rows with their values, and the
remedy. Callers raise it as their own error class (``RatesError``, ``DataError``).

Example:
    >>> import torch
    >>> print(label_problem(torch.tensor([1.0, 2.0, 0.0]), "binary"))  # doctest: +ELLIPSIS
    binary labels must be 0 or 1: 1 of 3 rows is not, e.g. row 1 = 2.0; map the classes ...
    >>> label_problem(torch.tensor([1.0, 0.0]), "binary") is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

SHOWN = 3
"""How many offending rows a message quotes."""


def offending_rows(bad: torch.Tensor, values: torch.Tensor, *, columns: Sequence[str] = ()
                   ) -> str:
    """``"k of n rows …, e.g. row i = v, …"`` for a ``[N]`` (or ``[N, D]``) bad mask (syncs).

    Example:
        >>> import torch
        >>> offending_rows(torch.tensor([False, True, True]), torch.tensor([0.0, 5.0, -1.0]))
        '2 of 3 rows are not, e.g. row 1 = 5.0, row 2 = -1.0'
    """
    n = int(bad.shape[0])
    rows = bad.reshape(n, -1).any(1)
    count = int(rows.sum())
    where = bad.nonzero()[:SHOWN].tolist()
    shown = []
    for idx in where:
        value = values[tuple(idx)].item()
        if len(idx) == 2:
            col = columns[idx[1]] if idx[1] < len(columns) else idx[1]
            shown.append(f"row {idx[0]} column {col!r} = {value}")
        else:
            shown.append(f"row {idx[0]} = {value}")
    verb = "is" if count == 1 else "are"
    return f"{count} of {n} rows {verb} not, e.g. {', '.join(shown)}"


def finite_problem(x: torch.Tensor, headline: str, remedy: str, *,
                   columns: Sequence[str] = ()) -> str | None:
    """The message ``"{headline}: <rows>; {remedy}"`` when ``x`` holds NaN or ±inf
    (``columns`` name a matrix's columns)."""
    bad = ~torch.isfinite(x)
    if not bool(bad.any()):
        return None
    return f"{headline}: {offending_rows(bad, x, columns=columns)}; {remedy}"


def label_problem(labels: torch.Tensor, label_kind: str) -> str | None:
    """The message when ``labels`` do not fit ``label_kind`` (0/1, or [0, 1] for ``"real"``)."""
    nan = finite_problem(labels, "labels must be finite (no NaN or inf)",
                         "drop the unlabelled rows or impute their labels")
    if nan is not None:
        return nan
    if label_kind == "binary":
        bad = (labels != 0) & (labels != 1)
        if bool(bad.any()):
            return (f"binary labels must be 0 or 1: {offending_rows(bad, labels)}; map the "
                    "classes to 0/1 (e.g. labels = (y == positive_class).float()), or declare "
                    "label_kind='real' for targets in [0, 1]")
    elif label_kind == "real":
        bad = (labels < 0) | (labels > 1)
        if bool(bad.any()):
            return (f"real labels must lie in [0, 1]: {offending_rows(bad, labels)}; rescale "
                    "the targets to [0, 1] (e.g. (y - y.min()) / (y.max() - y.min()))")
    return None


def code_problem(codes: torch.Tensor, names: Sequence[str], attribute: str, *,
                 names_field: str = "group_values") -> str | None:
    """The message when hard group codes fall outside ``0..len(names) - 1`` (``names_field``:
    where the caller declares the value names)."""
    n = len(names)
    bad = (codes < 0) | (codes >= n)
    if not bool(bad.any()):
        return None
    return (f"group {attribute!r}: codes must lie in 0..{n - 1} (values {list(names)}): "
            f"{offending_rows(bad, codes)}; recode the attribute to 0..{n - 1}, or list "
            f"every value in {names_field}[{attribute!r}] (one name per code)")


def weight_problem(weights: torch.Tensor) -> str | None:
    """The message when example weights are NaN, infinite or negative."""
    bad = ~(torch.isfinite(weights) & (weights >= 0))
    if not bool(bad.any()):
        return None
    return (f"weights must be finite and non-negative: {offending_rows(bad, weights)}; "
            "drop those rows or give them weight 0 (a negative weight is not a probability "
            "mass: rates would leave [0, 1])")
