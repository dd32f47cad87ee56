"""Independent jobs on a Hydra launcher plugin: the reproduction scripts' cells, any batch.

:func:`launch` writes the jobs' payloads to a manifest and runs this module as a Hydra
multirun over the job indices (``index=range(0,n)``), so that the launcher a user picks —
``basic`` (one after the other), ``joblib`` (side by side on this machine), ``submitit_local``
or ``submitit_slurm`` (a cluster) — runs them, with Hydra's own sweep directory, logs and
launcher settings (``hydra.launcher.*``). Each job imports the task (``"module:function"`` or
``"path/to/file.py:function"``), calls it on its payload and writes the JSON-serialisable
return value to ``return.json`` in its own job directory; :func:`launch` reads them back in
order. No process pool or socket of our own: the launcher owns the processes.

A job on the joblib or submitit-local launcher runs with one torch thread (the jobs share the
machine's cores); on the basic or slurm launcher torch keeps its default (a slurm job's
threads follow its ``cpus_per_task``).

Example:
    >>> check_launcher("joblib")
    >>> launcher_overrides("joblib", jobs=2)
    ['hydra/launcher=joblib', 'hydra.launcher.n_jobs=2']
    >>> try:
    ...     check_launcher("parallel")
    ... except LauncherError as e:
    ...     print(str(e)[:46])
    unknown launcher 'parallel': choose one of bas
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
RETURN = "return.json"
JOBS_DIR = "jobs"
# launcher name -> the plugin package that provides it (None: Hydra's own) and its pip name
LAUNCHERS: dict[str, tuple[str | None, str | None]] = {
    "basic": (None, None),
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
}


class LauncherError(RuntimeError):
    """A launcher that is unknown or not installed, or a batch of jobs that failed."""


def check_launcher(name: str) -> None:
    """Refuse an unknown launcher, or one whose plugin is not installed (naming the package
    to install)."""
    if name not in LAUNCHERS:
        raise LauncherError(f"unknown launcher {name!r}: choose one of {', '.join(LAUNCHERS)}")
    module, package = LAUNCHERS[name]
    if module is not None and importlib.util.find_spec(module) is None:
        raise LauncherError(f"the {name} launcher is not installed: pip install {package} "
                            "(or pip install 'fairgames[test]', which includes it)")


INLINE = "inline"
"""The scripts' ``--launcher`` value that runs the jobs in the calling process (no launcher)."""


def add_launcher_arguments(parser: argparse.ArgumentParser, *, jobs: int = 1,
                           what: str = "cells", overrides: bool = True) -> None:
    """A reproduction script's launcher options: ``--launcher`` (:data:`INLINE` or one of
    :data:`LAUNCHERS`, default ``joblib``), ``--jobs`` (``what`` at a time) and, with
    ``overrides``, ``--launcher-override`` (repeatable Hydra overrides of the launcher).

    Example:
        >>> ap = argparse.ArgumentParser()
        >>> add_launcher_arguments(ap, jobs=2)
        >>> a = ap.parse_args(["--launcher-override", "hydra.launcher.partition=cpu"])
        >>> a.launcher, a.jobs, a.launcher_override
        ('joblib', 2, ['hydra.launcher.partition=cpu'])
    """
    parser.add_argument("--jobs", type=int, default=jobs, help=f"{what} at a time")
    parser.add_argument("--launcher", default="joblib", choices=(INLINE, *LAUNCHERS),
                        help=f"the Hydra launcher that runs the {what} ({INLINE}: this "
                             "process; fairgames.train.sweeps.launch)")
    if overrides:
        parser.add_argument("--launcher-override", action="append", default=[],
                            help="a Hydra override of the launcher, e.g. "
                                 "hydra.launcher.partition=cpu (repeatable)")


def launcher_overrides(name: str, jobs: int) -> list[str]:
    """Hydra overrides selecting launcher ``name`` with ``jobs`` jobs at a time (where the
    launcher has such a setting)."""
    out = [f"hydra/launcher={name}"]
    if name == "joblib":
        out.append(f"hydra.launcher.n_jobs={jobs}")
    elif name == "submitit_slurm":
        out.append(f"hydra.launcher.array_parallelism={jobs}")
    return out


