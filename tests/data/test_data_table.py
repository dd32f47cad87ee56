"""A user's own table: ``from_frame`` / ``load_table`` (CSV, Parquet) against numpy and
pandas computations on the rows themselves, the fitted preprocessing's round trip, and every
schema error naming its column and row."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from needs import unavailable

from fairgames.data import (
    DataArgumentError,
    DataError,
    TablePreprocessor,
    from_frame,
    load_table,
)
from fairgames.data.splits import random_split
from fairgames.data.table_columns import MISSING

RARE = 12   # jobs held by one row each: some land outside train, unseen by the encoder


def mixed_frame(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Numbers with missing values, text with missing values, booleans, a protected column
    with three values (unequal shares) and a 0/1 target that depends on them."""
    rng = np.random.default_rng(seed)
    race = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    age = rng.normal(40, 10, n).round()
    income = rng.lognormal(10, 1, n)
    job = rng.choice(["teacher", "nurse", "clerk", "pilot"], n).astype(object)
    job[:RARE] = [f"rare{i}" for i in range(RARE)]
    logit = 0.05 * (age - 40) + (race == "a") - 0.5 + (job == "pilot")
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    df = pd.DataFrame({"age": age, "income": income, "job": job, "race": race,
                       "owner": rng.random(n) < 0.5, "y": y})
    df.loc[rng.choice(n, 40, replace=False), "age"] = np.nan
    df.loc[rng.choice(np.arange(RARE, n), 30, replace=False), "job"] = np.nan
    return df


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return mixed_frame()


@pytest.fixture(scope="module")
def splits(frame):
    return from_frame(frame, target="y", protected="race", seed=3)


def _rows(splits, part: str) -> np.ndarray:
    return np.asarray(splits.metadata["split_indices"][part])


def _column(splits, part: str, name: str) -> np.ndarray:
    ds = getattr(splits, part)
    return ds.features[:, ds.feature_names.index(name)].numpy()


# ---------------------------------------------------------------------------- the splits
def test_from_frame_gives_the_packaged_loaders_splits(frame, splits):
    train, val, test = (_rows(splits, p) for p in ("train", "validation", "test"))
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(len(frame)))
    # rounded per stratum (6 label x group strata): within one row of each stratum's share
    assert all(abs(len(rows) - want) <= 6 for rows, want in ((train, 360), (val, 120),
                                                             (test, 120)))
    # the packaged loaders' keys: test first with [seed, 0], validation from the rest [seed, 1]
    strata = pd.factorize(frame["race"], sort=True)[0] * 2 + frame["y"].to_numpy()
    pool, ref_test = random_split(len(frame), (0.8, 0.2), seed=[3, 0], stratify=strata)
    ref_tr, ref_va = random_split(len(pool), (0.75, 0.25), seed=[3, 1], stratify=strata[pool])
    assert np.array_equal(test, ref_test) and np.array_equal(train, pool[ref_tr])
    assert np.array_equal(val, pool[ref_va])
    for part in ("train", "validation", "test"):
        ds, rows = getattr(splits, part), _rows(splits, part)
        assert ds.labels.tolist() == frame["y"].to_numpy()[rows].astype(float).tolist()
        names = ds.group_names["race"]
        assert names == ["a", "b", "c"]
        assert [names[c] for c in ds.groups["race"].tolist()] == frame["race"].to_numpy()[
            rows].tolist()
        assert not any(n.startswith("race") for n in ds.feature_names)   # protected left out
    assert splits.train.label_kind == "binary" and splits.metadata["stratify"] == "label_group"


def test_the_split_is_stratified_by_label_and_group(frame, splits):
    keys = frame["race"] + "/" + frame["y"].astype(str)
    n_s = keys.value_counts()
    test = keys.iloc[_rows(splits, "test")].value_counts()
    val = keys.iloc[_rows(splits, "validation")].value_counts()
    assert len(n_s) == 6
    for key, n in n_s.items():
        # each stratum's share within rounding: 0.2 of it in test, 0.25 of the rest validation
        assert abs(test.get(key, 0) - 0.2 * n) < 1, key
        assert abs(val.get(key, 0) - 0.25 * (n - test.get(key, 0))) < 1, key


