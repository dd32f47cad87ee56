"""Checkpoints: the newest two kept, each written atomically, read safely, every failure named.

Writing (:func:`write_checkpoint`): the state goes to ``checkpoint.pt.tmp`` (flushed to the
disk), then ``checkpoint.pt`` is renamed to ``checkpoint.prev.pt`` and the temporary file to
``checkpoint.pt``. Each rename is atomic (``os.replace``), so at every moment a complete
checkpoint is readable (between the two renames, ``checkpoint.prev.pt``): a run killed while
saving loses at most the checkpoint it was writing. A disk that refuses the write (full,
read-only) raises :class:`CheckpointError` naming the file and the remedy; the earlier
checkpoints are left as they were.

Reading (:func:`read_latest`): the zip archive's checksums are verified, then the file is loaded
with ``torch.load(weights_only=True)`` (tensors and plain containers only, no pickled code).
An unreadable ``checkpoint.pt`` falls back to ``checkpoint.prev.pt`` with a
:class:`CheckpointWarning` naming both; a file that cannot be used says why (empty, truncated,
damaged, not a checkpoint, written by an incompatible version).

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> run_dir = Path(tempfile.mkdtemp())
    >>> for step in (1, 2, 3):
    ...     _ = write_checkpoint({"step": step, "w": torch.ones(2)}, run_dir)
    >>> sorted(p.name for p in run_dir.iterdir())
    ['checkpoint.prev.pt', 'checkpoint.pt']
    >>> path, state = read_latest(run_dir / CHECKPOINT_NAME)
    >>> path.name, state["step"], load_checkpoint(run_dir / PREVIOUS_NAME)["step"]
    ('checkpoint.pt', 3, 2)
"""

from __future__ import annotations

import errno
import os
import pickle
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..files import sync_dir, synced

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
_TMP_SUFFIX = ".tmp"
_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read; the message names the file, what is wrong
    with it and what to do.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / CHECKPOINT_NAME
        >>> _ = path.write_bytes(b"")
        >>> try:
        ...     load_checkpoint(path)
        ... except CheckpointError as e:
        ...     print(str(e).split(": ", 1)[1])
        the file is empty (0 bytes): resume from another checkpoint or start afresh
    """


class NoCheckpointError(CheckpointError, FileNotFoundError):
    """``trainer.resume`` names a place that holds no checkpoint (a config error: the command
    line exits 2).

    Example:
        >>> import tempfile
        >>> try:
        ...     find_checkpoint(tempfile.mkdtemp(), None)
        ... except NoCheckpointError as e:
        ...     print(str(e).split(" at ")[0])
        trainer.resume: no checkpoint
    """


class CheckpointWarning(UserWarning):
    """The newest checkpoint was unreadable and the previous one is used instead."""


# --------------------------------------------------------------------------- writing
def save_atomic(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """``torch.save`` to ``path + ".tmp"`` then rename it to ``path`` (one file, no rotation).

    Raises:
        CheckpointError: the disk refused the write (full, read-only): names the path and the
            remedy; ``path`` itself is left as it was.

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_atomic({"step": 3, "w": torch.ones(2)}, Path(d) / CHECKPOINT_NAME)
        ...     print(sorted(p.name for p in Path(d).iterdir()))
        ['checkpoint.pt']
    """
    path = Path(path)
    _write_tmp(state, path)
    try:
        os.replace(_tmp(path), path)
    except OSError as e:
        raise _write_error(path, e) from e
    sync_dir(path.parent)


def write_checkpoint(state: dict[str, Any], run_dir: str | os.PathLike[str]) -> Path:
    """Write ``run_dir/checkpoint.pt``, keeping the one it replaces as ``checkpoint.prev.pt``.

    Raises:
        CheckpointError: as :func:`save_atomic`; both earlier checkpoints are then intact.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_checkpoint({"step": 1}, d)
        ...     print(write_checkpoint({"step": 2}, d).name, load_checkpoint(
        ...         Path(d) / PREVIOUS_NAME)["step"])
        checkpoint.pt 1
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    _write_tmp(state, path)
    try:
        # A cut-short checkpoint.pt (no zip directory: the one a resume fell back from) is
        # overwritten rather than allowed to push the good checkpoint.prev.pt out.
        if zipfile.is_zipfile(path):
            # From here until the next rename, checkpoint.prev.pt is the readable one.
            os.replace(path, _previous(path))
        os.replace(_tmp(path), path)
    except OSError as e:
        raise _write_error(path, e) from e
    sync_dir(path.parent)
    return path


