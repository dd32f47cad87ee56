"""``data=sources``: several data sets in one problem (paper 001), each source its own data
config, combined into one data set whose rows carry their source
(:func:`fairgames.data.combine_splits`).

A source's config is a data config (``{name: adult, ...}``, ``{name: table, path: ...}``)
plus three keys of its own: ``labeled`` (``false``: no labels; a table's file then needs no
label column), ``batch_size`` (``null``: all its training rows every step; an integer: a
minibatch of that many of its rows per step, from its own seeded stream) and ``rows`` (a
part of a loader's split: ``{part: train, range: [0.0, 0.5], split: [0.6, 0.2, 0.2]}`` takes
the first half of the loader's training rows, in a seeded order that is the same for every
source of that loader, and splits them again by ``split``).

Splits: each source is split by its own settings (a table by its ``split`` fractions,
stratified by label x group, or by group when unlabeled; a packaged loader by its protocol),
so every split holds every source; a source with no rows in a required split is refused.

Tables share ONE preprocessing: fitted on the training rows of the first labeled table source
and applied to every other table source, whose columns must be the same.

Example:
    >>> cfg = {"name": "sources", "protected": "group", "seed": 0, "sources": {
    ...     "d1": {"name": "synthetic", "n": 200}, "d3": {"name": "synthetic", "n": 100,
    ...     "labeled": False, "batch_size": 20}}}
    >>> splits = load_sources(cfg, seed=0)
    >>> splits.train.source_counts(), splits.metadata["source_batch_sizes"]
    ({'d1': 120, 'd3': 60}, {'d1': None, 'd3': 20})
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fairgames.data import (
    DataError,
    DatasetSplits,
    TablePreprocessor,
    TabularDataset,
    combine_splits,
    load_table,
)
from fairgames.data.splits import random_split
from fairgames.data.table import _fractions, read_table

from .config import ConfigError

NAME = "sources"
OWN_KEYS = ("labeled", "batch_size", "rows")
ROWS_KEYS = ("part", "range", "split")
PARTS = ("train", "validation", "test")
DEFAULT_SPLIT = (0.6, 0.2, 0.2)
TOP_KEYS = ("name", "protected", "seed", "sources")
# the keys of a table source after the first labeled one (the rest are the shared encoding's)
SHARED_TABLE_KEYS = ("path", "target", "protected", "split", "seed", "sep")


def load_sources(data_cfg: Mapping[str, Any], seed: int,
                 required: tuple[str, ...] = PARTS) -> DatasetSplits:
    """The combined splits of a ``data=sources`` config; ``metadata`` gains
    ``source_batch_sizes`` and ``sources_record`` (rows per source per split, labeled, the
    files' fingerprints) and, for tables, the shared ``preprocessor``.

    Raises:
        ConfigError: no source, an unknown key (naming the source), a source with no rows in
            a required split, no labeled table source for an unlabeled table, a table whose
            columns differ from the first labeled table's.
    """
    unknown = sorted(set(data_cfg) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"data: unknown key(s) {unknown} for data=sources; it takes "
                          f"{list(TOP_KEYS)} (each source's own keys go under "
                          "data.sources.<name>)")
    sources = dict(data_cfg.get("sources") or {})
    if not sources:
        raise ConfigError("data=sources names no source: give data.sources as a mapping "
                          "name -> data config (see docs/data.md, 'Several data sets in one "
                          "problem')")
    split_seed = seed if data_cfg.get("seed") is None else int(data_cfg["seed"])
    own = {str(n): _own_keys(str(n), s) for n, s in sources.items()}
    reference = _reference(own, sources)
    pre: TablePreprocessor | None = None
    parts: dict[str, DatasetSplits] = {}
    for name in ([reference] if reference else []) + [n for n in own if n != reference]:
        cfg = _source_cfg(name, sources[name], data_cfg.get("protected"), split_seed)
        parts[name] = _load_one(name, cfg, own[name], pre, split_seed)
        if name == reference:
            pre = parts[name].metadata.get("preprocessor")
    parts = {n: parts[n] for n in own}       # the config's order: source ids follow it
    for name, s in parts.items():
        _check_rows(name, s, required)
    unlabeled = [n for n, o in own.items() if not o["labeled"]]
    try:
        combined = combine_splits(parts, unlabeled=unlabeled)
    except DataError as e:
        raise ConfigError(f"data.sources: {e}") from e
    combined.metadata.update(_record(parts, own, pre, split_seed))
    return combined


def _own_keys(name: str, cfg: Any) -> dict[str, Any]:
    """A source's ``labeled`` / ``batch_size`` / ``rows``, checked."""
    if not isinstance(cfg, Mapping) or "name" not in cfg:
        raise ConfigError(f"data.sources.{name}: a source is a data config with a name "
                          f"(e.g. {{name: table, path: ...}}), got {cfg!r}")
    labeled = cfg.get("labeled", True)
    size = cfg.get("batch_size")
    if not isinstance(labeled, bool):
        raise ConfigError(f"data.sources.{name}.labeled={labeled!r}: true or false")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ConfigError(f"data.sources.{name}.batch_size={size!r}: null (all its training "
                          "rows every step) or a positive integer (rows per step)")
    rows = cfg.get("rows")
    if rows is not None:
        bad = sorted(set(rows) - set(ROWS_KEYS)) if isinstance(rows, Mapping) else [rows]
        if bad or rows.get("part") not in PARTS:
            raise ConfigError(f"data.sources.{name}.rows: {{part: train|validation|test, "
                              f"range: [start, end] shares, split: [train, validation, "
                              f"test]}}; got {rows!r}")
    return {"labeled": labeled, "batch_size": size, "rows": rows}


def _reference(own: Mapping[str, dict[str, Any]], sources: Mapping[str, Any]) -> str | None:
    """The first labeled table source (whose training rows fit the shared preprocessing);
    an unlabeled table with none is refused."""
    tables = [n for n in own if sources[n]["name"] == "table"]
    labeled = [n for n in tables if own[n]["labeled"]]
    if tables and not labeled:
        raise ConfigError(f"data.sources: the table sources {tables} are all unlabeled, and "
                          "there is no labeled table source to fit their one preprocessing "
                          "on; add a labeled table source (labeled: true, with its target)")
    return labeled[0] if labeled else None


def _source_cfg(name: str, cfg: Mapping[str, Any], protected: Any, seed: int
                ) -> dict[str, Any]:
    """The source's own data config: its keys without ``labeled`` / ``batch_size`` /
    ``rows``, the shared ``protected`` and split seed where it sets none."""
    out = {k: v for k, v in cfg.items() if k not in OWN_KEYS}
    if out.get("protected") is None:
        out["protected"] = protected
    if out.get("seed") is None:
        out["seed"] = seed
    return out


def _load_one(name: str, cfg: dict[str, Any], own: Mapping[str, Any],
              pre: TablePreprocessor | None, seed: int) -> DatasetSplits:
    """One source's splits: a table after the reference through the shared ``pre``, any
    other through :func:`~fairgames.train.data.load_splits`; then its ``rows`` part."""
    from .data import load_splits  # load_splits dispatches here: import at call time

    try:
        if cfg["name"] == "table" and pre is not None:
            splits = _shared_table(name, cfg, pre, labeled=own["labeled"])
        else:        # an unlabeled table always has a reference (_reference checked it)
            splits = load_splits(cfg, seed, required=())
    except ConfigError as e:
        raise ConfigError(f"data.sources.{name}: {e}") from e
    except DataError as e:
        raise type(e)(f"source {name!r}: {e}") from e
    if own["rows"] is not None:
        splits = _rows_of(name, splits, own["rows"], seed)
    return splits


def _shared_table(name: str, cfg: Mapping[str, Any], pre: TablePreprocessor, *,
                  labeled: bool) -> DatasetSplits:
    """A table source encoded with the reference's fitted preprocessing, split by its own
    ``split`` fractions (stratified by label x group, or by group when unlabeled)."""
    given = {k for k, v in cfg.items() if v is not None}
    unknown = sorted(given - set(inspect.signature(load_table).parameters) - {"name"})
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}; a table source takes "
                          f"{list(SHARED_TABLE_KEYS)} plus {list(OWN_KEYS)}")
    encoding = sorted(given - set(SHARED_TABLE_KEYS) - {"name"})
    if encoding:    # the shared preprocessing decides them: a second value would be ignored
        raise ConfigError(f"{encoding} are the encoding of the first labeled table source "
                          f"(its preprocessing encodes every table): set them there only")
    if cfg.get("target") not in (None, pre.target):
        raise ConfigError(f"target={cfg['target']!r}, but the first labeled table source's "
                          f"is {pre.target!r}: every table's label is that column")
    path = Path(str(cfg["path"]))
    frame = read_table(path, sep=cfg.get("sep"))
    _same_columns(name, frame, pre, labeled)
    where = str(path)
    y = pre.labels(frame, where) if labeled else torch.zeros(len(frame))
    g = pre.groups(frame, where)
    full = TabularDataset(features=pre.transform(frame, where), labels=y,
                          label_kind=pre.label_kind, groups={pre.protected: g},
                          group_names={pre.protected: list(pre.group_names)},
                          feature_names=pre.feature_names, label_name=pre.target, name=name)
    strata = g.numpy() * 2 + y.numpy().astype(np.int64) if labeled else g.numpy()
    meta = {"name": "table", "sources": [{"path": str(path.resolve()),
                                          "sha256": _sha256(path), "rows": len(frame)}]}
    return _split(full, cfg.get("split") or DEFAULT_SPLIT, int(cfg["seed"]), strata, meta)


