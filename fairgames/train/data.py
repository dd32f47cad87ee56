"""Data for a run: load the configured data set onto the device and cut it into batches.

``data`` configs name the loader (``name``) and the protected attribute (``protected``); every
other key is a keyword argument of :func:`fairgames.data.make_synthetic` (``name: synthetic``)
or of :func:`fairgames.data.load` (real data sets), checked against its signature so that a
misspelt key fails with the list of accepted ones.

Precedence of a data key: the value the ``data`` config (or the command line) sets, else the
problem's ``recipe`` (:func:`apply_recipe`: ``problem=sp_regression`` names paper 003), else
the loader's recipe default — a key left null (``protected: null``, ``target: null``) is the
recipe's, so ``problem=sp_regression data=law`` trains on ``ugpa`` by ``race_white``.

Example:
    >>> splits = load_splits({"name": "synthetic", "protected": "group", "n": 300}, seed=0)
    >>> len(splits.train) + len(splits.validation) + len(splits.test)
    300
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fairgames.data import (
    DataArgumentError,
    DataError,
    DatasetSplits,
    TabularDataset,
    group_cross,
    load,
    load_table,
    make_synthetic,
    noisy_splits,
)
from fairgames.data.splits import random_split
from fairgames.game.solutions import StochasticModel
from fairgames.rates import Batch

from .config import ConfigError
from .files import write_text

SYNTHETIC_PROTECTED = "group"   # make_synthetic's only attribute
OWN_TABLE = "table"             # data=table: the user's file (fairgames.data.load_table)
SOURCES = "sources"             # data=sources: several data sets (fairgames.train.sources)
CROSS = "*"                     # data.protected=race*sex: crossed groups (group_cross)
PREPROCESS_FILE = "preprocess.json"


def apply_recipe(data_cfg: Mapping[str, Any], recipe: Mapping[str, Any] | None
                 ) -> dict[str, Any]:
    """``data_cfg`` with the problem's ``recipe`` keys filled in where it leaves them null.

    A recipe naming a paper (``paper: "003"``) also leaves ``protected`` and ``target`` to
    that paper's recipe, unless the config sets them: they are null in ``configs/data``.

    Raises:
        ConfigError: a recipe key the data config does not have.

    Example:
        >>> law = {"name": "law", "protected": None, "target": None, "paper": None,
        ...        "validation_fraction": None}
        >>> apply_recipe(law, {"paper": "003", "validation_fraction": 0.2})["paper"]
        '003'
        >>> apply_recipe({**law, "paper": "000"}, {"paper": "003"})["paper"]   # the user's
        '000'
    """
    out = dict(data_cfg)
    if out.get("name") in (OWN_TABLE, SOURCES):
        return out      # a recipe is a paper's protocol for its packaged data sets
    for key, value in (recipe or {}).items():
        if key not in out:
            raise ConfigError(f"problem.recipe.{key}: data set {out.get('name')!r} has no key "
                              f"{key!r}; its keys are {sorted(out)}")
        if out[key] is None:
            out[key] = value
    return out


def load_splits(data_cfg: Mapping[str, Any], seed: int,
                required: tuple[str, ...] = ("train", "validation", "test")
                ) -> DatasetSplits:
    """Train / validation / test splits for a ``data`` config (on the CPU); each split
    of ``required`` must hold rows (a filter needs no validation split, a run does).

    The split seed is ``data.seed`` when the config sets it, else the run's ``seed``.

    Raises:
        ConfigError: a key the loader does not take, a value it refuses (an unknown
            protected attribute, target, split or paper), or an empty split.
        DataError: a raw file missing or damaged.

    Example:
        >>> splits = load_splits({"name": "synthetic", "protected": "group", "n": 500}, seed=0)
        >>> [len(split) for split in splits]
        [300, 100, 100]
    """
    if data_cfg.get("name") == SOURCES:     # several data sets (paper 001): .sources
        from .sources import load_sources

        return load_sources(data_cfg, seed, required)
    cfg = dict(data_cfg)
    name = cfg.pop("name")
    protected = cfg.pop("protected")
    if cfg.get("seed") is None:          # absent or null: the run's seed
        cfg["seed"] = seed
    fn = {"synthetic": make_synthetic, OWN_TABLE: load_table}.get(name, load)
    params = inspect.signature(fn).parameters
    # the generator and a table draw no noisy groups themselves: they are flipped on all
    # their rows below (the packaged loaders flip before their split)
    noise = ({k: cfg.pop(k) for k in ("noise", "noise_seed") if k in cfg}
             if name in ("synthetic", OWN_TABLE) else {})
    reserved = {"name", "protected"} if name != "synthetic" else set()
    accepted = sorted(set(params) - reserved)
    unknown = sorted(k for k in cfg if k not in params or k in reserved)
    if unknown:
        raise ConfigError(f"data: unknown key(s) {unknown} for data set {name!r}; its loader "
                          f"takes {accepted} (plus name and protected)")
    # data.protected=race*sex: the crossed attribute of race and sex (fairgames.data.crossed)
    crossed = protected.split(CROSS) if isinstance(protected, str) and CROSS in protected else []
    loaded = crossed[0] if crossed else protected
    try:
        splits = (make_synthetic(**cfg) if name == "synthetic"
                  else load_table(protected=loaded, groups=crossed[1:], **cfg)
                  if name == OWN_TABLE
                  else load(name, protected=loaded, **cfg))
        if crossed:
            splits = group_cross(splits, crossed, name=protected)
        if noise.get("noise") is not None:
            splits = noisy_splits(splits, protected or SYNTHETIC_PROTECTED, noise["noise"],
                                  int(noise.get("noise_seed") or 0))
    except DataError as e:
        # the synthetic generator reads no file: all its errors are the config's
        if name == "synthetic" or isinstance(e, DataArgumentError):
            raise ConfigError(f"invalid data config: {e}") from e
        raise
    if protected is not None and protected not in splits.train.groups:
        raise ConfigError(f"data.protected={protected!r}: data set {name!r} has the "
                          f"attributes {sorted(splits.train.groups)}")
    for split_name, ds in splits.items():
        if len(ds) == 0 and split_name in required:
            if split_name == "validation" and "validation_fraction" in params:
                hint = ("set data.validation_fraction (e.g. data.validation_fraction=0.2: the "
                        "share of the non-test rows held out)")
            elif isinstance(cfg.get("split"), (list, tuple)):
                hint = ("give data.split three fractions above 0 (train, validation, test), "
                        "e.g. data.split=[0.6,0.2,0.2], or use more rows")
            else:
                hint = f"set its split settings ({', '.join(f'data.{k}' for k in accepted)})"
            raise ConfigError(f"data set {name!r} has an empty {split_name} split "
                              f"(data: {dict(cfg)}); {hint}")
    return splits


def write_preprocessing(run_dir: Path, splits: DatasetSplits) -> Path | None:
    """Write the fitted preprocessing of own table data (``metadata["preprocessor"]``,
    :func:`fairgames.data.from_frame` / ``data=table``) as ``preprocess.json`` in
    ``run_dir``, so that the run's models can be applied to new rows; ``None`` (nothing
    written) for other data.

    Example:
        >>> import pandas as pd, tempfile
        >>> from fairgames.data import from_frame
        >>> df = pd.DataFrame({"x": range(20), "g": ["a", "b"] * 10, "y": [0, 1, 1, 0] * 5})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = write_preprocessing(Path(d), from_frame(df, target="y", protected="g"))
        ...     json.loads(path.read_text())["feature_names"]
        ['x']
    """
    pre = (splits.metadata or {}).get("preprocessor")
    if pre is None:
        return None
    path = Path(run_dir) / PREPROCESS_FILE
    write_text(path, json.dumps(pre.to_dict(), indent=1) + "\n")   # whole or not at all
    return path


def constraint_holdout(train: TabularDataset, protected: str, fraction: float, seed: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Row indices ``(theta_rows, constraint_rows)`` of a seeded split of the training data:
    θ trains on the first, the multipliers see the constraints on the second
    (``trainer.constraint_split=holdout``; Cotter et al. 2019 split the training data in two
    so). Stratified by protected group and label (by group for real labels; unstratified for
    soft groups), so both parts keep every group's share and base rate.

    Raises:
        ConfigError: a protected group left without rows in either part.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> train = make_synthetic(n=1000, seed=0).train
        >>> theta, held = constraint_holdout(train, "group", 0.5, seed=0)
        >>> len(theta) + len(held) == len(train), bool(set(theta.tolist()) & set(held.tolist()))
        (True, False)
    """
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"trainer.constraint_fraction={fraction!r}: must lie in (0, 1)")
    codes = train.groups[protected].cpu()
    strata = None
    if codes.dim() == 1:
        strata = codes.numpy().astype(np.int64)
        if train.label_kind == "binary":
            strata = strata * 2 + (train.labels.cpu().numpy() > 0.5)
    # A seed of its own (not the data split's, not the minibatches'): the same split of the
    # same training data for every run with this seed.
    theta, held = random_split(len(train), (1.0 - fraction, fraction), seed=(int(seed), 104729),
                               stratify=strata)
    if codes.dim() == 1:
        names, in_train = train.group_names[protected], set(codes.tolist())
        for part, rows in (("θ's", theta), ("the constraints'", held)):
            present = set(codes[torch.as_tensor(rows)].tolist())
            empty = [names[k] for k in sorted(in_train - present)]
            if empty:
                raise ConfigError(f"trainer.constraint_fraction={fraction}: {protected} group(s) "
                                  f"{empty} have no rows in {part} part of the training split")
    return torch.as_tensor(theta), torch.as_tensor(held)