def ensure_writable(run_dir: str | os.PathLike[str]) -> None:
    """Create ``run_dir`` and write (then remove) a probe file there, so that a directory
    that cannot take checkpoints is named before any training rather than at the first save.

    Raises:
        CheckpointError: naming the directory, why, and the remedy.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "run"
        >>> ensure_writable(d)
        >>> d.is_dir(), list(d.iterdir())
        (True, [])
    """
    directory = Path(run_dir)
    probe = directory / ".write-probe"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise _write_error(directory / CHECKPOINT_NAME, e) from e


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + _TMP_SUFFIX)


def _write_tmp(state: dict[str, Any], path: Path) -> None:
    """The state in ``path.tmp``, on the disk (flushed and fsynced) before any rename."""
    try:
        with synced(_tmp(path), "wb") as f:    # a failed write removes the partial .tmp
            torch.save(state, f)
    except OSError as e:
        raise _write_error(path, e) from e


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:      # e.g. a directory that cannot be searched
        return False


def _write_error(path: Path, err: OSError) -> CheckpointError:
    """What went wrong writing ``path``, what to do, and which checkpoint is still there."""
    directory = path.parent
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        remedy = f"free space on the disk that holds {directory} (or raise the quota)"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        remedy = (f"make {directory} writable (e.g. chmod u+w), or copy the run directory to a "
                  "writable place and resume there with trainer.resume=<copy>")
    elif err.errno in (errno.ENOTDIR, errno.EEXIST):
        remedy = f"a file stands where a directory of {directory} should be: move it or " \
                 "choose another run_dir"
    else:
        remedy = f"check the disk that holds {directory}"
    kept = [p.name for p in (path, _previous(path)) if _is_file(p)]
    after = (f"the earlier checkpoint ({', '.join(kept)}) is intact: after the fix, resume with "
             f"trainer.resume={directory}" if kept else
             "no earlier checkpoint exists there: after the fix, start the run again (or give "
             "it another run_dir)")
    reason = err.strerror or str(err)
    return CheckpointError(f"cannot write the checkpoint {path}: {reason}; {remedy}. {after}")


