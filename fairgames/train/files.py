"""Writing a run's files so that none is ever lost or left half-written: each goes to a
temporary name in its own directory (flushed and fsynced), then is renamed over the final
name (``os.replace``, atomic on POSIX and Windows) and the directory entry is synced. A reader
therefore sees the old file or the complete new one, never a partial one; an input named as
the output is read to its end before it is replaced; a write that fails leaves the old file
as it was and removes its temporary file (a full disk gets its space back).

A write the disk refuses (full, read-only, a file where a directory should be) raises
:class:`OutputError`, whose message names the file, the operating system's reason and the
remedy. The checkpoint writer (:mod:`fairgames.train.loop.checkpoint`) uses the same core
(:func:`synced`, :func:`sync_dir`) with its own temporary name and rotation.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> write_json({"a": 1}, d / "r.json")
    >>> write_text(d / "note.txt", "hello\\n")
    >>> sorted(p.name for p in d.iterdir()), json.loads((d / "r.json").read_text())
    (['note.txt', 'r.json'], {'a': 1})
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

PathLike = str | os.PathLike[str]
# What a failed write of a run's file suggests besides fixing the disk.
RUN_ELSEWHERE = "or give the run another directory (run_dir=<a writable place>)"


class OutputError(RuntimeError):
    """A file that cannot be written; the message names the file, the operating system's
    reason and what to do (``scripts/train.py`` and ``scripts/predict.py`` exit with status 1).

    Example:
        >>> e = write_error(Path("/r/results.json"), OSError(errno.ENOSPC, "No space left"))
        >>> print(str(e).split("; ")[0])
        cannot write /r/results.json: No space left
    """


def write_error(path: Path, err: OSError, elsewhere: str = RUN_ELSEWHERE) -> OutputError:
    """The :class:`OutputError` for ``err`` raised while writing ``path``: the file, the OS
    reason, and the remedy (``elsewhere``: where else the output may go).

    Example:
        >>> e = write_error(Path("/r/x.csv"), OSError(errno.EROFS, "Read-only file system"))
        >>> "make /r writable" in str(e)
        True
    """
    directory = path.parent
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        remedy = f"free space on the disk that holds {directory} (or raise the quota)"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        remedy = f"make {directory} writable (e.g. chmod u+w)"
    elif err.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        remedy = f"a file or directory stands in the way of {path}: move it"
    else:
        remedy = f"check the disk that holds {directory}"
    reason = err.strerror or str(err)
    return OutputError(f"cannot write {path}: {reason}; {remedy}, {elsewhere}")


@contextlib.contextmanager
def synced(tmp: Path, mode: str = "w", **open_args: Any) -> Iterator[IO[Any]]:
    """Open ``tmp`` for writing, yield it, then flush and fsync it; on any error the partial
    ``tmp`` is removed and the error re-raised. The core of every atomic write here and of
    the checkpoints' (which rename ``tmp`` themselves)."""
    try:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, mode, **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)     # a full disk gets its space back
        raise


def sync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); a platform that cannot open a directory
    skips it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_name(path: Path) -> Path:
    """The temporary file a write of ``path`` goes through: hidden, in the same directory (a
    rename never crosses disks), named by the process (two writers never share one).

    Example:
        >>> temporary_name(Path("/r/results.json")).name == f".results.json.{os.getpid()}.tmp"
        True
    """
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_file(path: PathLike, mode: str = "w", *, elsewhere: str = RUN_ELSEWHERE,
                **open_args: Any) -> Iterator[IO[Any]]:
    """A file object whose content replaces ``path`` only once the ``with`` block completes;
    an exception inside it leaves ``path`` untouched and no temporary file.

    Raises:
        OutputError: the disk refused the write (:func:`write_error`).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "out.csv"
        >>> with atomic_file(p) as f:
        ...     _ = f.write("a,b\\n")
        >>> p.read_text()
        'a,b\\n'
    """
    path = Path(path)
    tmp = temporary_name(path)
    try:
        with synced(tmp, mode, **open_args) as f:
            yield f
        try:
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
    except OSError as e:
        raise write_error(path, e, elsewhere) from e
    sync_dir(path.parent)


def write_text(path: PathLike, text: str, *, elsewhere: str = RUN_ELSEWHERE) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_file`)."""
    with atomic_file(path, "w", elsewhere=elsewhere) as f:
        f.write(text)


def write_bytes(path: PathLike, data: bytes, *, elsewhere: str = RUN_ELSEWHERE) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_file`)."""
    with atomic_file(path, "wb", elsewhere=elsewhere) as f:
        f.write(data)


def write_json(obj: Any, path: PathLike, *, indent: int = 2,
               elsewhere: str = RUN_ELSEWHERE) -> None:
    """Write ``obj`` as indented JSON (no NaN or infinity: ``clean_numbers`` first) to
    ``path`` atomically. Note the argument order, ``(obj, path)``, as ``json.dump``'s."""
    write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n",
               elsewhere=elsewhere)


def save_torch(obj: Any, path: PathLike, *, elsewhere: str = RUN_ELSEWHERE) -> None:
    """``torch.save(obj)`` to ``path`` atomically."""
    import torch

    with atomic_file(path, "wb", elsewhere=elsewhere) as f:
        torch.save(obj, f)


def save_figure(fig: Any, path: PathLike, *, elsewhere: str = RUN_ELSEWHERE,
                **savefig: Any) -> None:
    """A matplotlib figure to ``path`` atomically (the format from ``path``'s suffix;
    ``savefig``: ``Figure.savefig``'s options, e.g. ``dpi``)."""
    path = Path(path)
    savefig.setdefault("format", path.suffix.lstrip(".") or None)
    with atomic_file(path, "wb", elsewhere=elsewhere) as f:
        fig.savefig(f, **savefig)