def test_the_split_is_seeded(frame, splits):
    again = from_frame(frame, target="y", protected="race", seed=3)
    other = from_frame(frame, target="y", protected="race", seed=4)
    assert np.array_equal(_rows(again, "test"), _rows(splits, "test"))
    assert torch.equal(again.train.features, splits.train.features)
    assert not np.array_equal(_rows(other, "test"), _rows(splits, "test"))


def test_no_validation_split_and_fraction_checks(frame):
    s = from_frame(frame, target="y", protected="race", split=(0.7, 0.3))
    assert len(s.validation) == 0 and abs(len(s.test) - 180) <= 6
    for bad in [(0.5, 0.2, 0.2), (0.0, 0.5, 0.5), (1.0, 0.0), (0.6, 0.2, 0.1, 0.1), "0.8"]:
        with pytest.raises(DataArgumentError, match="split must be"):
            from_frame(frame, target="y", protected="race", split=bad)


# ---------------------------------------------------------------------------- encoding
def test_numericals_are_standardised_with_training_statistics_only(frame, splits):
    train = _rows(splits, "train")
    for col in ("income", "age"):
        x = frame[col].to_numpy(dtype=float)
        tr = x[train][~np.isnan(x[train])]
        mean, std, median = tr.mean(), tr.std(), np.median(tr)
        every = x[~np.isnan(x)]
        assert abs(every.mean() - mean) > 1e-3 * std      # the test tells the two apart
        for part in ("train", "validation", "test"):
            rows = _rows(splits, part)
            want = (np.where(np.isnan(x[rows]), median, x[rows]) - mean) / std
            np.testing.assert_allclose(_column(splits, part, col), want, rtol=1e-5, atol=1e-5)


def test_missing_values(frame, splits):
    for part in ("train", "validation", "test"):
        rows = _rows(splits, part)
        # a numerical column with missing values gets a 0/1 flag of them
        assert _column(splits, part, f"age={MISSING}").tolist() == frame["age"].isna().to_numpy(
            )[rows].astype(float).tolist()
        # a categorical one has <missing> as a category of its own
        assert _column(splits, part, f"job={MISSING}").tolist() == frame["job"].isna().to_numpy(
            )[rows].astype(float).tolist()
    assert "income=<missing>" not in splits.train.feature_names   # none missing: no flag
    assert torch.isfinite(splits.train.features).all()


def test_categories_unseen_in_training_are_all_zero(frame, splits):
    jobs = frame["job"].fillna(MISSING).to_numpy()
    seen = set(jobs[_rows(splits, "train")])
    names = splits.train.feature_names
    assert [n for n in names if n.startswith("job=")] == sorted(f"job={j}" for j in seen)
    unseen = 0
    for part in ("validation", "test"):
        ds, rows = getattr(splits, part), _rows(splits, part)
        block = ds.features[:, [i for i, n in enumerate(names) if n.startswith("job=")]]
        for r, job in zip(block, jobs[rows], strict=True):
            if job in seen:
                assert r.sum() == 1 and r[sorted(seen).index(job)] == 1
            else:
                unseen += 1
                assert r.abs().sum() == 0
    assert unseen > 0          # rare jobs outside train: the rule was exercised
    assert [n for n in names if n.startswith("owner=")] == ["owner=False", "owner=True"]


def test_feature_lists_choose_and_type_the_columns(frame):
    s = from_frame(frame, target="y", protected="race", categorical=["age"],
                   numerical=["income"], include_protected=True)
    names = s.train.feature_names
    assert names[0].startswith("age=") and "income" in names and "race=a" in names
    assert not any(n.startswith(("job", "owner")) for n in names)
    assert s.metadata["preprocessor"].include_protected


