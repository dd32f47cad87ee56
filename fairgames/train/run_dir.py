"""The one place that decides whether a run may write a directory (issue 54): a run directory
holding a finished run (``results.json``) or a checkpoint of another config is refused unless
the run resumes it or says ``overwrite=true``; Hydra's own files (``.hydra/``, ``*.log``) do
not count; a lock file (created with ``O_EXCL``, naming its host and process) keeps two runs
from writing one directory at once. :func:`fairgames.train.run`, :func:`~fairgames.train.fit`
and ``scripts/train.py`` all go through :func:`claim`.

A lock left by a run that died is stale when it names this host and a process that no longer
exists, and is then taken over; a lock of another host (a shared file system) cannot be
checked from here and is refused with the host, the process and how to remove it.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> with claim(d):
    ...     print(sorted(p.name for p in d.iterdir()))
    ['.fairgames.lock']
    >>> list(d.iterdir())
    []
    >>> _ = (d / "results.json").write_text("{}")
    >>> try:
    ...     check_free(d, overwrite=False, resuming=False)
    ... except RunDirError as e:
    ...     print(str(e).split(":")[0])
    run_dir ... holds a finished run (results.json)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .config.errors import ConfigError
from .config.resume import is_multirun, last_value

LOCK_NAME = ".fairgames.lock"
RESULTS_NAME = "results.json"
CHECKPOINT_NAMES = ("checkpoint.pt", "checkpoint.prev.pt")
# A lock file still empty this long after it was made was left by a run that died taking it.
_EMPTY_LOCK_S = 60.0


class RunDirError(ConfigError):
    """A run directory this run may not write: a file stands there, it holds another run
    (resume it, choose another ``run_dir`` or say ``overwrite=true``), another run is writing
    it (its lock), or the jobs of a multirun share it. ``scripts/train.py`` exits with 2."""


def refuse_file(run_dir: str | os.PathLike[str]) -> None:
    """Refuse a ``run_dir`` that names a file, or lies under one.

    Example:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "f"
        >>> _ = f.write_text("")
        >>> try:
        ...     refuse_file(f / "run")
        ... except RunDirError as e:
        ...     print("which is a file" in str(e))
        True
    """
    path = Path(run_dir)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            what = ("names a file, not a directory" if p == path else
                    f"lies under {p}, which is a file")
            raise RunDirError(f"run_dir={path} {what}: move the file away or choose another "
                              "run_dir")


def occupant(run_dir: Path, differs: Callable[[Mapping[str, Any]], list[str]] | None = None,
             finished: str = RESULTS_NAME) -> str | None:
    """What a new run in ``run_dir`` would overwrite: a finished run, or a checkpoint (of
    another config, when ``differs(stored_config)`` lists the differences; any checkpoint
    without it); ``None`` when there is nothing (Hydra's ``.hydra/`` and logs do not count).

    Example:
        >>> import tempfile
        >>> occupant(Path(tempfile.mkdtemp())) is None
        True
    """
    if (run_dir / finished).is_file():     # a filter run's is metrics.json (scripts/filter.py)
        return f"a finished run ({finished})"
    found = [run_dir / n for n in CHECKPOINT_NAMES if (run_dir / n).is_file()]
    if not found:
        return None
    if differs is None:
        return f"a checkpoint ({found[0].name})"
    from .loop.checkpoint import CheckpointError, load_checkpoint

    try:
        stored = load_checkpoint(found[0])["run"]["config"]
    except (CheckpointError, KeyError, TypeError):
        return f"a checkpoint that cannot be read ({found[0].name})"
    diffs = differs(stored)
    if not diffs:
        return None       # the same run started afresh: its own checkpoint may be replaced
    shown = "; ".join(diffs[:3]) + ("; ..." if len(diffs) > 3 else "")
    return f"a checkpoint of another config ({found[0].name}: {shown})"


def check_free(run_dir: Path, *, overwrite: bool, resuming: bool,
               differs: Callable[[Mapping[str, Any]], list[str]] | None = None,
               finished: str = RESULTS_NAME, resumable: bool = True) -> None:
    """Refuse ``run_dir`` when it holds another run (:func:`occupant`; ``finished``: the file a
    finished run leaves), unless the run resumes or ``overwrite``; ``resumable``: whether the
    message offers to resume (a filter run does not resume)."""
    if overwrite or resuming:
        return
    what = occupant(run_dir, differs, finished)
    if what is None:
        return
    if resumable:
        raise RunDirError(
            f"run_dir {run_dir} holds {what}: a new run would overwrite it. Resume it "
            f"(trainer.resume={run_dir}), choose another run_dir, or say overwrite=true "
            "(fit(..., overwrite=True) in Python) to replace it")
    raise RunDirError(f"run_dir {run_dir} holds {what}: a new run would overwrite it. Choose "
                      "another run_dir, or say overwrite=true to replace it")


# --------------------------------------------------------------------------- the lock
def _holder(path: Path) -> dict[str, Any] | None:
    """The lock's record, ``None`` while it is unreadable (being written, or damaged)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:               # another user's live process (PermissionError), or unknown
        return True
    return True


def _stale(path: Path, holder: dict[str, Any] | None) -> bool:
    """A lock nobody holds: this host's, of a process that is gone; or empty for long."""
    if holder is None:
        try:
            return time.time() - path.stat().st_mtime > _EMPTY_LOCK_S
        except OSError:
            return True           # removed meanwhile: take it
    if holder.get("host") != socket.gethostname():
        return False              # cannot be checked from here
    pid = holder.get("pid")
    return not isinstance(pid, int) or not _alive(pid)


def _held_error(run_dir: Path, path: Path, holder: dict[str, Any] | None) -> RunDirError:
    host, pid = (holder or {}).get("host", "?"), (holder or {}).get("pid", "?")
    here = host == socket.gethostname()
    check = (f"process {pid} on this host is alive" if here else
             f"this host cannot tell whether process {pid} on {host} still runs")
    return RunDirError(
        f"run_dir {run_dir} is being written by another run (lock {path}: host {host}, pid "
        f"{pid}; {check}): wait for it to end or choose another run_dir; if no run uses the "
        f"directory any more, remove {path}")


def acquire(run_dir: Path) -> Path:
    """Take ``run_dir``'s lock (made if needed), taking over a stale one; its path.

    Raises:
        RunDirError: another live run holds it (named with its host and pid).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                         "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if not _stale(path, holder):
                raise _held_error(run_dir, path, holder) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()     # a dead run's: taken over (O_EXCL decides any race)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(record + "\n")
        return path
    raise _held_error(run_dir, path, _holder(path))


def release(path: Path) -> None:
    """Remove the lock at ``path`` if it is still this process's."""
    holder = _holder(path)
    if holder is not None and holder.get("pid") == os.getpid() and \
            holder.get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def claim(run_dir: str | os.PathLike[str] | None) -> Iterator[None]:
    """Hold ``run_dir``'s lock for the ``with`` block (nothing for ``None``); a directory that
    cannot be made or written (a file in the way, a read-only disk) is named first
    (:class:`~fairgames.train.loop.checkpoint.CheckpointError`)."""
    if run_dir is None:
        yield
        return
    from .loop.checkpoint import ensure_writable

    ensure_writable(run_dir)
    path = acquire(Path(run_dir))
    try:
        yield
    finally:
        release(path)


def refuse_shared_multirun(run_dir: str | None, raw_run_dir: str | None, multirun: bool) -> None:
    """Refuse a multirun whose jobs all name the same ``run_dir`` (job 1 would overwrite job
    0): ``raw_run_dir`` is the config's value before interpolation.

    Example:
        >>> refuse_shared_multirun("runs/a/0", "runs/a/${hydra.job.num}", True)
        >>> try:
        ...     refuse_shared_multirun("runs/a", "runs/a", True)
        ... except RunDirError as e:
        ...     print(str(e).split(":")[0])
        run_dir=runs/a names one directory for every job of this multirun
    """
    if not multirun or run_dir is None or (raw_run_dir is not None and "${" in raw_run_dir):
        return
    raise RunDirError(
        f"run_dir={run_dir} names one directory for every job of this multirun: job 1 would "
        f"overwrite job 0. Give each job its own, run_dir={run_dir}/${{hydra.job.num}}, or "
        "leave run_dir unset (each job then writes multirun/<date>/<time>/<job number>)")


def hydra_args(argv: list[str]) -> list[str]:
    """The command line of ``scripts/train.py``, checked and completed before Hydra makes the
    run directory: ``run_dir=`` naming a file is refused here (Hydra's own error is a
    ``FileExistsError`` traceback); a ``run_dir`` that holds another run, not resumed nor
    ``overwrite=true``, gets ``hydra.output_subdir=null``, so that Hydra's record of the new
    command does not replace the old run's ``.hydra/`` before :func:`check_free` decides.

    Raises:
        RunDirError: ``run_dir`` names a file, or lies under one.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = (Path(d) / "results.json").write_text("{}")
        >>> hydra_args([f"run_dir={d}"])[1:]
        ['hydra.output_subdir=null']
        >>> hydra_args([f"run_dir={d}", "overwrite=true"])[2:]
        []
    """
    args = list(argv)
    if is_multirun(args):
        return args
    run_dir = last_value(args, "run_dir")
    if run_dir in (None, "", "null", "None") or "${" in run_dir:
        return args
    refuse_file(run_dir)
    resume = last_value(args, "trainer.resume")
    kept = (last_value(args, "overwrite") or "false").lower() != "true" and \
        (resume or "false").lower() == "false"
    if kept and occupant(Path(run_dir)) is not None and \
            last_value(args, "hydra.output_subdir") is None:
        args.append("hydra.output_subdir=null")
    return args


# --------------------------------------------------------------------------- Hydra's default
def fresh_dir(path: str) -> str:
    """The first of ``path``, ``path_2``, ``path_3``, ... that does not exist, made here
    (``mkdir`` is atomic: of two runs that start in the same second, and so compute the same
    default directory from Hydra's one-second ``${now:...}``, the second gets ``_2``). The
    resolver ``${fairgames.fresh_dir:...}`` of ``configs/train.yaml``'s ``hydra.run.dir``;
    registered cached, so that it gives one answer per run however often Hydra resolves it.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "12-00-00_eo_adult"
        >>> [Path(fresh_dir(str(d))).name for _ in range(3)]
        ['12-00-00_eo_adult', '12-00-00_eo_adult_2', '12-00-00_eo_adult_3']
    """
    for n in range(1, 10_000):
        candidate = path if n == 1 else f"{path}_{n}"
        try:
            Path(candidate).parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(candidate)
        except FileExistsError:
            continue
        except OSError:
            return candidate       # cannot make it here: Hydra names the problem itself
        return candidate
    return path


def _register_resolver() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("fairgames.fresh_dir"):
        OmegaConf.register_new_resolver("fairgames.fresh_dir", fresh_dir, use_cache=True)


_register_resolver()