def make_batch(ds: TabularDataset, scores: torch.Tensor | None,
               index: torch.Tensor | None = None, *,
               baseline_scores: torch.Tensor | None = None,
               weights: torch.Tensor | None = None,
               mixture_weights: torch.Tensor | None = None,
               probabilities: torch.Tensor | None = None) -> Batch:
    """A :class:`~fairgames.rates.Batch` of rows ``index`` (all rows when ``None``) of ``ds``
    with the model's ``scores`` for those rows (or, with ``scores=None``, the
    ``probabilities`` ``P(ŷ = 1)`` of its predictions). No host sync.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> ds = make_synthetic(n=200, d=3, seed=0).train
        >>> batch = make_batch(ds, torch.zeros(len(ds)))
        >>> batch.size, sorted(batch.groups)
        (120, ['group'])
    """
    src = ds.sources
    if index is None:
        labels = ds.labels
        groups = ds.groups
        base = baseline_scores
    else:
        labels = ds.labels[index]
        groups = {a: g[index] for a, g in ds.groups.items()}
        base = baseline_scores[index] if baseline_scores is not None else None
        src = src[index] if src is not None else None
    return Batch(scores=scores, labels=labels, label_kind=ds.label_kind, weights=weights,
                 groups=groups, group_values=ds.group_names, baseline_scores=base,
                 sources=src, source_names=ds.source_names if src is not None else None,
                 unlabeled_sources=ds.unlabeled if src is not None else (),
                 mixture_weights=mixture_weights, probabilities=probabilities)


