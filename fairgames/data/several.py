"""Several data sets in one problem (paper 001): named sources combined into one data set whose
rows carry their source's id (:attr:`TabularDataset.sources`), so that a rate can be stated on
one source (``source('d2')`` in :mod:`fairgames.rates`, ``source="d2"`` in a problem statement).

Every source must share the feature layout, the label kind and the protected attributes' value
names (one model scores them all; a group code means one value). An unlabeled source's labels
are zeros that no rate may read.

Example:
    >>> from fairgames.data import make_synthetic
    >>> a, b = make_synthetic(n=100, seed=0), make_synthetic(n=50, seed=1)
    >>> both = combine_splits({"d1": a, "d3": b}, unlabeled=["d3"])
    >>> both.train.source_counts(), both.train.unlabeled
    ({'d1': 60, 'd3': 30}, ('d3',))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import torch

from .dataset import DatasetSplits, TabularDataset
from .errors import DataError


def combine_sources(parts: Mapping[str, TabularDataset], *, unlabeled: Iterable[str] = ()
                    ) -> TabularDataset:
    """One data set of the rows of every source in ``parts`` (in its order), each row tagged
    with its source's id; ``unlabeled``: the sources whose labels are absent (set to 0).

    Raises:
        DataError: no source, a source that is itself several, or sources that differ in
            feature columns, label kind or protected attributes (the message names both).

    Example:
        >>> from fairgames.data import make_synthetic
        >>> ds = combine_sources({"a": make_synthetic(n=10).train,
        ...                       "b": make_synthetic(n=10, seed=1).train})
        >>> ds.sources.tolist()
        [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    """
    names = [str(k) for k in parts]
    unlabeled = tuple(dict.fromkeys(str(u) for u in unlabeled))
    if not names:
        raise DataError("several sources: give at least one source")
    missing = sorted(set(unlabeled) - set(names))
    if missing:
        raise DataError(f"unlabeled source(s) {missing} are not among the sources {names}")
    first_name, first = names[0], parts[names[0]]
    for name, ds in parts.items():
        if ds.sources is not None:
            raise DataError(f"source {name!r} already holds several sources "
                            f"{ds.source_names}; list each of them as a source instead")
        _check_same(first_name, first, str(name), ds)
    sizes = [len(parts[n]) for n in names]
    labels = [torch.zeros_like(parts[n].labels) if n in unlabeled else parts[n].labels
              for n in names]
    return TabularDataset(
        features=torch.cat([parts[n].features for n in names]),
        labels=torch.cat(labels), label_kind=first.label_kind,
        groups={a: torch.cat([parts[n].groups[a] for n in names]) for a in first.groups},
        group_names=first.group_names, feature_names=first.feature_names,
        label_name=first.label_name, name="+".join(names),
        sources=torch.repeat_interleave(torch.arange(len(names), device=first.device),
                                        torch.tensor(sizes, device=first.device)),
        source_names=names, unlabeled=unlabeled, validate=False)   # each part was checked


def _check_same(first_name: str, first: TabularDataset, name: str, ds: TabularDataset) -> None:
    """Refuse a source whose layout differs from the first source's."""
    if ds.feature_names != first.feature_names:
        theirs, mine = ds.feature_names, first.feature_names
        if sorted(theirs) == sorted(mine):
            what = "the same feature columns in another order"
        else:
            what = (f"other feature columns (only in {name!r}: "
                    f"{sorted(set(theirs) - set(mine))[:8]}; only in {first_name!r}: "
                    f"{sorted(set(mine) - set(theirs))[:8]})")
        raise DataError(f"source {name!r} has {what} than source {first_name!r}; encode every "
                        "source with the same preprocessing (one model scores them all)")
    for what, a, b in (("label_kind", first.label_kind, ds.label_kind),
                       ("group_names", first.group_names, ds.group_names)):
        if a != b:
            raise DataError(f"source {name!r} has {what} {b!r}, source {first_name!r} has "
                            f"{a!r}; every source needs the same (one code means one value)")
    if ds.device != first.device:
        raise DataError(f"source {name!r} is on {ds.device}, source {first_name!r} on "
                        f"{first.device}; move them to one device")


def combine_splits(parts: Mapping[str, DatasetSplits], *, unlabeled: Iterable[str] = ()
                   ) -> DatasetSplits:
    """Train, validation and test splits of several sources, each split combined by
    :func:`combine_sources`; the metadata keeps each source's own under ``sources_metadata``.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> s = combine_splits({"x": make_synthetic(n=40), "y": make_synthetic(n=20)})
        >>> [len(part) for part in s]
        [36, 12, 12]
    """
    unlabeled = list(unlabeled)
    splits = {part: combine_sources({n: getattr(s, part) for n, s in parts.items()},
                                    unlabeled=unlabeled)
              for part in ("train", "validation", "test")}
    meta = {"name": "+".join(parts), "sources_metadata": {n: dict(s.metadata or {})
                                                          for n, s in parts.items()}}
    return DatasetSplits(**splits, metadata=meta)


def labeled_part(ds: TabularDataset) -> TabularDataset:
    """The rows of ``ds`` whose labels are real (outside its unlabeled sources), as one data
    set (sources dropped: a model trained or scored on labels alone, such as an
    unconstrained helper model); ``ds`` itself when every row is labeled.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> both = combine_sources({"d1": make_synthetic(n=10).train,
        ...                         "d3": make_synthetic(n=10, seed=1).train}, unlabeled=["d3"])
        >>> part = labeled_part(both)
        >>> len(part), part.sources is None
        (6, True)
    """
    if not ds.unlabeled:
        return ds
    return replace(ds.subset(labeled_mask(ds)), sources=None, source_names=None, unlabeled=(),
                   validate=False)


def labeled_mask(ds: TabularDataset) -> torch.Tensor:
    """``[N]`` bool: the rows of ``ds`` outside its unlabeled sources.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> labeled_mask(make_synthetic(n=10).train).all().item()
        True
    """
    if not ds.unlabeled:
        return torch.ones(len(ds), dtype=torch.bool, device=ds.device)
    names = ds.source_names or []
    drop = torch.tensor([names.index(u) for u in ds.unlabeled], device=ds.device)
    return ~torch.isin(ds.sources, drop)      # type: ignore[arg-type]
