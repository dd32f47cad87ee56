"""Per-cell benchmark records as immutable, gzip-compressed JSON Lines archives.

A results directory of cells (e.g. ``benchmarks/results/reproduce_000.cells/``) holds
archives ``cells-<UTC time>-<content hash>.jsonl.gz``, one line ``{"key": ..., "record":
...}`` per cell, sorted by key. An archive is never rewritten: a run that computes new cells
adds a new archive holding only those, written atomically (a temporary file, then a rename)
with a deterministic gzip header (mtime 0), so the same cells give the same bytes, and the
name's hash is checked on reading (an archive edited after it was written is refused).

While a run goes, its workers write each finished cell to ``pending/<key>.json`` (atomically;
``pending/`` is scratch, ignored by git) and :meth:`CellStore.pack` moves the pending cells
into one new archive at the end. A killed run loses no finished cell: its pending files are
read like archived cells and packed at the next start. Loose ``<key>.json`` files directly
in the directory (the layout before archives) are read and packed the same way.

Reading merges every archive and pending file. A key found twice with the same record is one
cell; with different records it is refused (:class:`CellArchiveError` naming both places):
no table may depend on which of two runs of a cell is read. To redo cells, use a fresh
directory, or :meth:`CellStore.drop` them (their archives are replaced by archives without
them) and run them again.

Example:
    >>> import tempfile
    >>> store = CellStore(tempfile.mkdtemp())
    >>> _ = write_pending(store.directory, "unc_law_s0_th0.1", {"error": 0.25})
    >>> archive = store.pack()
    >>> store.get("unc_law_s0_th0.1"), archive.name.startswith("cells-")
    ({'error': 0.25}, True)
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

PENDING = "pending"
PATTERN = "cells-*.jsonl.gz"


class CellArchiveError(ValueError):
    """An unreadable, modified or conflicting cell record; ``path`` names the file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)


def encode(records: dict[str, dict[str, Any]]) -> bytes:
    """The JSON Lines text of ``records``, sorted by key (the archive's uncompressed bytes).

    Example:
        >>> encode({"b": {"x": 1}, "a": {}})
        b'{"key": "a", "record": {}}\\n{"key": "b", "record": {"x": 1}}\\n'
    """
    return "".join(json.dumps({"key": k, "record": records[k]}) + "\n"
                   for k in sorted(records)).encode()


def content_hash(text: bytes) -> str:
    """The short hash of an archive's uncompressed bytes that its name carries."""
    return hashlib.sha256(text).hexdigest()[:12]


def write_archive(directory: Path | str, records: dict[str, dict[str, Any]],
                  now: float | None = None) -> Path:
    """Write ``records`` as a new archive in ``directory``; return its path.

    Atomic (a temporary file renamed into place) and deterministic: the same records give the
    same bytes. An existing archive is never replaced; writing the same records twice in the
    same second gives the same name and leaves the file as it is.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> write_archive(d, {"k": {"v": 1}}, now=0).name
        'cells-19700101T000000Z-9aaebf5e273d.jsonl.gz'
    """
    if not records:
        raise ValueError("write_archive: no records to write")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = encode(records)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    path = directory / f"cells-{stamp}-{content_hash(text)}.jsonl.gz"
    if path.exists():                 # the same content: the name says so
        return path
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        gz.write(text)
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_archive(path: Path | str) -> dict[str, dict[str, Any]]:
    """The records of one archive.

    Raises:
        CellArchiveError: naming the file, when it is truncated, not gzip, not JSON Lines of
            ``{"key", "record"}``, holds a key twice, or does not match the hash in its name.
    """
    path = Path(path)
    try:
        text = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as e:
        raise CellArchiveError(path, f"not a readable gzip archive ({type(e).__name__}: {e}); "
                                     "restore it from git or delete it and rerun its cells"
                               ) from e
    expected = path.name.removesuffix(".jsonl.gz").rsplit("-", 1)[-1]
    if content_hash(text) != expected:
        raise CellArchiveError(path, f"its content hashes to {content_hash(text)}, its name "
                                     f"says {expected}: the archive was modified after it was "
                                     "written (archives are immutable)")
    out: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(text.decode().splitlines(), 1):
        try:
            entry = json.loads(line)
            key, record = entry["key"], entry["record"]
        except (ValueError, KeyError, TypeError) as e:
            raise CellArchiveError(path, f"line {number} is not a cell record ({e})") from e
        if key in out:
            raise CellArchiveError(path, f"holds cell {key!r} twice")
        out[key] = record
    return out


def write_pending(directory: Path | str, key: str, record: dict[str, Any]) -> Path:
    """Save one finished cell under ``directory/pending/`` (atomic; a worker's write)."""
    pending = Path(directory) / PENDING
    pending.mkdir(parents=True, exist_ok=True)
    path = pending / f"{key}.json"
    tmp = pending / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
    return path