def launch(task: str, payloads: Sequence[Any], work_dir: str | Path, launcher: str = "joblib",
           jobs: int = 1, overrides: Sequence[str] = ()) -> list[Any]:
    """Run ``task`` on every payload as one Hydra multirun and return its values, in order.

    Args:
        task: ``"package.module:function"`` or ``"path/to/file.py:function"``; the function
            takes one JSON-serialisable payload and returns a JSON-serialisable value.
        payloads: one per job.
        work_dir: the parent of this launch's own numbered directory (``0001/``, the next
            free number), which holds the manifest and Hydra's sweep (``jobs/<index>/``).
        launcher: ``basic``, ``joblib``, ``submitit_local`` or ``submitit_slurm``.
        jobs: jobs at a time (joblib's ``n_jobs``, slurm's ``array_parallelism``).
        overrides: more Hydra overrides (e.g. ``hydra.launcher.partition=cpu``).

    Raises:
        LauncherError: the launcher is unknown or not installed; the multirun failed (its
            exit status), or a job left no return value (naming its directory).
    """
    check_launcher(launcher)
    if not payloads:
        return []
    work_dir = _fresh_dir(Path(work_dir).resolve())
    manifest = work_dir / MANIFEST
    manifest.write_text(json.dumps({"task": task, "launcher": launcher,
                                    "payloads": list(payloads)}))
    sweep = work_dir / JOBS_DIR
    command = [sys.executable, "-m", "fairgames.train.sweeps.launch", "-m", f"manifest={manifest}",
               f"index=range(0,{len(payloads)})", f"hydra.sweep.dir={sweep}",
               "hydra.sweep.subdir=${hydra.job.num}", *launcher_overrides(launcher, jobs),
               *overrides]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise LauncherError(f"the {launcher} multirun failed (exit status {done.returncode}); "
                            f"its jobs are under {sweep}")
    return [_returned(sweep / str(i)) for i in range(len(payloads))]


def _fresh_dir(parent: Path) -> Path:
    """A new numbered directory under ``parent``: a launch never reads another's returns."""
    parent.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name) for p in parent.iterdir() if p.name.isdigit()]
    for number in range(max(taken, default=0) + 1, max(taken, default=0) + 1000):
        path = parent / f"{number:04d}"
        try:
            path.mkdir()
        except FileExistsError:            # another launch took it meanwhile
            continue
        return path
    raise LauncherError(f"no free launch directory under {parent}")


def _returned(job_dir: Path) -> Any:
    path = job_dir / RETURN
    if not path.is_file():
        raise LauncherError(f"job {job_dir} left no {RETURN}: see its log there")
    return json.loads(path.read_text())["value"]


def load_task(task: str) -> Callable[[Any], Any]:
    """The function named by ``task`` (``"module:function"`` or ``"file.py:function"``)."""
    where, _, name = task.rpartition(":")
    if not where or not name:
        raise LauncherError(f"task {task!r} is not 'module:function' or 'file.py:function'")
    if where.endswith(".py"):
        if not Path(where).is_file():
            raise LauncherError(f"task file {where} not found")
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        if spec is None or spec.loader is None:
            raise LauncherError(f"task file {where} cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(spec.name, module)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


@dataclass
class JobConfig:
    """One job of :func:`launch`'s multirun: the manifest and the job's index in it."""

    manifest: str = "???"
    index: int = "???"  # type: ignore[assignment]  (Hydra's MISSING)


def run_job(manifest: str | Path, index: int, job_dir: str | Path) -> Any:
    """Job ``index`` of ``manifest``: call its task and write ``return.json`` in ``job_dir``."""
    spec = json.loads(Path(manifest).read_text())
    value = _outside_hydra(load_task(spec["task"]), spec["payloads"][index])
    (Path(job_dir) / RETURN).write_text(json.dumps({"index": index, "value": value}))
    return value


def _outside_hydra(task: Callable[[Any], Any], payload: Any) -> Any:
    """``task(payload)`` as in a plain process: a task may compose configs with Hydra's
    ``initialize_config_dir`` (the engine's cells do), which refuses while the job's own
    Hydra is the global one; the job's is put back afterwards for Hydra's bookkeeping."""
    from hydra.core.global_hydra import GlobalHydra

    job_hydra = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        return task(payload)
    finally:
        GlobalHydra.instance().clear()
        if job_hydra is not None:
            GlobalHydra.instance().initialize(job_hydra)


def _main() -> None:
    import hydra
    from hydra.core.config_store import ConfigStore
    from hydra.core.hydra_config import HydraConfig

    from .tune import one_thread_per_job

    ConfigStore.instance().store(name="fairgames_launch_job", node=JobConfig)

    @hydra.main(config_path=None, config_name="fairgames_launch_job", version_base="1.3")
    def job(cfg: Any) -> None:
        hydra_cfg = HydraConfig.get()
        one_thread_per_job(hydra_cfg.get("launcher"))   # as scripts/train.py's jobs
        run_job(cfg.manifest, cfg.index, hydra_cfg.runtime.output_dir)

    job()


if __name__ == "__main__":
    _main()
