"""``benchmarks/harness/cells.py``: immutable JSON Lines + gzip archives of benchmark cells."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.harness import cells

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ca():
    return cells


RECORDS = {"unc_law_s0_th0.1": {"cell": {"kind": "unc"}, "x": 0.1 + 0.2, "nan": float("inf"),
                                "groups": {"z": 1, "a": [1.5e-300, None, "é"]}},
           "baselines_law_s0": {"bound": 0.30000000000000004}}


def test_round_trip_is_exact_and_deterministic(ca, tmp_path):
    path = ca.write_archive(tmp_path / "a", RECORDS, now=1.7e9)
    assert path.name.startswith("cells-20231114T221320Z-") and path.name.endswith(".jsonl.gz")
    back = ca.read_archive(path)
    assert back == RECORDS
    assert list(back["unc_law_s0_th0.1"]["groups"]) == ["z", "a"]     # key order kept
    # the same records give the same bytes (gzip header without a time stamp)
    again = ca.write_archive(tmp_path / "b", dict(reversed(RECORDS.items())), now=1.7e9)
    assert again.name == path.name and again.read_bytes() == path.read_bytes()
    assert path.read_bytes()[4:8] == b"\0\0\0\0"                       # gzip MTIME field
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    assert [json.loads(line)["key"] for line in lines] == sorted(RECORDS)


def test_a_second_write_adds_an_archive_and_leaves_the_first_unchanged(ca, tmp_path):
    store = ca.CellStore(tmp_path)
    for key, record in RECORDS.items():
        ca.write_pending(tmp_path, key, record)
    assert store.keys() == set(RECORDS)
    first = store.pack(now=1.7e9)
    before = first.read_bytes()
    assert not list((tmp_path / "pending").glob("*.json"))
    ca.write_pending(tmp_path, "f1_law_s0", {"y": 2})
    second = store.pack(now=1.7e9 + 60)
    assert second != first and second.exists()
    assert first.read_bytes() == before
    assert ca.read_archive(second) == {"f1_law_s0": {"y": 2}}       # only the new cell
    assert store.archives() == [first, second]
    fresh = ca.CellStore(tmp_path)
    assert fresh.keys() == {*RECORDS, "f1_law_s0"} and fresh.get("f1_law_s0") == {"y": 2}
    assert store.pack() is None                                     # nothing pending


def test_a_killed_run_loses_no_cell(ca, tmp_path):
    """Pending files are read at once and packed later; a pack killed after its rename (its
    pending files still there) leaves no duplicate."""
    store = ca.CellStore(tmp_path)
    ca.write_pending(tmp_path, "a", {"v": 1})
    assert store.get("a") == {"v": 1} and "a" in store
    archive = store.pack(now=0)
    ca.write_pending(tmp_path, "a", {"v": 1})                       # the same record again
    (tmp_path / "pending" / ".b.123.tmp").write_text("{")           # a killed worker's write
    assert store.pack(now=10) is None
    assert store.archives() == [archive] and not list((tmp_path / "pending").iterdir())
    # the layout before archives: loose <key>.json files, read and packed the same way
    (tmp_path / "b.json").write_text(json.dumps({"v": 2}))
    assert store.get("b") == {"v": 2}
    assert ca.read_archive(store.pack(now=20)) == {"b": {"v": 2}}
    assert not (tmp_path / "b.json").exists() and store.get("b") == {"v": 2}


@pytest.mark.parametrize("damage", ["truncate", "garbage", "edit", "bad_line"])
def test_a_damaged_archive_is_refused_naming_the_file(ca, tmp_path, damage):
    path = ca.write_archive(tmp_path, RECORDS)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not gzip at all")
    elif damage == "edit":            # a valid gzip whose content is not what was written
        path.write_bytes(gzip.compress(ca.encode({"unc_law_s0_th0.1": {"x": 1}})))
    else:                             # well-formed gzip, right hash, a line not a record
        text = b"not json\n"
        path.unlink()
        path = tmp_path / f"cells-20000101T000000Z-{ca.content_hash(text)}.jsonl.gz"
        path.write_bytes(gzip.compress(text))
    with pytest.raises(ca.CellArchiveError) as e:
        ca.CellStore(tmp_path).get("baselines_law_s0")
    assert e.value.path == path and path.name in str(e.value)


def test_conflicting_records_of_one_cell_are_refused(ca, tmp_path):
    ca.write_archive(tmp_path, {"a": {"v": 1}, "b": {"v": 2}}, now=0)
    ca.write_archive(tmp_path, {"a": {"v": 1}}, now=10)            # the same record: fine
    store = ca.CellStore(tmp_path)
    assert store.get("a") == {"v": 1}
    later = ca.write_archive(tmp_path, {"b": {"v": 3}}, now=20)
    with pytest.raises(ca.CellArchiveError) as e:
        ca.CellStore(tmp_path).get("a")
    assert e.value.path == later
    ca.write_pending(tmp_path / "other", "a", {"v": 1})
    other = ca.CellStore(tmp_path / "other")
    other.pack(now=0)
    ca.write_pending(tmp_path / "other", "a", {"v": 9})
    with pytest.raises(ca.CellArchiveError) as e:
        other.pack(now=10)
    assert e.value.path == tmp_path / "other" / "pending" / "a.json"
    with pytest.raises(ValueError):
        ca.write_archive(tmp_path, {})


def test_packing_keeps_a_failed_runs_cells_and_a_killed_runs_pending_ones(ca, tmp_path,
                                                                         capsys):
    """CellStore.packing: a killed run's pending cell is packed when the next run starts, and
    the cells a run finished are packed even when it fails."""
    ca.write_pending(tmp_path, "left", {"v": 0})                 # a killed run's cell
    store = ca.CellStore(tmp_path)
    with pytest.raises(RuntimeError, match="job failed"):
        with store.packing():
            assert [p.name for p in store.archives()] != []      # packed at the start
            ca.write_pending(tmp_path, "done", {"v": 1})
            raise RuntimeError("job failed")
    assert len(store.archives()) == 2
    assert not list((tmp_path / "pending").glob("*.json"))
    assert store.get("left") == {"v": 0} and store.get("done") == {"v": 1}
    assert f"saved the new cells in {store.archived()['done'][0]}" in capsys.readouterr().out


def test_dropped_cells_leave_the_other_records_and_can_be_run_again(ca, tmp_path):
    store = ca.CellStore(tmp_path)
    first = ca.write_archive(tmp_path, RECORDS, now=1.7e9)
    only = ca.write_archive(tmp_path, {"fc_s0": {"v": 1}}, now=1.7e9 + 1)
    ca.write_pending(tmp_path, "fc_s1", {"v": 2})
    assert store.keys() == {*RECORDS, "fc_s0", "fc_s1"}
    with pytest.raises(KeyError, match="no_such"):
        store.drop(["fc_s0", "no_such"])
    assert first.exists() and only.exists()                 # a refused drop changes nothing
    written = store.drop(["unc_law_s0_th0.1", "fc_s0", "fc_s1"], now=1.8e9)
    assert not first.exists() and not only.exists()          # an emptied archive is removed
    assert len(written) == 1 and ca.read_archive(written[0]) == {
        "baselines_law_s0": RECORDS["baselines_law_s0"]}
    fresh = ca.CellStore(tmp_path)
    assert fresh.keys() == store.keys() == {"baselines_law_s0"}
    # the dropped cell, run again with another record, packs without a conflict
    ca.write_pending(tmp_path, "unc_law_s0_th0.1", {"x": 0.5})
    fresh.pack()
    assert ca.CellStore(tmp_path).get("unc_law_s0_th0.1") == {"x": 0.5}