def _same_columns(name: str, frame: pd.DataFrame, pre: TablePreprocessor,
                  labeled: bool) -> None:
    """A table source needs the reference's columns, no fewer and no more."""
    want = {c.name for c in pre.columns} | {pre.protected} | ({pre.target} if labeled else set())
    have = {str(c) for c in frame.columns}
    if not labeled:
        have.discard(pre.target)        # an unlabeled file may keep an unused label column
    missing, extra = sorted(want - have), sorted(have - want)
    if missing or extra:
        raise ConfigError(f"table source {name!r} has other columns than the first labeled "
                          f"table source (missing {missing}, extra {extra}); one preprocessing "
                          "encodes every source: give every table the same columns (an "
                          "unlabeled one may lack the target)")


def _split(full: TabularDataset, fractions: Any, seed: int, strata: np.ndarray | None,
           meta: dict[str, Any]) -> DatasetSplits:
    """``full`` split like :func:`fairgames.data.from_frame` (test drawn with
    ``[seed, 0]``, validation from the rest with ``[seed, 1]``)."""
    try:
        test_fraction, vfrac = _fractions(fractions)
    except DataError as e:
        raise ConfigError(str(e)) from e
    n = len(full)
    pool, test = random_split(n, (1.0 - test_fraction, test_fraction), seed=[seed, 0],
                              stratify=strata)
    tr, va = random_split(len(pool), (1.0 - vfrac, vfrac), seed=[seed, 1],
                          stratify=None if strata is None else strata[pool])
    idx = [pool[tr], pool[va], test]
    return DatasetSplits(*(full.subset(torch.from_numpy(i)) for i in idx), metadata=meta)