def test_real_targets_for_regression(frame):
    df = frame.assign(score=np.linspace(0, 1, len(frame)))
    s = from_frame(df.drop(columns="y"), target="score", protected="race", label_kind="real")
    assert s.train.label_kind == "real" and s.metadata["stratify"] == "group"
    rows = _rows(s, "test")
    assert s.test.labels.tolist() == pytest.approx(df["score"].to_numpy()[rows].tolist())


def test_positive_binarises_a_text_target(frame):
    df = frame.assign(y=np.where(frame["y"] == 1, ">50K", "<=50K"))
    s = from_frame(df, target="y", protected="race", positive=">50K", seed=3)
    ref = from_frame(frame, target="y", protected="race", seed=3)
    assert torch.equal(s.train.labels, ref.train.labels)


# ---------------------------------------------------------------------------- preprocessing
def test_the_preprocessing_round_trips_and_transforms_new_rows(frame, splits):
    pre = splits.metadata["preprocessor"]
    back = TablePreprocessor.from_dict(json.loads(json.dumps(pre.to_dict())))
    assert back == pre and back.feature_names == splits.train.feature_names
    x = back.transform(frame.drop(columns=["y", "race"]))   # neither needed for features
    for part in ("train", "validation", "test"):
        assert torch.equal(x[_rows(splits, part)], getattr(splits, part).features)
    ds = back.dataset(frame)
    assert torch.equal(ds.labels[_rows(splits, "test")], splits.test.labels)
    with pytest.raises(DataError, match=r"feature column\(s\) \['income'\] are not in"):
        back.transform(frame.drop(columns="income"))
    with pytest.raises(DataError, match="'d' at row 0, not one of the groups"):
        back.groups(frame.assign(race="d"))


# ---------------------------------------------------------------------------- files
def test_a_csv_file_gives_the_frames_splits(frame, splits, tmp_path):
    path = tmp_path / "people.csv"
    frame.to_csv(path, index=False)
    s = load_table(path, target="y", protected="race", seed=3)
    for (_, a), (_, b) in zip(s.items(), splits.items(), strict=True):
        assert a.feature_names == b.feature_names
        np.testing.assert_allclose(a.features.numpy(), b.features.numpy(), rtol=0, atol=1e-6)
        assert torch.equal(a.labels, b.labels)
    assert s.metadata["sources"][0]["path"] == str(path.resolve())


def test_a_parquet_file_gives_the_frames_splits(frame, splits, tmp_path):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        unavailable("pyarrow is not installed (pip install pyarrow; the test extra has it)")
    path = tmp_path / "people.parquet"
    frame.to_parquet(path)
    s = load_table(path, target="y", protected="race", seed=3)
    for (_, a), (_, b) in zip(s.items(), splits.items(), strict=True):
        assert a.feature_names == b.feature_names and torch.equal(a.features, b.features)
    (tmp_path / "cut.parquet").write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match="cannot read the table file .*cut.parquet"):
        load_table(tmp_path / "cut.parquet", target="y", protected="race")


def test_parquet_without_pyarrow_says_how_to_install_it(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)     # import pyarrow -> ImportError
    with pytest.raises(DataError, match=r"t.parquet needs pyarrow: pip install pyarrow"):
        load_table(path, target="y", protected="race")


@pytest.mark.parametrize(("name", "content", "says"), [
    ("absent.csv", None, "absent.csv does not exist"),
    ("empty.csv", b"", r"cannot read the table file .*empty.csv \(EmptyDataError"),
    ("latin.csv", b"a,b\n\xff\xfe,1\n", r"cannot read the table file .*latin.csv"),
    ("short.csv", b"age,race,y\n", r"short.csv: the table is empty"),
    ("table.xlsx", b"x", r"table.xlsx has no known suffix"),
])
def test_a_bad_file_is_named(tmp_path, name, content, says):
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=says):
        load_table(tmp_path / name, target="y", protected="race")


def test_a_bad_cell_of_a_csv_names_its_line(frame, tmp_path):
    df = frame.astype({"age": object})
    df.loc[5, "age"] = "forty"
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DataError, match=r"^column 'age' is numerical but row 5 \(line 7 of "
                                        r".*t.csv\) holds 'forty'"):
        load_table(tmp_path / "t.csv", target="y", protected="race")