class CellStore:
    """The cells of one results directory: its archives, then its pending and loose files.

    Archives are read once per process (they never change); pending and loose files are
    read from disk on every look-up, so a worker's new cell is seen at once.

    Example:
        >>> import tempfile
        >>> store = CellStore(tempfile.mkdtemp())
        >>> "k" in store, store.get("k")
        (False, None)
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._archives: dict[str, dict[str, dict[str, Any]]] = {}

    def archives(self) -> list[Path]:
        """This directory's archives, oldest first (their names start with UTC times)."""
        return sorted(self.directory.glob(PATTERN))

    def archived(self) -> dict[str, tuple[Path, dict[str, Any]]]:
        """Every archived record by key, with the archive holding it.

        Raises:
            CellArchiveError: for an unreadable archive, or a key two archives disagree on.
        """
        out: dict[str, tuple[Path, dict[str, Any]]] = {}
        for path in self.archives():
            if path.name not in self._archives:
                self._archives[path.name] = read_archive(path)
            for key, record in self._archives[path.name].items():
                if key in out and out[key][1] != record:
                    raise CellArchiveError(path, f"cell {key!r} differs from its record in "
                                                 f"{out[key][0].name}; keep one archive")
                out.setdefault(key, (path, record))
        return out

    def _loose(self) -> Iterator[Path]:
        """Pending files, then loose ones (the layout before archives)."""
        for folder in (self.directory / PENDING, self.directory):
            if folder.is_dir():
                yield from sorted(folder.glob("*.json"))

    def _read_loose(self, path: Path) -> dict[str, Any]:
        try:
            return json.loads(path.read_text())
        except ValueError as e:
            raise CellArchiveError(path, f"not a JSON cell record ({e}); delete it to rerun "
                                         "the cell") from e

    def where(self, key: str) -> str:
        """Where ``key``'s record is (``archive.jsonl.gz[key]`` or a pending file's path)."""
        for folder in (self.directory / PENDING, self.directory):
            if (folder / f"{key}.json").exists():
                return str(folder / f"{key}.json")
        found = self.archived().get(key)
        return f"{found[0]}[{key}]" if found else f"{self.directory}[{key}]"

    def get(self, key: str) -> dict[str, Any] | None:
        """``key``'s record, or None when no run has saved it."""
        for folder in (self.directory / PENDING, self.directory):
            path = folder / f"{key}.json"
            if path.exists():
                return self._read_loose(path)
        found = self.archived().get(key)
        return None if found is None else found[1]

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def keys(self) -> set[str]:
        """Every saved cell's key."""
        return set(self.archived()) | {p.stem for p in self._loose()}

    def pack(self, now: float | None = None) -> Path | None:
        """Move the pending and loose records into one new archive; return it (None: none).

        A pending record already archived identically (a pack killed after its rename) is
        only removed.

        Raises:
            CellArchiveError: when a pending record differs from its archived one.
        """
        archived = self.archived()
        new: dict[str, dict[str, Any]] = {}
        loose = list(self._loose())
        for path in loose:
            record = self._read_loose(path)
            if path.stem in archived and archived[path.stem][1] != record:
                raise CellArchiveError(path, f"cell {path.stem!r} is already in "
                                             f"{archived[path.stem][0].name} with another "
                                             "record; delete one of them")
            if path.stem in new and new[path.stem] != record:
                raise CellArchiveError(path, f"cell {path.stem!r} has another pending record")
            if path.stem not in archived:
                new[path.stem] = record
        written = write_archive(self.directory, new, now) if new else None
        for path in loose:
            path.unlink()
        for tmp in (self.directory / PENDING).glob(".*.tmp"):   # a killed worker's write
            tmp.unlink()
        return written

    def drop(self, keys: Iterable[str], now: float | None = None) -> list[Path]:
        """Remove the cells ``keys`` (a computation that changed: they are then run again):
        each archive holding one is replaced by a new archive of its other records (none if
        it held only those), and their pending files are deleted. Returns the new archives.

        Raises:
            KeyError: for a key no archive or pending file holds (nothing is changed).
        """
        keys = set(keys)
        unknown = keys - self.keys()
        if unknown:
            raise KeyError(f"no cell {sorted(unknown)} in {self.directory}")
        written = []
        for path in self.archives():
            records = read_archive(path)
            if keys.isdisjoint(records):
                continue
            kept = {k: v for k, v in records.items() if k not in keys}
            if kept:
                written.append(write_archive(self.directory, kept, now))
            path.unlink()
            self._archives.pop(path.name, None)
        for path in self._loose():
            if path.stem in keys:
                path.unlink()
        return written

    @contextlib.contextmanager
    def packing(self) -> Iterator[CellStore]:
        """Around a run that saves cells: pack what a killed run left pending first, and this
        run's new cells into one archive at the end, even when the run fails (its finished
        cells are kept); the new archive's name is printed.

        Example:
            >>> import tempfile
            >>> store = CellStore(tempfile.mkdtemp())
            >>> with store.packing():
            ...     _ = write_pending(store.directory, "k", {"v": 1})
            saved the new cells in ...
            >>> len(store.archives()), store.get("k")
            (1, {'v': 1})
        """
        self.pack()
        try:
            yield self
        finally:
            archive = self.pack()
            if archive is not None:
                print(f"saved the new cells in {archive}", flush=True)
