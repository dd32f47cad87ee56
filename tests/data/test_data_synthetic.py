"""The synthetic generator and the TabularDataset / DatasetSplits containers."""

import numpy as np
import pytest
import torch

from fairgames.data import DataError, DatasetSplits, TabularDataset, make_synthetic


def _all_rows(s: DatasetSplits) -> torch.Tensor:
    return torch.cat([s.train.features, s.validation.features, s.test.features])


def test_shapes_dtypes_and_split_sizes():
    s = make_synthetic(n=1000, d=7, seed=3)
    assert (len(s.train), len(s.validation), len(s.test)) == (600, 200, 200)
    for part in s:
        assert part.features.dtype == torch.float32 and part.features.shape[1] == 7
        assert part.labels.dtype == torch.float32
        assert part.groups["group"].dtype == torch.int64
        assert set(part.labels.unique().tolist()) <= {0.0, 1.0}
        assert part.feature_names == [f"x{i}" for i in range(7)]
    assert s.metadata["seed"] == 3


def test_deterministic_and_seed_dependent():
    a, b, c = make_synthetic(seed=1), make_synthetic(seed=1), make_synthetic(seed=2)
    assert torch.equal(_all_rows(a), _all_rows(b))
    assert torch.equal(a.train.labels, b.train.labels)
    assert not torch.equal(_all_rows(a), _all_rows(c))


def test_group_proportions_are_exact():
    s = make_synthetic(n=2000, n_groups=3, group_proportions=(0.5, 0.3, 0.2), seed=0)
    codes = torch.cat([p.groups["group"] for p in s])
    assert torch.bincount(codes).tolist() == [1000, 600, 400]
    assert s.train.group_names["group"] == ["0", "1", "2"]


def test_group_one_has_lower_base_rate_and_shift_zero_removes_it():
    s = make_synthetic(n=20000, seed=0, group_shift=1.0)
    rates = s.train.base_rates()["group"]
    assert rates["0"] - rates["1"] > 0.15
    s0 = make_synthetic(n=20000, seed=0, group_shift=0.0)
    r0 = s0.train.base_rates()["group"]
    assert abs(r0["0"] - r0["1"]) < 0.05


def _logistic_accuracy(split: DatasetSplits) -> float:
    from sklearn.linear_model import LogisticRegression

    m = LogisticRegression(max_iter=500).fit(split.train.features.numpy(),
                                             split.train.labels.numpy())
    return float(m.score(split.test.features.numpy(), split.test.labels.numpy()))


def test_separability_and_label_noise_move_accuracy():
    easy = _logistic_accuracy(make_synthetic(n=4000, separability=5.0, seed=0))
    hard = _logistic_accuracy(make_synthetic(n=4000, separability=0.3, seed=0))
    noisy = _logistic_accuracy(make_synthetic(n=4000, separability=5.0, label_noise=0.3,
                                              seed=0))
    assert easy > 0.9 > hard
    assert noisy < easy - 0.15


def test_label_noise_flips_the_expected_fraction():
    clean = make_synthetic(n=10000, seed=5)
    noisy = make_synthetic(n=10000, seed=5, label_noise=0.2)
    flipped = float((clean.train.labels != noisy.train.labels).float().mean())
    assert abs(flipped - 0.2) < 0.03


def test_real_labels_in_unit_interval():
    s = make_synthetic(n=500, label_kind="real", label_noise=0.1, seed=0)
    y = s.train.labels
    assert s.train.label_kind == "real"
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0
    assert len(y.unique()) > 100


def test_splits_disjoint_and_cover():
    s = make_synthetic(n=503, d=3, seed=0)
    rows = _all_rows(s).numpy()
    assert len(np.unique(rows, axis=0)) == 503


def test_two_fraction_split_means_no_validation():
    s = make_synthetic(n=100, split=(0.5, 0.5))
    assert (len(s.train), len(s.validation), len(s.test)) == (50, 0, 50)


@pytest.mark.parametrize("kwargs", [
    {"n": 0}, {"d": 0}, {"n_groups": 2, "group_proportions": (1.0,)},
    {"label_kind": "ordinal"}, {"split": (0.5, 0.6)}, {"label_noise": 2.0},
])
def test_bad_arguments(kwargs):
    with pytest.raises(DataError):
        make_synthetic(**kwargs)


def test_dataset_methods():
    ds = make_synthetic(n=400, seed=0).train
    masks = ds.group_masks("group")
    assert torch.equal(masks["0"] | masks["1"], torch.ones(len(ds), dtype=torch.bool))
    assert ds.group_counts("group") == {k: int(v.sum()) for k, v in masks.items()}
    rates = ds.base_rates()
    y = ds.labels.numpy()
    g = ds.groups["group"].numpy()
    assert rates["overall"] == pytest.approx(y.mean())
    assert rates["group"]["1"] == pytest.approx(y[g == 1].mean())
    sub = ds.subset(torch.tensor([3, 1]))
    assert torch.equal(sub.features, ds.features[[3, 1]])
    assert torch.equal(sub.groups["group"], ds.groups["group"][[3, 1]])
    by_mask = ds.subset(masks["1"])
    assert len(by_mask) == ds.group_counts("group")["1"]
    assert ds.to("cpu") is ds
    with pytest.raises(DataError, match="unknown protected attribute 'race'"):
        ds.group_masks("race")


def test_dataset_validation():
    ok = dict(features=torch.zeros(3, 2), labels=torch.zeros(3), label_kind="binary",
              groups={"a": torch.zeros(3, dtype=torch.int64)}, group_names={"a": ["x"]},
              feature_names=["f", "g"], label_name="y")
    TabularDataset(**ok)
    for bad in ({"features": torch.zeros(3, 2, dtype=torch.float64)},
                {"labels": torch.zeros(4)},
                {"label_kind": "count"},
                {"feature_names": ["f"]},
                {"groups": {"a": torch.zeros(3, dtype=torch.int32)}},
                {"group_names": {"b": ["x"]}}):
        with pytest.raises(DataError):
            TabularDataset(**{**ok, **bad})
