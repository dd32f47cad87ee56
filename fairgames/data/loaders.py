"""``load(name, ...)``: real data sets with the papers' preprocessing, and the synthetic one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .dataset import DatasetSplits, TabularDataset
from .definitions import DatasetDef, Recipe
from .errors import DataArgumentError, DataError
from .noise import check_noise, flip_groups, true_attribute
from .preprocess import encode
from .registry import DATASETS
from .sources import Resolution, Source, damaged_message, resolve
from .splits import random_split

SPLITS = ("default", "official", "random")


def available_datasets() -> list[str]:
    """Names accepted by :func:`load` (``"synthetic"`` included).

    Example:
        >>> from fairgames.data import available_datasets
        >>> available_datasets()
        ['adult', 'bank', 'compas', 'credit', 'crime', 'german', 'law', 'synthetic']
    """
    return sorted([*DATASETS, "synthetic"])


def dataset_info(name: str) -> dict[str, Any]:
    """Attributes (with value names), targets and paper recipes of a data set.

    Example:
        >>> from fairgames.data.loaders import dataset_info
        >>> dataset_info("adult")["attributes"]["race3"]
        ['White', 'Black', 'Other']
    """
    d = _definition(name)
    return {
        "name": d.name,
        "title": d.title,
        "attributes": {a.name: list(a.values) for a in d.attributes.values()},
        "targets": {t.name: t.kind for t in d.targets.values()},
        "papers": [p for p in d.recipes if p is not None],
        "sources": [s.name for s in d.sources],
    }


def _definition(name: str) -> DatasetDef:
    if not isinstance(name, str) or name not in DATASETS:
        raise DataArgumentError(f"unknown data set {name!r}; available: {available_datasets()} "
                                "(Wiki Toxicity cannot be had offline and is not provided)")
    return DATASETS[name]


@lru_cache(maxsize=16)
def _parse_cached(dataset: str, source_name: str,
                  key: tuple[tuple[str, str, str], ...]) -> pd.DataFrame:
    source = _source(dataset, source_name)
    paths = {role: Path(path) for role, path, _ in key}
    return source.parser(paths)


def _parse(dataset: str, res: Resolution) -> pd.DataFrame:
    """The source's parser on the resolved files; a damaged file (empty, cut short, not
    UTF-8, header only) is a :class:`DataError` naming it, the line when known, and how to
    replace it."""
    if any(f.path.stat().st_size == 0 for f in res.files.values()):
        raise DataError(damaged_message(dataset, res, "a file is empty"))
    key = tuple(sorted((role, str(f.path), f.sha256) for role, f in res.files.items()))
    try:
        frame = _parse_cached(dataset, res.source.name, key)
    except Exception as exc:  # pandas', zipfile's, gzip's, codecs' and our own errors alike
        what = str(exc) if isinstance(exc, DataError) else f"{type(exc).__name__}: {exc}"
        raise DataError(damaged_message(dataset, res, what)) from exc
    if len(frame) == 0:
        raise DataError(damaged_message(dataset, res, "no data rows (a header only?)"))
    return frame


def _source(dataset: str, source_name: str) -> Source:
    return next(s for s in DATASETS[dataset].sources if s.name == source_name)


def read_raw(name: str, *, root: str | os.PathLike[str] | None = None,
             filtered: bool = True) -> tuple[pd.DataFrame, Resolution]:
    """The canonical frame of a real data set (after its base filters if ``filtered``).

    Example:
        >>> from fairgames.data.loaders import read_raw
        >>> frame, res = read_raw("compas")       # doctest: +SKIP
        >>> len(frame)                            # doctest: +SKIP
        6172
    """
    d = _definition(name)
    res = resolve(d.name, d.sources, root=root)
    frame = _parse(d.name, res).copy()
    if filtered and d.base_filter is not None:
        frame = d.base_filter(frame)
    return frame, res


def _strata(kind: str | None, labels: np.ndarray, codes: np.ndarray,
            label_kind: str) -> np.ndarray | None:
    if kind is None:
        return None
    if kind == "group":
        return codes
    if label_kind != "binary":
        return codes if kind == "label_group" else None
    lab = labels.astype(np.int64)
    return lab if kind == "label" else codes * 2 + lab


def load(
    name: str,
    *,
    protected: str | None = None,
    target: str | None = None,
    split: str = "default",
    seed: int = 0,
    root: str | os.PathLike[str] | None = None,
    include_protected: bool | None = None,
    validation_fraction: float | None = None,
    paper: str | None = None,
    rows: int | None = None,
    noise: float | None = None,
    noise_seed: int = 0,
) -> DatasetSplits:
    """Load a data set as seeded train / validation / test :class:`TabularDataset` splits.

    Args:
        name: one of :func:`available_datasets`.
        protected: the protected attribute that is left out of the features (unless
            ``include_protected``) and used for stratification where the recipe stratifies
            by group; every attribute of the data set is in ``groups`` regardless.
            Default: the recipe's.
        target: the label (e.g. ``"high_crime"`` or ``"violent_crimes"`` for Crime).
        split: ``"default"`` (the recipe's protocol), ``"random"`` (a seeded re-split of
            all rows) or ``"official"`` (Adult only: adult.data for train/validation,
            adult.test for test).
        seed: seed of the split (drawn on the CPU with ``numpy.random.default_rng``).
        root: a directory holding the raw files (else ``FAIRGAMES_DATA``, the cache, an
            installed data package, a download).
        include_protected: put the protected attribute's columns in the features. Default:
            the recipe's (``False`` without ``paper``).
        validation_fraction: share of the non-test rows held out for validation.
        paper: follow the protocol of one of the papers (``"000"`` ... ``"004"``; see
            ``docs/data.md``): preprocessing, label, attribute and split. Explicit
            arguments override it.
        rows: keep a seeded random sample of this many rows (after the filters, before
            splitting and fitting the encoders; paper 003's Adult-2k and Law-2k draw 2 000
            rows this way). ``None`` keeps every row.
        noise: flip the protected attribute of this fraction of all rows, before splitting
            (paper 004's noise model, :func:`~fairgames.data.flip_groups`): the attribute then
            holds the noisy groups (a feature too with ``include_protected``) and its true
            codes are kept as ``<protected>_true``, for evaluation only. ``None``: no noise.
        noise_seed: seed of that flip.

    Raises:
        DataArgumentError: unknown data set, attribute, target, split or paper, or a
            validation fraction outside [0, 1).
        DataError: missing raw files (the message says how to get them) or damaged ones
            (the message names the file, the line when known, and the remedy).

    Example:
        >>> from fairgames.data import load
        >>> splits = load("adult", protected="sex", split="official")   # doctest: +SKIP
        >>> len(splits.test)                                            # doctest: +SKIP
        16281
        >>> "sex=Male" in splits.train.feature_names                    # doctest: +SKIP
        False
    """
    if name == "synthetic":
        return _load_synthetic(protected, target, split, seed, validation_fraction)
    c = _resolve(name, protected, target, split, include_protected, validation_fraction,
                 paper, rows)
    frame, res = read_raw(name, root=root)
    n_filtered = len(frame)
    if c.recipe.row_filter is not None:
        frame = c.recipe.row_filter(frame)
    frame = _sample_rows(frame, rows, seed, name)
    tgt = c.definition.targets[c.target]
    labels = np.asarray(tgt.values(frame), dtype=np.float64)
    codes = {a: np.asarray(attr.codes(frame), dtype=np.int64)
             for a, attr in c.definition.attributes.items()}
    group_names = {a: list(v.values) for a, v in c.definition.attributes.items()}
    if noise is not None:
        codes, group_names = _with_noise(codes, group_names, c.protected, noise, noise_seed)
    strata = _strata(c.recipe.stratify, labels, codes[c.protected], tgt.kind)
    train, val, test = _split_indices(frame, c, strata, seed)
    _check_split_sizes(name, res, len(frame), {"train": train, "test": test}
                       | ({"validation": val} if c.validation_fraction else {}))
    x, names, fitted = _features(frame, c, train, codes[c.protected], noised=noise is not None)
    full = TabularDataset(
        features=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        labels=torch.from_numpy(labels.astype(np.float32)),
        label_kind=tgt.kind,
        groups={a: torch.from_numpy(v) for a, v in codes.items()},
        group_names=group_names,
        feature_names=names,
        label_name=c.target,
        name=name,
    )
    metadata = _metadata(c, seed, res, fitted, {"train": train, "validation": val, "test": test})
    metadata["rows"] = {"raw": None, "after_filters": n_filtered, "sampled": rows,
                        "used": len(frame), "train": len(train), "validation": len(val),
                        "test": len(test)}
    if noise is not None:
        metadata["noise"] = {"attribute": c.protected, "fraction": float(noise),
                             "seed": int(noise_seed),
                             "true_attribute": true_attribute(c.protected)}
    return DatasetSplits(
        train=full.subset(torch.from_numpy(train)),
        validation=full.subset(torch.from_numpy(val)),
        test=full.subset(torch.from_numpy(test)),
        metadata=metadata,
    )


@dataclass(frozen=True)
class _Choice:
    """One :func:`load` call's arguments resolved against the data set and its recipe (the
    recipe's values unless given) and checked."""

    name: str
    definition: DatasetDef
    recipe: Recipe
    paper: str | None
    protected: str
    target: str
    mode: str
    include: bool
    validation_fraction: float
    test_fraction: float


def _resolve(name: str, protected: str | None, target: str | None, split: str,
             include_protected: bool | None, validation_fraction: float | None,
             paper: str | None, rows: int | None) -> _Choice:
    """The arguments of :func:`load` checked, each defaulting to the recipe's; a clear
    :class:`DataArgumentError` at the first bad one."""
    d = _definition(name)
    if paper is not None:
        paper = str(paper).zfill(3) if str(paper).isdigit() else str(paper)
    if paper not in d.recipes:
        known = [p for p in d.recipes if p is not None]
        raise DataArgumentError(f"data set {name!r} has no recipe for paper {paper!r}; "
                                f"known: {known}")
    recipe: Recipe = d.recipes[paper]
    protected = protected if protected is not None else recipe.protected
    if protected not in d.attributes:
        raise DataArgumentError(f"unknown protected attribute {protected!r} for data set {name!r}; "
                                f"known: {sorted(d.attributes)}")
    target = target if target is not None else recipe.target
    if target not in d.targets:
        raise DataArgumentError(f"unknown target {target!r} for data set {name!r}; known: "
                                f"{sorted(d.targets)}")
    if split not in SPLITS:
        raise DataArgumentError(f"unknown split {split!r}; use one of {SPLITS}")
    mode = recipe.split if split == "default" else split
    if mode == "official" and not d.has_official_split:
        raise DataArgumentError(f"data set {name!r} has no official split; use split='random'")
    include = recipe.include_protected if include_protected is None else bool(include_protected)
    vfrac = recipe.validation_fraction if validation_fraction is None else validation_fraction
    if not 0.0 <= float(vfrac) < 1.0:
        raise DataArgumentError(f"validation_fraction must be in [0, 1), got {vfrac}")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 2):
        raise DataArgumentError(f"rows must be a whole number of rows of at least 2, or None "
                                f"for all of them; got {rows!r}")
    # a recipe's None means "the data set's own share" (an official-split recipe re-split at random)
    test_fraction = (d.random_test_fraction if recipe.test_fraction is None
                     else recipe.test_fraction)
    return _Choice(name, d, recipe, paper, protected, target, mode, include, vfrac,
                   test_fraction)