def test_missing_required_keys_are_named():
    with pytest.raises(DataArgumentError, match=r"needs protected \(data.protected="):
        load_table("x.csv", target="y")


# ---------------------------------------------------------------------------- schema errors
def _bad(df: pd.DataFrame, **kw):
    return from_frame(df, **{"target": "y", "protected": "race", **kw})


SMALL = pd.DataFrame({"age": [30.0, 40.0, 50.0, 60.0, 20.0, 35.0],
                      "race": ["a", "b", "c", "a", "b", "c"], "y": [0, 1, 0, 1, 1, 0]})


@pytest.mark.parametrize(("df", "kw", "error", "says"), [
    (SMALL.assign(age=["30", "40", "x50", "60", "20", "35"]), {"numerical": ["age"]},
     DataError, r"column 'age' is numerical but row 2 holds 'x50'"),
    # inferred: a text column that is mostly numbers is a numerical one with a typo
    (pd.concat([SMALL] * 4, ignore_index=True).astype({"age": object}).assign(
        age=lambda d: d["age"].where(d.index != 9, "n/a")), {},
     DataError, r"column 'age' is numerical but row 9 holds 'n/a'"),
    (SMALL.assign(age=[1.0, np.inf, 2, 3, 4, 5]), {}, DataError,
     "column 'age' holds an infinite value at row 1"),
    (SMALL, {"protected": "sex"}, DataArgumentError,
     r"unknown protected column 'sex'; the table's columns are \['age', 'race', 'y'\]"),
    (SMALL, {"target": "label"}, DataArgumentError, r"unknown target column 'label'; .*'y'\]"),
    (SMALL, {"numerical": ["agee"]}, DataArgumentError, r"unknown feature column\(s\) \['agee'\]"),
    (SMALL, {"numerical": ["age"], "categorical": ["age"]}, DataArgumentError,
     "both categorical and numerical"),
    (SMALL, {"categorical": ["race"]}, DataArgumentError, "include_protected=True adds"),
    (SMALL.iloc[:0], {}, DataError, r"the table is empty \(0 rows"),
    (SMALL.assign(y=1), {}, DataError, "target column 'y' is constant"),
    (SMALL.assign(y=[0, 1, 2, 1, 0, 2]), {}, DataArgumentError,
     r"target column 'y' is not binary: it holds 3 distinct values \['0', '1', '2'\]; .*"
     r"positive=<value>.*label_kind='real'"),
    (SMALL.assign(y=list("nynyyn")), {"positive": "yes"}, DataArgumentError,
     r"positive='yes' is not a value of the target column 'y' \(it holds 2 distinct values "
     r"\['n', 'y'\]\)"),
    (SMALL.assign(y=[0.1, 2.0, 0.3, 0.5, 0.2, 0.9]), {"label_kind": "real"}, DataError,
     r"real-valued target 'y' ranges over \[0.1, 2\]"),
    (SMALL.assign(y=[0, 1, None, 1, 1, 0]), {}, DataError,
     r"target column 'y' has 1 missing value\(s\), first at row 2"),
    (SMALL.assign(race=["a", None, "c", "a", "b", "c"]), {}, DataError,
     r"protected column 'race' has 1 missing value\(s\), first at row 1"),
    (SMALL.assign(race="a"), {}, DataError, "single value 'a'"),
    (SMALL, {"target": "race", "protected": "race"}, DataArgumentError, "both 'race'"),
    (SMALL, {"split": (0.1, 0.0, 0.9)}, DataError, r"6 row\(s\) are too few for the split"),
    (SMALL, {"label_kind": "ordinal"}, DataArgumentError, "label_kind must be one of"),
], ids=["text-in-numerical", "typo-in-inferred-numerical", "infinite", "unknown-protected",
        "unknown-target", "unknown-feature", "listed-twice", "protected-listed", "empty",
        "constant-target", "non-binary-target", "unknown-positive", "real-out-of-range",
        "missing-target", "missing-group", "one-group", "same-column", "too-few-rows",
        "label-kind"])
