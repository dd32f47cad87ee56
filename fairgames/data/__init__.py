"""Data sets for fairgames: real benchmarks with the papers' preprocessing, a synthetic
generator, seeded splits, noisy groups and a device-resident minibatch sampler.

Example:
    >>> from fairgames.data import MinibatchSampler, make_synthetic
    >>> splits = make_synthetic(n=1000, seed=0)
    >>> sampler = MinibatchSampler(splits.train, batch_size=64, seed=0)
    >>> batch = splits.train.subset(next(sampler))
    >>> len(batch)
    64

Real data sets (``available_datasets()``) are loaded with :func:`load`, e.g.
``load("adult", protected="sex", split="official")``; a user's own table with
:func:`from_frame` (a DataFrame) or :func:`load_table` (a CSV or Parquet file); see
``docs/data.md``.
"""

from .crossed import CrossedGroups, CrossedGroupsWarning, crossed_column, group_cross
from .dataset import DatasetSplits, TabularDataset
from .errors import DataArgumentError, DataError
from .loaders import available_datasets, load
from .noise import (
    GroupNoiseEstimate,
    estimate_group_noise,
    flip_groups,
    noisy_splits,
    true_attribute,
)
from .sampler import MinibatchSampler
from .sampler_sources import SourcesSampler
from .several import combine_sources, combine_splits, labeled_mask, labeled_part
from .synthetic import make_synthetic
from .table import from_frame, load_table
from .table_preprocess import TablePreprocessor

__all__ = [
    "CrossedGroups",
    "CrossedGroupsWarning",
    "DataArgumentError",
    "DataError",
    "DatasetSplits",
    "GroupNoiseEstimate",
    "MinibatchSampler",
    "SourcesSampler",
    "TablePreprocessor",
    "TabularDataset",
    "available_datasets",
    "combine_sources",
    "combine_splits",
    "labeled_mask",
    "labeled_part",
    "estimate_group_noise",
    "noisy_splits",
    "true_attribute",
    "flip_groups",
    "crossed_column",
    "group_cross",
    "from_frame",
    "load",
    "load_table",
    "make_synthetic",
]