def _split_indices(frame: Any, c: _Choice, strata: np.ndarray | None, seed: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train, validation, test)`` row indices (CPU, numpy ``default_rng``): the official
    test rows or a seeded (stratified) test share, then validation from the rest."""
    if c.mode == "official":
        part = frame["part"].to_numpy()
        test, pool = np.flatnonzero(part == "test"), np.flatnonzero(part != "test")
    else:
        pool, test = random_split(len(frame), (1.0 - c.test_fraction, c.test_fraction),
                                  seed=[seed, 0], stratify=strata)
    sub = None if strata is None else strata[pool]
    vfrac = c.validation_fraction
    tr, va = random_split(len(pool), (1.0 - vfrac, vfrac), seed=[seed, 1], stratify=sub)
    return pool[tr], pool[va], test


def _features(frame: Any, c: _Choice, train: np.ndarray, group: np.ndarray, *, noised: bool
              ) -> tuple[np.ndarray, list[str], Any]:
    """The encoded features (encoders fitted on the training rows), their names and the
    fitted encoders. With noise the raw columns hold the TRUE groups: only the noisy codes
    ``group`` may then be a feature."""
    attr = c.definition.attributes[c.protected]
    dropped = set(c.definition.targets[c.target].columns)
    as_feature = c.recipe.group_as_feature or noised
    if not c.include or as_feature:
        dropped |= set(attr.columns)
    cols = [col for col in c.recipe.features(frame) if col.name not in dropped]
    x, names, fitted = encode(frame, cols, train)
    if c.include and as_feature:
        if len(attr.values) == 2:
            extra = group.astype(np.float32)[:, None]
            names = [*names, f"{c.protected}={attr.values[1]}"]
        else:
            extra = np.eye(len(attr.values), dtype=np.float32)[group]
            names = [*names, *[f"{c.protected}={v}" for v in attr.values]]
        x = np.concatenate([x, extra], axis=1)
    return x, names, fitted


def _metadata(c: _Choice, seed: int, res: Resolution, fitted: Any,
              indices: dict[str, np.ndarray]) -> dict[str, Any]:
    """The splits' ``metadata``: what was loaded, from where and how (rows and noise are
    added by :func:`load`)."""
    d, tgt = c.definition, c.definition.targets[c.target]
    return {
        "name": c.name,
        "title": d.title,
        "paper": c.paper,
        "protected": c.protected,
        "target": c.target,
        "label_kind": tgt.kind,
        "label_description": tgt.description,
        "include_protected": c.include,
        "split": c.mode,
        "seed": int(seed),
        "test_fraction": None if c.mode == "official" else c.test_fraction,
        "validation_fraction": float(c.validation_fraction),
        "stratify": c.recipe.stratify,
        "preprocessing": c.recipe.description,
        "filters": d.filter_description,
        "rows": None,
        "source": res.source.name,
        "source_description": res.source.description,
        "sources": [f.as_dict() for f in res.files.values()],
        "encoders": fitted,
        "split_indices": indices,
        "attributes": {a.name: a.description for a in d.attributes.values()},
    }


def _with_noise(codes: dict[str, np.ndarray], names: dict[str, list[str]], protected: str,
                noise: object, seed: int) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """``codes`` with ``protected`` flipped (all rows, before splitting) and its true codes
    kept as ``<protected>_true``."""
    try:
        fraction = check_noise(noise)
    except DataError as e:
        raise DataArgumentError(str(e)) from e
    true = codes[protected]
    noisy = flip_groups(torch.from_numpy(true), fraction, n_groups=len(names[protected]),
                        seed=int(seed)).numpy()
    return ({**codes, protected: noisy, true_attribute(protected): true},
            {**names, true_attribute(protected): list(names[protected])})


def _sample_rows(frame: Any, rows: int | None, seed: int, name: str) -> Any:
    """``rows`` rows of ``frame`` drawn without replacement (seeded; kept in file order)."""
    if rows is None:
        return frame
    if rows > len(frame):
        raise DataArgumentError(f"rows={rows}: data set {name!r} has only {len(frame)} rows "
                                "after its filters; ask for fewer, or None for all")
    keep = np.sort(np.random.default_rng([seed, 2]).choice(len(frame), rows, replace=False))
    return frame.iloc[keep].reset_index(drop=True)


def _check_split_sizes(name: str, res: Resolution, rows: int,
                       splits: dict[str, Any]) -> None:
    """An empty split of a real data set means its files hold far fewer rows than they
    should (cut short, or a stray line): an error naming the files, before any fitting."""
    empty = [s for s, idx in splits.items() if len(idx) == 0]
    if empty:
        sizes = ", ".join(f"{s} {len(idx)}" for s, idx in splits.items())
        raise DataError(damaged_message(
            name, res, f"the {' and '.join(empty)} split would be empty ({rows} row(s) after "
            f"the filters: {sizes}); the files look truncated"))


def _load_synthetic(protected: str | None, target: str | None, split: str, seed: int,
                    validation_fraction: float | None) -> DatasetSplits:
    from .synthetic import make_synthetic

    if protected not in (None, "group"):
        raise DataArgumentError(f"unknown protected attribute {protected!r} for data set "
                                "'synthetic'; known: ['group']")
    if target not in (None, "y"):
        raise DataArgumentError(f"unknown target {target!r} for data set 'synthetic'; known: ['y']")
    if split not in ("default", "random"):
        raise DataArgumentError(f"data set 'synthetic' has only split='default' / 'random', got "
                                f"{split!r}")
    v = 0.25 if validation_fraction is None else float(validation_fraction)
    return make_synthetic(seed=seed, split=(0.8 * (1 - v), 0.8 * v, 0.2))
