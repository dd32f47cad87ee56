"""Values are checked once, where data enters (a TabularDataset, DatasetSplits, a Batch's
whole-split check): each error names the problem, the first offending rows and the remedy."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from fairgames.data import DataError, DatasetSplits, MinibatchSampler, TabularDataset
from fairgames.rates import Batch, RatesError, no_host_sync


def _dataset(**changes) -> TabularDataset:
    fields = dict(features=torch.zeros(6, 2), labels=torch.tensor([0.0, 1, 1, 0, 1, 0]),
                  label_kind="binary", groups={"sex": torch.tensor([0, 1, 0, 1, 0, 1])},
                  group_names={"sex": ["F", "M"]}, feature_names=["age", "hours"],
                  label_name="y", name="toy")
    fields.update(changes)
    return TabularDataset(**fields)


@pytest.mark.parametrize(("changes", "message"), [
    ({"labels": torch.tensor([0.0, 1, 2, 0, 1, -1])},
     r"bad values of data set 'toy': binary labels must be 0 or 1: 2 of 6 rows are not, "
     r"e\.g\. row 2 = 2\.0, row 5 = -1\.0; map the classes to 0/1"),
    ({"labels": torch.tensor([0.0, 1, float("nan"), 0, 1, 0])},
     r"labels must be finite \(no NaN or inf\): 1 of 6 rows is not, e\.g\. row 2 = nan"),
    ({"labels": torch.tensor([0.0, 0.5, 1.5, 0, 1, 0]), "label_kind": "real"},
     r"real labels must lie in \[0, 1\]: 1 of 6 rows is not, e\.g\. row 2 = 1\.5; rescale"),
    ({"groups": {"sex": torch.tensor([0, 1, 4, 1, 0, -1])}},
     r"group 'sex': codes must lie in 0\.\.1 \(values \['F', 'M'\]\): 2 of 6 rows are not, "
     r"e\.g\. row 2 = 4, row 5 = -1; recode the attribute to 0\.\.1, or list every value in "
     r"group_names\['sex'\]"),
    ({"features": torch.tensor([[0.0, 1], [0, 1], [0, float("inf")], [0, 1], [0, 1], [0, 1]])},
     r"features must be finite \(no NaN or inf\): 1 of 6 rows is not, e\.g\. row 2 column "
     r"'hours' = inf; impute"),
])
def test_bad_values_are_refused_when_the_data_set_is_built(changes, message):
    with pytest.raises(DataError, match=message):
        _dataset(**changes)


def test_every_problem_is_named_at_once():
    with pytest.raises(DataError, match=r"binary labels.*; and group 'sex'"):
        _dataset(labels=torch.tensor([0.0, 1, 2, 0, 1, 0]),
                 groups={"sex": torch.tensor([0, 1, 2, 1, 0, 1])})


def test_rows_of_a_checked_data_set_are_not_read_again():
    ds = _dataset()
    sampler = MinibatchSampler(ds, batch_size=4, seed=0)
    with no_host_sync():            # a minibatch per step: no value check, no sync
        part = ds.subset(next(iter(sampler)))
        moved = ds.to("cpu")
    assert len(part) == 4 and moved is ds


def test_splits_must_share_their_encoding():
    ds = _dataset()
    other = replace(ds, group_names={"sex": ["M", "F"]}, validate=False)
    with pytest.raises(DataError, match=r"validation split's group_names .* differ from the "
                                        r"train split's.*same encoders"):
        DatasetSplits(ds, other, ds)
    DatasetSplits(ds, ds, ds)


def test_the_whole_split_check_names_rows_and_remedy():
    batch = Batch(scores=torch.zeros(4), labels=torch.tensor([0.0, 1, 1, 0]),
                  weights=torch.tensor([1.0, -2.0, float("nan"), 1.0]))
    with pytest.raises(RatesError, match=r"weights must be finite and non-negative: 2 of 4 rows "
                                         r"are not, e\.g\. row 1 = -2\.0, row 2 = nan; drop "
                                         r"those rows or give them weight 0"):
        batch.check_values()
