"""Crossed (intersectional) groups: one protected attribute whose values are the cells of
several attributes, e.g. ``race=Black|sex=Female``.

The one design for intersections: :func:`group_cross` adds the crossed attribute to a
:class:`~fairgames.data.DatasetSplits` (constraints, reports and the own-data loader all read
it like any other attribute), and :func:`crossed_column` builds the same cell names on a
pandas table before :func:`~fairgames.data.from_frame`.

* Sparse: only the cells that occur are made (one integer key per row, ``torch.unique``),
  never the product of every attribute's values.
* A cell with no training row is dropped — a constraint on it could not be trained — and
  reported: a :class:`CrossedGroupsWarning` and the record ``splits.metadata["crossed"]``
  (:class:`CrossedGroups`, which a run writes to ``results.json``). Its validation/test rows
  take the value :data:`UNSEEN` (listed last, only when such rows exist).
* A cell with training rows but none on validation or test is kept: its rates there are
  undefined, as for any empty group (the group tables print ``None``).
* Numeric attributes: :func:`crossed_column` requires bands (``bands={"age": [25, 45]}``:
  half-open intervals ``(-inf, 25)``, ``[25, 45)``, ``[45, inf)``); attributes of a
  :class:`~fairgames.data.DatasetSplits` are already categorical codes.

Example:
    >>> import torch
    >>> from fairgames.data import DatasetSplits, TabularDataset
    >>> def part(race, sex):
    ...     return TabularDataset(
    ...         features=torch.zeros(len(race), 1), labels=torch.zeros(len(race)),
    ...         label_kind="binary", groups={"race": torch.tensor(race), "sex": torch.tensor(sex)},
    ...         group_names={"race": ["A", "B"], "sex": ["F", "M"]}, feature_names=["x"],
    ...         label_name="y")
    >>> splits = DatasetSplits(part([0, 0, 1, 1], [0, 1, 1, 1]), part([0], [1]), part([1], [1]))
    >>> crossed = group_cross(splits, ["race", "sex"])
    >>> crossed.train.group_names["race|sex"]     # race=B|sex=F never occurs: not made
    ['race=A|sex=F', 'race=A|sex=M', 'race=B|sex=M']
    >>> crossed.metadata["crossed"]["race|sex"]["empty"]["test"]  # undefined on test
    ['race=A|sex=F', 'race=A|sex=M']
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from .dataset import DatasetSplits, TabularDataset
from .errors import DataArgumentError

UNSEEN = "(not in train)"
SEPARATOR = "|"


class CrossedGroupsWarning(UserWarning):
    """Cells of a crossed attribute were dropped: they have no training row."""


@dataclass
class CrossedGroups:
    """What :func:`group_cross` made: the attributes crossed, the cells kept (training rows
    per cell) and the cells dropped (rows per split, none on train), as plain data."""

    name: str
    attributes: list[str]
    cells: int
    train_counts: dict[str, int]
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    empty: dict[str, list[str]] = field(default_factory=dict)   # split → kept cells with no row

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_cross(splits: DatasetSplits, attributes: Sequence[str], *,
                name: str | None = None) -> DatasetSplits:
    """``splits`` with one more protected attribute: the cells of ``attributes`` that occur
    on train, named ``"a=x|b=y"`` (value order: the attributes' own, the first slowest).

    Args:
        splits: the data; each attribute must be one of its protected attributes.
        attributes: two or more attribute names (one is allowed: a renamed copy).
        name: the new attribute's name (default ``"a|b|..."``).

    Returns:
        New splits sharing the tensors; ``metadata["crossed"][name]`` holds the
        :class:`CrossedGroups` record. Warns (:class:`CrossedGroupsWarning`) when a cell
        occurring on validation or test is dropped for having no training row.
    """
    attrs = _checked(splits.train, attributes)
    name = SEPARATOR.join(attrs) if name is None else name
    if name in splits.train.groups:
        raise DataArgumentError(f"the data already has an attribute {name!r}; pass name=...")
    sizes = [len(splits.train.group_names[a]) for a in attrs]
    keys = {part: _keys(ds, attrs, sizes) for part, ds in splits.items()}
    kept, train_codes = torch.unique(keys["train"], return_inverse=True)
    names = [_cell_name(int(k), attrs, sizes, splits.train.group_names) for k in kept.tolist()]
    counts = torch.bincount(train_codes, minlength=len(names)).tolist()
    record = CrossedGroups(name, attrs, len(names), dict(zip(names, counts, strict=True)))
    codes = {"train": train_codes}
    for part in ("validation", "test"):
        codes[part], seen = _lookup(keys[part], kept)
        unseen_keys, unseen_n = torch.unique(keys[part][~seen], return_counts=True)
        for k, n in zip(unseen_keys.tolist(), unseen_n.tolist(), strict=True):
            cell = _cell_name(k, attrs, sizes, splits.train.group_names)
            record.dropped.setdefault(cell, {"train": 0})[part] = n
        present = torch.zeros(len(names), dtype=torch.bool)
        present[codes[part][seen]] = True
        record.empty[part] = [n for n, p in zip(names, present.tolist(), strict=True) if not p]
    if record.dropped:
        names = [*names, UNSEEN]
        for part in ("validation", "test"):
            codes[part] = torch.where(_lookup(keys[part], kept)[1], codes[part], len(names) - 1)
        warnings.warn(f"group_cross({attrs}): {len(record.dropped)} cell(s) with no training "
                      f"row dropped (their validation/test rows read {UNSEEN!r}): "
                      f"{sorted(record.dropped)[:8]}", CrossedGroupsWarning, stacklevel=2)
    out = {part: _with_attribute(ds, name, codes[part], names) for part, ds in splits.items()}
    metadata = {**splits.metadata,
                "crossed": {**splits.metadata.get("crossed", {}), name: record.to_dict()}}
    return DatasetSplits(out["train"], out["validation"], out["test"], metadata)


def constrained_values(group_names: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """``group_names`` without :data:`UNSEEN`: the values a problem may constrain (the
    rows of dropped cells have no training row, so no constraint could train on them).

    Example:
        >>> constrained_values({"a|b": ["a=x|b=y", UNSEEN]})
        {'a|b': ['a=x|b=y']}
    """
    return {a: [v for v in names if v != UNSEEN] for a, names in group_names.items()}


def constrained_counts(ds: TabularDataset, attribute: str) -> dict[str, int]:
    """``ds.group_counts(attribute)`` without :data:`UNSEEN` (see :func:`constrained_values`)."""
    return {v: n for v, n in ds.group_counts(attribute).items() if v != UNSEEN}


def crossed_column(frame: pd.DataFrame, columns: Sequence[str], *,
                   bands: Mapping[str, Sequence[float]] | None = None) -> pd.Series:
    """One string column of ``frame`` with the cells of ``columns`` (``"a=x|b=y"``), for
    :func:`~fairgames.data.from_frame`'s ``protected``. A numeric column needs its
    ``bands`` (ascending edges; ``[e1, e2]`` makes ``<e1``, ``[e1,e2)`` and ``>=e2``).

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"sex": ["F", "M", "F"], "age": [19, 40, 70]})
        >>> crossed_column(df, ["sex", "age"], bands={"age": [25, 65]}).tolist()
        ['sex=F|age=<25', 'sex=M|age=[25,65)', 'sex=F|age=>=65']
    """
    bands = dict(bands or {})
    missing = [c for c in [*columns, *bands] if c not in frame.columns]
    if missing:
        raise DataArgumentError(f"unknown column(s) {missing}; the table has "
                                f"{list(frame.columns)[:20]}")
    parts = []
    for c in columns:
        s = frame[c]
        if c in bands:
            s = _banded(s, c, bands[c])
        elif pd.api.types.is_float_dtype(s) or (pd.api.types.is_integer_dtype(s)
                                                and s.nunique() > 20):
            raise DataArgumentError(
                f"column {c!r} is numeric ({s.nunique()} values): give its bands, e.g. "
                f"bands={{{c!r}: [25, 45, 65]}}, or band it yourself before crossing")
        if s.isna().any():
            row = int(np.flatnonzero(s.isna().to_numpy())[0])
            raise DataArgumentError(f"column {c!r} has a missing value (row {row}); fill it "
                                    "(e.g. with 'unknown') before crossing")
        parts.append(c + "=" + s.astype(str))
    out = parts[0]
    for p in parts[1:]:
        out = out + SEPARATOR + p
    return out.rename(SEPARATOR.join(columns))


def _banded(s: pd.Series, column: str, edges: Sequence[float]) -> pd.Series:
    e = [float(x) for x in edges]
    if not e or any(b <= a for a, b in zip(e, e[1:], strict=False)):
        raise DataArgumentError(f"bands of {column!r} must be ascending edges, got {list(edges)}")
    labels = [f"<{e[0]:g}"] + [f"[{a:g},{b:g})" for a, b in zip(e, e[1:], strict=False)] + [
        f">={e[-1]:g}"]
    idx = np.searchsorted(np.asarray(e), pd.to_numeric(s).to_numpy(), side="right")
    out = pd.Series(np.asarray(labels, dtype=object)[idx], index=s.index)
    return out.where(s.notna(), None)


def _checked(train: TabularDataset, attributes: Sequence[str]) -> list[str]:
    if isinstance(attributes, str) or not attributes:
        raise DataArgumentError(f"attributes must be a non-empty list of attribute names, got "
                                f"{attributes!r}")
    attrs = [str(a) for a in attributes]
    unknown = [a for a in attrs if a not in train.groups]
    if unknown:
        raise DataArgumentError(f"unknown protected attribute(s) {unknown}; the data has "
                                f"{sorted(train.groups)}")
    if len(set(attrs)) != len(attrs):
        raise DataArgumentError(f"an attribute is named twice in {attrs}")
    return attrs


def _keys(ds: TabularDataset, attrs: list[str], sizes: list[int]) -> torch.Tensor:
    """One int64 key per row: the mixed-radix number of its codes (first attribute slowest)."""
    if float(np.prod([float(s) for s in sizes])) >= 2.0 ** 62:
        raise DataArgumentError(f"crossing {attrs} gives more than 2^62 possible cells")
    key = torch.zeros(len(ds), dtype=torch.int64)
    for a, size in zip(attrs, sizes, strict=True):
        key = key * size + ds.groups[a].cpu()
    return key


def _lookup(keys: torch.Tensor, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The code of each key among the sorted ``kept`` keys, and whether it is there."""
    pos = torch.searchsorted(kept, keys).clamp_max(max(len(kept) - 1, 0))
    seen = kept[pos] == keys if len(kept) else torch.zeros_like(keys, dtype=torch.bool)
    return pos, seen


def _cell_name(key: int, attrs: list[str], sizes: list[int],
               names: Mapping[str, list[str]]) -> str:
    codes = []
    for size in reversed(sizes):
        key, code = divmod(key, size)
        codes.append(code)
    return SEPARATOR.join(f"{a}={names[a][c]}" for a, c in zip(attrs, reversed(codes),
                                                               strict=True))


def _with_attribute(ds: TabularDataset, name: str, codes: torch.Tensor,
                    names: list[str]) -> TabularDataset:
    return replace(ds, groups={**ds.groups, name: codes.to(ds.device)},
                   group_names={**ds.group_names, name: list(names)}, validate=False)
