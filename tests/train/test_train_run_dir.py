"""The run directory and its files (issues 54 and 55): every file of a run written whole or
not at all; a disk that refuses a write named with the file, the OS reason and the remedy;
``run_dir`` naming a file refused in words."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fairgames.train.files as files
from fairgames.train import run
from fairgames.train.files import OutputError
from fairgames.train.run_dir import LOCK_NAME, RunDirError, claim

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["trainer=smoke", "trainer.steps=6", "trainer.log_every=3", "trainer.bootstrap=0",
         "trainer.checkpoint_every=0"]


def _table(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(0)
    g = rng.choice(["a", "b"], n)
    x = rng.normal(size=n) + (g == "a")
    pd.DataFrame({"x": x, "g": g, "y": (x + rng.normal(size=n) > 0.5).astype(int)}).to_csv(
        path, index=False)
    return path


def _table_args(tmp_path: Path) -> list[str]:
    return ["data=table", f"data.path={_table(tmp_path / 't.csv')}", "data.target=y",
            "data.protected=g", "problem=demographic_parity", *SHORT]


def _refuse(monkeypatch: pytest.MonkeyPatch, name: str, code: int) -> None:
    """Make the atomic write of the file ``name`` fail as a full (or read-only) disk does:
    after some bytes went out."""
    real = files.synced

    def refusing(tmp: Path, mode: str = "w", **kw):
        if tmp.name.startswith(f".{name}."):
            raise OSError(code, os.strerror(code))
        return real(tmp, mode, **kw)

    monkeypatch.setattr(files, "synced", refusing)


# --------------------------------------------------------------------------- atomic writes
def test_an_atomic_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    files.write_json({"old": 1}, path)
    with pytest.raises(ZeroDivisionError), files.atomic_file(path) as f:
        f.write('{"new": ')
        _ = 1 / 0
    assert path.read_text() == '{\n  "old": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.parametrize("name", ["preprocess.json", "results.json", "groups.csv",
                                  "dynamics.png"])
def test_a_full_disk_names_the_file_the_reason_and_the_remedy(compose_cfg, tmp_path,
                                                             monkeypatch, name):
    # issue 55: raw OSError tracebacks from each of these writes
    _refuse(monkeypatch, name, errno.ENOSPC)
    with pytest.raises(OutputError) as info:
        run(compose_cfg(*_table_args(tmp_path), "trainer.plots=true"), run_dir=tmp_path / "r")
    message = str(info.value)
    assert f"cannot write {tmp_path / 'r' / name}" in message
    assert os.strerror(errno.ENOSPC) in message and "free space" in message
    assert "run_dir=" in message
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "r").iterdir())


def _train(*args: str, cwd: Path, refuse: str | None = None) -> subprocess.CompletedProcess:
    """scripts/train.py in a fresh process; ``refuse``: the file whose write the disk refuses
    (read-only file system)."""
    prelude = ""
    if refuse is not None:
        prelude = (
            "import errno, os, fairgames.train.files as f\n"
            "real = f.synced\n"
            "def refusing(tmp, mode='w', **kw):\n"
            f"    if tmp.name.startswith('.{refuse}.'):\n"
            "        raise OSError(errno.EROFS, os.strerror(errno.EROFS))\n"
            "    return real(tmp, mode, **kw)\n"
            "f.synced = refusing\n")
    code = (prelude + "import runpy, sys\n"
            f"sys.argv = ['scripts/train.py', *{list(args)!r}]\n"
            f"runpy.run_path({str(ROOT / 'scripts' / 'train.py')!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def test_train_py_reports_a_refused_write_in_one_message(tmp_path):
    run_dir = tmp_path / "r"
    out = _train("data=synthetic", "data.n=600", *SHORT, f"run_dir={run_dir}", cwd=ROOT,
                 refuse="results.json")
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert f"error: cannot write {run_dir / 'results.json'}: Read-only file system" in out.stderr
    assert "writable" in out.stderr and "run_dir=" in out.stderr


def test_a_run_dir_that_is_a_file_is_refused_in_words(tmp_path):
    # issue 55: Hydra's FileExistsError traceback
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    out = _train("data=synthetic", "data.n=600", *SHORT, f"run_dir={blocker}", cwd=ROOT)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "FileExistsError" not in out.stderr
    assert f"run_dir={blocker} names a file" in out.stderr
    assert blocker.read_text() == "not a directory"


# --------------------------------------------------------------------------- who may write
FAST = ["data=synthetic", "data.n=600", *SHORT]


def test_a_finished_run_is_not_overwritten_unless_asked(compose_cfg, tmp_path):
    # issue 54: a new run in a finished run's directory replaced it with no warning
    run_dir = tmp_path / "r"
    run(compose_cfg(*FAST), run_dir=run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(RunDirError) as info:
        run(compose_cfg(*FAST, "seed=1"), run_dir=run_dir)
    message = str(info.value)
    assert f"run_dir {run_dir} holds a finished run (results.json)" in message
    assert "overwrite=true" in message and f"trainer.resume={run_dir}" in message
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    again = run(compose_cfg(*FAST, "seed=1", "overwrite=true"), run_dir=run_dir)
    assert json.loads((run_dir / "results.json").read_text())["config"]["seed"] == 1
    assert again.results is not None and not (run_dir / LOCK_NAME).exists()


def test_fit_takes_the_same_policy(tmp_path):
    import torch

    from fairgames.data import make_synthetic
    from fairgames.train import fit

    splits = make_synthetic(n=300, d=3, seed=0)
    kwargs = {"protected": "group", "trainer": {"steps": 4, "bootstrap": 0, "plots": False},
              "run_dir": tmp_path}
    fit(torch.nn.Linear(3, 1), "error", splits, **kwargs)
    with pytest.raises(RunDirError, match="holds a finished run"):
        fit(torch.nn.Linear(3, 1), "error", splits, **kwargs)
    fit(torch.nn.Linear(3, 1), "error", splits, overwrite=True, **kwargs)


def test_another_configs_checkpoint_is_refused_and_the_runs_own_resumes(compose_cfg, tmp_path):
    # issue 54: a new run killed in an old run's directory was then "resumed" as the old run
    run_dir = tmp_path / "r"
    stop = ["trainer.steps=12", "trainer.checkpoint_every=4", "trainer.stop_after=8"]
    assert run(compose_cfg(*FAST, *stop), run_dir=run_dir).stopped
    with pytest.raises(RunDirError, match=r"a checkpoint of another config \(checkpoint.pt: "
                                          r"seed: 0 -> 1\)"):
        run(compose_cfg(*FAST, *stop, "seed=1"), run_dir=run_dir)
    # the same config started afresh may replace its own checkpoint; a resume continues it
    assert run(compose_cfg(*FAST, *stop), run_dir=run_dir).stopped
    done = run(compose_cfg(*FAST, *stop[:2], f"trainer.resume={run_dir}"), run_dir=run_dir,
               overrides=[f"trainer.resume={run_dir}"])
    assert done.results["training"]["steps"] == 12


def test_hydras_own_files_do_not_count(compose_cfg, tmp_path):
    run_dir = tmp_path / "r"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run_dir / "train.log").write_text("a log\n")
    assert run(compose_cfg(*FAST), run_dir=run_dir).results is not None


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


@pytest.mark.parametrize("who", ["live", "dead", "other_host"])
def test_the_lock(tmp_path, who):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    lock = run_dir / LOCK_NAME
    proc = _sleeper()
    try:
        if who == "dead":
            proc.kill()
            proc.wait()
        host = "elsewhere.example" if who == "other_host" else socket.gethostname()
        lock.write_text(json.dumps({"host": host, "pid": proc.pid}))
        if who == "dead":               # a dead run's lock on this host is taken over
            with claim(run_dir):
                assert json.loads(lock.read_text())["pid"] == os.getpid()
            assert not lock.exists()
            return
        with pytest.raises(RunDirError) as info, claim(run_dir):
            pass
        message = str(info.value)
        assert f"host {host}, pid {proc.pid}" in message and f"remove {lock}" in message
        assert json.loads(lock.read_text())["pid"] == proc.pid     # left to its holder
    finally:
        proc.kill()
        proc.wait()


def test_two_runs_on_one_run_dir_the_second_is_refused(compose_cfg, tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    proc = _sleeper()           # stands for a run in progress: its lock, its live process
    try:
        (run_dir / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(),
                                                     "pid": proc.pid}))
        with pytest.raises(RunDirError, match="is being written by another run"):
            run(compose_cfg(*FAST), run_dir=run_dir)
        assert not (run_dir / "run.json").exists()
    finally:
        proc.kill()
        proc.wait()


def test_train_py_refuses_a_finished_run_and_keeps_its_hydra_record(tmp_path):
    run_dir = tmp_path / "r"
    first = _train(*FAST, f"run_dir={run_dir}", cwd=ROOT)
    assert first.returncode == 0, first.stderr[-3000:]
    record = (run_dir / ".hydra" / "config.yaml").read_text()
    second = _train(*FAST, "seed=1", f"run_dir={run_dir}", cwd=ROOT)
    assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert "holds a finished run (results.json)" in second.stderr
    assert (run_dir / ".hydra" / "config.yaml").read_text() == record


def test_a_multirun_sharing_one_run_dir_is_refused(tmp_path):
    # issue 54: -m problem.tolerance=0.01,0.1 run_dir=X made job 1 overwrite job 0
    run_dir = tmp_path / "r"
    out = _train("-m", *FAST, "seed=0,1", f"run_dir={run_dir}",
                 f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=ROOT)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "names one directory for every job of this multirun" in out.stderr
    assert "${hydra.job.num}" in out.stderr
    assert not (run_dir / "results.json").exists()


def test_a_taken_default_directory_gets_a_suffix(tmp_path):
    # Hydra's default directory has one-second resolution: a run started in the same second
    # as another (same problem and data) computes the same name; it gets <name>_2
    taken = tmp_path / "12-00-00_eo_synthetic"
    (taken / ".hydra").mkdir(parents=True)
    (taken / "train.log").write_text("the first run's log\n")
    out = _train(*FAST, f"hydra.run.dir=${{fairgames.fresh_dir:'{taken}'}}", cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    second = tmp_path / "12-00-00_eo_synthetic_2"
    assert (second / "results.json").is_file() and (second / ".hydra").is_dir()
    assert (taken / "train.log").read_text() == "the first run's log\n"
    assert list((taken / ".hydra").iterdir()) == []