def chunks(n: int, size: int, device: torch.device | str) -> Iterator[torch.Tensor]:
    """Consecutive index ranges ``[start, start + size)`` covering ``0..n-1``.

    Example:
        >>> [c.tolist() for c in chunks(5, 2, "cpu")]
        [[0, 1], [2, 3], [4]]
    """
    for start in range(0, n, size):
        yield torch.arange(start, min(n, start + size), device=device)


def loaded_keys(data_cfg: Mapping[str, Any], splits: DatasetSplits) -> dict[str, Any]:
    """``data_cfg`` with ``protected`` and ``target`` as loaded (a null is the recipe's
    choice, read back from the splits' metadata), for the run's record.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> loaded_keys({"name": "synthetic", "protected": None}, make_synthetic(n=100))
        {'name': 'synthetic', 'protected': 'group'}
    """
    out = dict(data_cfg)
    meta = splits.metadata or {}
    if out.get("protected") is None:
        out["protected"] = meta.get("protected") or SYNTHETIC_PROTECTED
    if "target" in out and out["target"] is None:
        out["target"] = meta.get("target")
    if "seed" in out and out["seed"] is None:    # data=table's null: the run's, as used
        out["seed"] = meta.get("seed")
    return out


@torch.no_grad()
def predict_scores(model: torch.nn.Module, features: torch.Tensor, chunk: int) -> torch.Tensor:
    """The model's scores ``[N]`` on ``features`` in eval mode, chunk by chunk (restores the
    model's training flag); a :class:`~fairgames.game.solutions.StochasticModel` gives every
    member's scores ``[R, N]``.

    Example:
        >>> predict_scores(torch.nn.Linear(3, 1), torch.zeros(100, 3), chunk=32).shape
        torch.Size([100])
    """
    mixture = isinstance(model, StochasticModel)
    was = model.training
    model.eval()
    try:
        out = [model(features[i:i + chunk]) if mixture else
               model(features[i:i + chunk]).reshape(-1) for i in range(0, len(features), chunk)]
    finally:
        model.train(was)
    return torch.cat(out, dim=-1).float()