def test_schema_errors_name_the_column_and_row(df, kw, error, says):
    with pytest.raises(error, match=says):
        _bad(df, **kw)


def test_column_names_that_are_not_text_and_a_numeric_protected_feature():
    rng = np.random.default_rng(1)
    df = pd.DataFrame({0: rng.normal(size=60), 1: np.tile([0, 1, 2], 20),
                       2: np.tile([0, 1, 1, 0], 15)})
    s = from_frame(df, target="2", protected="1", include_protected=True)
    assert s.train.feature_names == ["0", "1=0", "1=1", "1=2"]     # the group one-hot
    assert s.train.group_names == {"1": ["0", "1", "2"]}
    rows = _rows(s, "test")
    assert s.test.features[:, 1:].argmax(1).tolist() == df[1].to_numpy()[rows].tolist()
    pre = s.metadata["preprocessor"]
    assert torch.equal(pre.transform(df)[rows], s.test.features)


# ---------------------------------------------------------------------------- separators
@pytest.mark.parametrize(("sep", "shown"), [(";", "';'"), ("\t", r"'\\t'")])
def test_a_csv_of_another_separator_is_named_with_the_option_that_reads_it(
        frame, splits, tmp_path, sep, shown):
    """Issue 55: a ';'-separated ``.csv`` read with ',' is one column, and the error blamed
    a missing column; the message names the separator its header holds and ``data.sep``."""
    path = tmp_path / "people.csv"
    frame.to_csv(path, index=False, sep=sep)
    with pytest.raises(DataArgumentError,
                       match=rf"people.csv has one column .*{shown}.*data.sep={shown}"):
        load_table(path, target="y", protected="race", seed=3)
    s = load_table(path, target="y", protected="race", seed=3, sep=sep)
    for (_, a), (_, b) in zip(s.items(), splits.items(), strict=True):
        assert a.feature_names == b.feature_names
        np.testing.assert_allclose(a.features.numpy(), b.features.numpy(), rtol=0, atol=1e-6)
        assert torch.equal(a.labels, b.labels)


def test_a_one_column_header_without_a_separator_keeps_the_column_message(tmp_path):
    """A header of one field without ';' or a tab: nothing to suggest, the column error."""
    (tmp_path / "one.csv").write_text("y\n0\n1\n")
    with pytest.raises(DataArgumentError, match="unknown protected column 'race'"):
        load_table(tmp_path / "one.csv", target="y", protected="race")


# ---------------------------------------------------------------------------- id-like groups
@pytest.mark.parametrize("ids", [lambda n: np.arange(n), lambda n: [f"p{i}" for i in range(n)],
                                 lambda n: np.arange(n) // 1.5])
def test_an_id_like_protected_column_is_named_not_the_row_count(ids):
    """Issue 55: 2 000 one-row groups were blamed on the row count ("too few for the split");
    the message counts the column's distinct values over the rows and names the remedy."""
    n = 2000
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"id": ids(n), "x": rng.normal(size=n), "y": rng.integers(0, 2, n)})
    distinct = df["id"].nunique()
    with pytest.raises(DataArgumentError,
                       match=rf"protected column 'id' has {distinct} distinct values over "
                             rf"{n} rows \(it looks like an identifier\).*data.protected.*bin"):
        from_frame(df, target="y", protected="id")


def test_many_groups_of_a_few_rows_each_are_still_a_table():
    """Up to one group per two rows is allowed: 80 rows of 40 values (each label × group
    stratum two rows) are split as before, not refused."""
    df = pd.DataFrame({"g": np.repeat(np.arange(40), 2), "x": np.arange(80.0),
                       "y": np.repeat(np.tile([0, 1], 20), 2)})
    s = from_frame(df, target="y", protected="g", split=(0.5, 0.5))
    assert (len(s.train), len(s.test)) == (40, 40) and len(s.train.group_names["g"]) == 40
