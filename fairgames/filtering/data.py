"""The filter's inputs from a packaged data set: features X without z's own columns and
without the label y (paper 002: the proxy sees neither), and z as its group names.

``fairgames.data.load(name, paper="002")`` already leaves the protected attribute out of the
features (Adult: race, K = 5, 32 561 / 16 281 random split, 102 features; Bank: job, K = 12
including ``unknown``); :func:`filter_arrays` checks it, so a recipe that keeps the attribute
as a feature (``include_protected=True``) is refused rather than used.

Example:
    >>> from fairgames.data import load
    >>> train = load("synthetic", protected="group").train
    >>> d = filter_arrays(train, "group")
    >>> d.X.shape[0] == len(d.z), d.group_names
    (True, ['0', '1'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import FilterError


@dataclass(frozen=True)
class FilterData:
    """``X`` (rows × features, float64), ``z`` (each row's group name), the feature names
    and the group names in code order."""

    X: np.ndarray
    z: np.ndarray
    feature_names: list[str]
    group_names: list[str]


def _is_column_of(name: str, column: str) -> bool:
    return name == column or name.startswith(column + "=")


def filter_arrays(dataset: Any, attribute: str) -> FilterData:
    """A :class:`~fairgames.data.TabularDataset` split as the filter's inputs.

    Raises:
        FilterError: an attribute the split lacks, or features that hold the attribute's or
            the label's columns.
    """
    if attribute not in dataset.groups:
        raise FilterError(f"the data has no attribute {attribute!r} (it has "
                          f"{sorted(dataset.groups)}): name one of them as z")
    leaked = [n for n in dataset.feature_names
              if _is_column_of(n, attribute) or _is_column_of(n, dataset.label_name)]
    if leaked:
        raise FilterError(f"the features hold z's or the label's columns {leaked[:5]}: a "
                          "proxy must not see them; load the data without them "
                          "(include_protected=False)")
    names = list(dataset.group_names[attribute])
    codes = dataset.groups[attribute].cpu().numpy()
    return FilterData(dataset.features.cpu().numpy().astype(np.float64),
                      np.asarray(names, dtype=object)[codes], list(dataset.feature_names), names)


def load_filter_data(name: str, *, protected: str | None = None, paper: str | None = "002",
                     seed: int = 0, **options: Any) -> tuple[FilterData, FilterData]:
    """``(train, test)`` of a packaged data set under a paper's recipe (default: paper 002's),
    as the filter's inputs. ``options`` go to :func:`fairgames.data.load`."""
    from fairgames.data import load
    splits = load(name, protected=protected, paper=paper, seed=seed, **options)
    attribute = protected or splits.metadata.get("protected")
    if attribute is None:
        raise FilterError(f"the data set {name!r} names no protected attribute in its recipe: "
                          "give protected=<attribute>")
    return filter_arrays(splits.train, attribute), filter_arrays(splits.test, attribute)