def _rows_of(name: str, splits: DatasetSplits, rows: Mapping[str, Any], seed: int
             ) -> DatasetSplits:
    """The ``range`` share of the loader's ``part`` split, in an order drawn from the split
    seed alone (so two sources of one loader with adjacent ranges are disjoint), split
    again by ``split``."""
    ds = getattr(splits, rows["part"])
    lo, hi = (float(v) for v in rows.get("range") or (0.0, 1.0))
    if not 0.0 <= lo < hi <= 1.0:
        raise ConfigError(f"data.sources.{name}.rows.range={[lo, hi]}: two shares with "
                          "0 <= start < end <= 1")
    order = np.random.default_rng([seed, 7919]).permutation(len(ds))
    keep = np.sort(order[round(lo * len(ds)):round(hi * len(ds))])
    part = ds.subset(torch.from_numpy(keep))
    # a table's preprocessing stays the one fitted on the file's training split: the shared
    # one when this source is the reference
    meta = {**splits.metadata, "rows": dict(rows)}
    return _split(part, rows.get("split") or DEFAULT_SPLIT, seed, None, meta)


def _check_rows(name: str, splits: DatasetSplits, required: tuple[str, ...]) -> None:
    for part in required:
        if len(getattr(splits, part)) == 0:
            raise ConfigError(
                f"source {name!r} has no rows in its {part} split ({len(splits.train)} "
                f"train, {len(splits.validation)} validation, {len(splits.test)} test rows): "
                f"every split measures every source; give it larger fractions "
                f"(data.sources.{name}.split, or data.sources.{name}.rows.split for a part "
                "of a loader) or more rows")


def _record(parts: Mapping[str, DatasetSplits], own: Mapping[str, Mapping[str, Any]],
            pre: TablePreprocessor | None, seed: int) -> dict[str, Any]:
    """The sources as resolved, for the run's results (plain data)."""
    record = {n: {"labeled": own[n]["labeled"], "batch_size": own[n]["batch_size"],
                  "rows": {p: len(getattr(s, p)) for p in PARTS},
                  "files": list((s.metadata or {}).get("sources") or []),
                  **({"part": dict(own[n]["rows"])} if own[n]["rows"] else {})}
              for n, s in parts.items()}
    first = next(iter(parts.values())).metadata or {}
    # the attribute every source shares (combine_splits checked it): the run's protected
    out: dict[str, Any] = {"name": NAME, "seed": seed, "sources_record": record,
                           "protected": first.get("protected"),
                           "source_batch_sizes": {n: own[n]["batch_size"] for n in own}}
    if pre is not None:
        out["preprocessor"] = pre
    return out


def _sha256(path: Path) -> str:
    from fairgames.data.table import _sha256 as sha

    return sha(path)