# --------------------------------------------------------------------------- reading
def find_checkpoint(resume: bool | str, run_dir: Path | None) -> Path | None:
    """The checkpoint ``trainer.resume`` points at: ``true`` → the run directory's; a path →
    that file, or the ``checkpoint.pt`` in that directory; ``false`` → ``None``. A directory
    whose ``checkpoint.pt`` is missing but whose ``checkpoint.prev.pt`` is there (a save cut
    between its two renames) gives its ``checkpoint.pt`` path: :func:`read_latest` falls back.

    Raises:
        NoCheckpointError: (a ``FileNotFoundError``) naming the path that holds no checkpoint.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_atomic({"step": 3}, Path(d) / CHECKPOINT_NAME)
        ...     print(find_checkpoint(True, Path(d)).name, find_checkpoint(False, Path(d)))
        checkpoint.pt None
    """
    if resume is False or resume is None:
        return None
    if resume is True:
        if run_dir is None:
            raise NoCheckpointError("trainer.resume=true needs a run directory (run_dir): "
                                    "give run_dir=<the run's directory>, or "
                                    "trainer.resume=<the run's directory>")
        path = run_dir / CHECKPOINT_NAME
    else:
        path = Path(str(resume))
        if path.is_dir():
            path = path / CHECKPOINT_NAME
    if not path.is_file() and not _previous(path).is_file():
        raise NoCheckpointError(f"trainer.resume: no checkpoint at {path} (nor "
                                f"{_previous(path).name}): give the directory of a run that "
                                f"wrote one (every trainer.checkpoint_every steps, at "
                                f"trainer.stop_after, on SIGINT/SIGTERM) or its checkpoint.pt")
    return path


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a checkpoint on the CPU (tensors and plain containers only).

    Raises:
        CheckpointError: the file is empty, truncated, damaged, not a checkpoint, or written
            by an incompatible version (the message says which).

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_atomic({"step": 3, "w": torch.ones(2)}, Path(d) / "c.pt")
        ...     state = load_checkpoint(Path(d) / "c.pt")
        >>> state["step"], state["w"].tolist()
        (3, [1.0, 1.0])
    """
    path = Path(path)
    problem = _archive_problem(path)
    if problem is not None:
        raise CheckpointError(f"{path} cannot be read: {problem}")
    try:
        with open(path, "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's own message suggests loading untrusted code: not repeated here
        raise CheckpointError(
            f"{path} cannot be read: it holds objects beyond tensors and plain containers, so "
            "it was written by an incompatible version of fairgames or by another program; "
            "resume it with the fairgames version that wrote it, or start the run afresh") from e
    except Exception as e:   # noqa: BLE001 (torch raises many kinds on a bad archive)
        raise CheckpointError(f"{path} cannot be read: the archive is damaged ({type(e).__name__})"
                              "; resume from another checkpoint or start the run afresh") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} is not a checkpoint: it holds a {type(state).__name__}, "
                              "not a dict")
    return state


def read_latest(path: str | os.PathLike[str],
                check: Callable[[Path, dict[str, Any]], None] | None = None
                ) -> tuple[Path, dict[str, Any]]:
    """Load ``path`` (a ``checkpoint.pt``), or its ``checkpoint.prev.pt`` if it is missing or
    unreadable, with a :class:`CheckpointWarning` naming both files. ``check(path, state)`` may
    raise :class:`CheckpointError` for a readable file that this run cannot use (it then falls
    back too).

    Raises:
        CheckpointError: neither file can be used (both reasons are given).

    Example:
        >>> import tempfile, warnings
        >>> d = Path(tempfile.mkdtemp())
        >>> for step in (1, 2):
        ...     _ = write_checkpoint({"step": step}, d)
        >>> _ = (d / CHECKPOINT_NAME).write_bytes(b"cut")
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     path, state = read_latest(d / CHECKPOINT_NAME)
        >>> path.name, state["step"], caught[0].category.__name__
        ('checkpoint.prev.pt', 1, 'CheckpointWarning')
    """
    path = Path(path)
    try:
        return path, _read_checked(path, check)
    except CheckpointError as e:
        previous = _previous(path)
        if path.name != CHECKPOINT_NAME or not previous.is_file():
            raise
        newest = e
    try:
        state = _read_checked(previous, check)
    except CheckpointError as e:
        raise CheckpointError(f"no usable checkpoint: {newest}; and {e}") from e
    warnings.warn(f"{newest}. Resuming from the previous checkpoint {previous} instead (steps "
                  f"since it are trained again)", CheckpointWarning, stacklevel=2)
    return previous, state


def _read_checked(path: Path, check: Callable[[Path, dict[str, Any]], None] | None
                  ) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing (a save was cut between its two renames)")
    state = load_checkpoint(path)
    if check is not None:
        check(path, state)
    return state


def _previous(path: Path) -> Path:
    return path.with_name(PREVIOUS_NAME)


def _archive_problem(path: Path) -> str | None:
    """What is wrong with ``path`` as a PyTorch zip archive (``None``: nothing found)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(len(_ZIP_MAGIC))
    except OSError as e:
        return f"{e.strerror or e}; check the path and its permissions"
    if size == 0:
        return "the file is empty (0 bytes): resume from another checkpoint or start afresh"
    if head != _ZIP_MAGIC:
        return ("it is not a checkpoint (not a PyTorch zip archive); point trainer.resume at a "
                "run directory or at its checkpoint.pt")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        return (f"the file is truncated ({size} bytes, its zip directory is missing), e.g. a "
                "copy cut short or a full disk: resume from another checkpoint or start the run "
                "afresh")
    if bad is not None:
        return (f"the file is damaged (its record {bad!r} fails its checksum): resume from "
                "another checkpoint or start the run afresh")
    return None
