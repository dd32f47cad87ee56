"""Checkpoints that survive faults: the newest two kept, a fallback to the older with a warning,
clear errors for corrupt files and refused writes, a process killed (SIGKILL) while it writes a
checkpoint and then resumed, SIGINT / SIGTERM stopping at a step boundary with a checkpoint, and
a resume from a run directory that takes the stored config."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import fairgames.train.loop.checkpoint as ck
from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import error_rate, group, true_positive_rate
from fairgames.train import (
    CheckpointError,
    CheckpointSettings,
    CheckpointWarning,
    ConfigError,
    Engine,
    GameData,
    LogSettings,
    RunInterrupted,
    load_checkpoint,
)
from fairgames.train.config.resume import hydra_resume_args, resumed_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
# minibatches + an MLP with dropout (sampler and RNG state) + Adam, ratio slacks
COMMON = ["problem=fmeasure_parity", "model=mlp", "model.hidden=[16]", "model.dropout=0.2",
          "trainer.batch_size=256", "algorithm=algorithm3", "trainer.steps=60",
          "trainer.checkpoint_every=20", "trainer.log_every=5", "trainer.snapshot_every=3",
          "trainer.max_snapshots=8", "trainer.bootstrap=0"]
FAST = ["data=synthetic", "data.n=3000", "data.group_shift=1.5", "trainer=smoke",
        "trainer.log_every=25", "trainer.snapshot_every=10", "optimizer.lr=0.05"]


def _step(path: Path) -> int:
    return torch.load(path, weights_only=True)["engine"]["step"]


def _engine(run_dir: Path, steps: int, every: int) -> Engine:
    train = make_synthetic(n=300, d=3, seed=0).train
    tpr = lambda g: true_positive_rate(group("group", g))  # noqa: E731
    problem = Problem(error_rate(), [(tpr("1") >= tpr("0") - 0.1).named("eo")])
    model = torch.nn.Linear(3, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    return Engine(model, copt, GameData(train, "group"), steps=steps,
                  logging=LogSettings(every=5),
                  checkpoints=CheckpointSettings(every=every, run_dir=run_dir))


@pytest.fixture(scope="module")
def full(train_run):
    """The uninterrupted run every resumed one must end like."""
    return train_run("full", *COMMON)


# --------------------------------------------------------------------------- two kept
def test_the_newest_two_checkpoints_are_kept(tmp_path):
    engine = _engine(tmp_path, steps=15, every=5)
    engine.run()
    assert _step(tmp_path / "checkpoint.pt") == 15
    assert _step(tmp_path / "checkpoint.prev.pt") == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.prev.pt", "checkpoint.pt"]
    # a step already saved is not written again (it would push step 10 out)
    assert engine.save_checkpoint() == tmp_path / "checkpoint.pt"
    assert _step(tmp_path / "checkpoint.prev.pt") == 10


def test_an_unreadable_newest_falls_back_to_the_previous_one(train_run, full, tmp_path,
                                                              same_run):
    train_run("stopped", *COMMON, "trainer.stop_after=47", run_dir=tmp_path)
    assert _step(tmp_path / "checkpoint.pt") == 47 and _step(
        tmp_path / "checkpoint.prev.pt") == 40
    data = (tmp_path / "checkpoint.pt").read_bytes()
    (tmp_path / "checkpoint.pt").write_bytes(data[:len(data) // 2])    # a cut copy
    with pytest.warns(CheckpointWarning) as caught:
        resumed = train_run("resumed", *COMMON, "trainer.resume=true", run_dir=tmp_path)
    message = str(caught[0].message)
    assert str(tmp_path / "checkpoint.pt") in message and "truncated" in message
    assert str(tmp_path / "checkpoint.prev.pt") in message
    same_run(resumed, full)
    # the cut file was overwritten, not rotated over the good previous checkpoint
    assert _step(tmp_path / "checkpoint.prev.pt") == 40


def _checkpoint_bytes(state) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


GOOD = _checkpoint_bytes({"engine": {"format": 2}, "run": {}})


def _flipped(data: bytes) -> bytes:
    at = data.index(b"data.pkl") + 40      # inside the first record's bytes
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


@pytest.mark.parametrize(("content", "says"), [
    (b"", "empty"),
    (GOOD[:len(GOOD) // 2], "truncated"),
    (b"step,objective\n1,0.5\n", "not a checkpoint"),
    (_flipped(GOOD), "damaged"),
    (_checkpoint_bytes({"engine": {"format": 2}, "run": {}, "x": Path("a")}),
     "incompatible version"),
], ids=["empty", "truncated", "text", "damaged", "foreign-object"])
def test_a_corrupt_file_says_what_is_wrong(tmp_path, content, says):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert str(path) in message and says in message
    assert "weights_only" not in message


@pytest.mark.parametrize(("state", "says"), [
    ({"engine": {"format": 1}, "run": {"config": {}}}, "incompatible version"),
    ({"model": {}, "metadata": {}}, "not a run checkpoint"),
], ids=["old-format", "solution-file"])
def test_a_checkpoint_this_run_cannot_use_is_named(compose_cfg, tmp_path, state, says):
    from fairgames.train import run

    torch.save(state, tmp_path / "checkpoint.pt")
    cfg = compose_cfg(*FAST, "trainer.steps=4", f"trainer.resume={tmp_path}")
    with pytest.raises(CheckpointError, match=says) as info:
        run(cfg)
    assert str(tmp_path / "checkpoint.pt") in str(info.value)
    assert "weights_only" not in str(info.value)


def test_both_unreadable_names_both(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    (tmp_path / "checkpoint.prev.pt").write_bytes(GOOD[:100])
    with pytest.raises(CheckpointError) as info:
        ck.read_latest(tmp_path / "checkpoint.pt")
    message = str(info.value)
    assert "checkpoint.pt cannot be read: the file is empty" in message
    assert "checkpoint.prev.pt cannot be read: the file is truncated" in message


# --------------------------------------------------------------------------- refused writes
@pytest.mark.parametrize(("code", "remedy"), [
    (errno.ENOSPC, "free space on the disk"),
    (errno.EROFS, "writable"),
    (errno.EACCES, "writable"),
], ids=["full", "read-only-fs", "no-permission"])
def test_a_refused_write_is_clear_and_keeps_the_earlier_checkpoints(tmp_path, monkeypatch,
                                                                     code, remedy):
    engine = _engine(tmp_path, steps=10, every=5)
    engine.run()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_save = torch.save

    def refuse(obj, f):
        real_save(obj, f)     # the bytes are written, then the disk refuses (e.g. at flush)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(ck.torch, "save", refuse)
    engine.train_step()
    with pytest.raises(CheckpointError) as info:
        engine.save_checkpoint()
    message = str(info.value)
    assert str(tmp_path / "checkpoint.pt") in message and remedy in message
    assert os.strerror(code) in message
    assert f"trainer.resume={tmp_path}" in message
    # nothing changed on the disk, no temporary file left
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_run_directory_that_cannot_be_written_is_named_before_training(compose_cfg,
                                                                         tmp_path):
    from fairgames.train import run

    blocker = tmp_path / "taken"
    blocker.write_text("a file where the run directory's parent should be")
    with pytest.raises(CheckpointError) as info:
        run(compose_cfg(*FAST, "trainer.steps=4"), run_dir=blocker / "run")
    message = str(info.value)
    assert f"cannot write the checkpoint {blocker / 'run' / 'checkpoint.pt'}" in message
    assert "a file stands where a directory" in message and "another run_dir" in message


# --------------------------------------------------------------------------- SIGKILL
KILLED = textwrap.dedent("""
    import io, os, sys, time
    from pathlib import Path
    import torch
    from hydra import compose, initialize_config_dir
    import fairgames.train.loop.checkpoint as ck
    import fairgames.train.config  # noqa: F401
    from fairgames.train import run

    where, marker, run_dir, configs = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    saves = []
    real_save, real_replace = torch.save, os.replace

    def hang():
        marker.touch()
        time.sleep(600)

    class Torch:     # the checkpoint module's torch: its 3rd save stops halfway
        def __getattr__(self, name):
            return getattr(torch, name)

        def save(self, obj, f):
            saves.append(1)
            if where != "write" or len(saves) < 3:
                return real_save(obj, f)
            buf = io.BytesIO()
            real_save(obj, buf)
            f.write(buf.getvalue()[:len(buf.getvalue()) // 2])
            f.flush()
            hang()

    class Os:        # the checkpoint module's os: the 3rd save stops between its renames
        def __getattr__(self, name):
            return getattr(os, name)

        def replace(self, src, dst):
            if where == "rename" and len(saves) == 3 and str(src).endswith(".tmp"):
                hang()
            return real_replace(src, dst)

    ck.torch, ck.os = Torch(), Os()
    with initialize_config_dir(config_dir=configs, version_base="1.3"):
        cfg = compose("train", overrides=sys.argv[5:])
    run(cfg, run_dir=run_dir)
""")


@pytest.mark.parametrize("where", ["write", "rename"])
def test_a_process_killed_while_writing_a_checkpoint_resumes(train_run, full, tmp_path,
                                                             where, same_run):
    run_dir, marker = tmp_path / "run", tmp_path / "writing"
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    overrides = [*FAST, *COMMON]
    proc = subprocess.Popen([sys.executable, str(script), where, str(marker), str(run_dir),
                             str(CONFIGS), *overrides], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never reached its 3rd checkpoint"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    tmp = run_dir / "checkpoint.pt.tmp"
    if where == "write":       # cut mid-file: the two checkpoints before it are intact
        assert 0 < tmp.stat().st_size < (run_dir / "checkpoint.pt").stat().st_size * 0.75
        assert _step(run_dir / "checkpoint.pt") == 40
        assert _step(run_dir / "checkpoint.prev.pt") == 20
        resumed = train_run("resumed", *COMMON, "trainer.resume=true", run_dir=run_dir)
    else:                      # cut between the renames: the previous one is the newest
        assert not (run_dir / "checkpoint.pt").exists() and tmp.is_file()
        assert _step(run_dir / "checkpoint.prev.pt") == 40
        with pytest.warns(CheckpointWarning, match="checkpoint.pt is missing"):
            resumed = train_run("resumed", *COMMON, "trainer.resume=true", run_dir=run_dir)
    same_run(resumed, full)
    assert not tmp.exists()
    assert _step(run_dir / "checkpoint.pt") == 60


# --------------------------------------------------------------------------- stop_after
def test_stop_after_checkpoints_its_step_and_the_resume_ends_like_a_full_run(
        train_run, full, tmp_path, same_run):
    stopped = train_run("stopped", *COMMON, "trainer.stop_after=47", run_dir=tmp_path)
    assert stopped.stopped and stopped.results is None and stopped.engine.step == 47
    assert stopped.engine.last_checkpoint == tmp_path / "checkpoint.pt"
    assert _step(tmp_path / "checkpoint.pt") == 47
    assert _step(tmp_path / "checkpoint.prev.pt") == 40
    resumed = train_run("resumed", *COMMON, "trainer.resume=true", run_dir=tmp_path)
    same_run(resumed, full)


# --------------------------------------------------------------------------- signals
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_step_checkpoints_at_the_step_boundary(train_run, full, tmp_path,
                                                            monkeypatch, signum, status,
                                                            same_run):
    real_step = Engine.train_step

    def step(self):
        if self.step == 22:        # during step 23, before it is computed
            os.kill(os.getpid(), signum)
        real_step(self)

    monkeypatch.setattr(Engine, "train_step", step)
    before = signal.getsignal(signum)
    with pytest.raises(RunInterrupted) as info:
        train_run("signalled", *COMMON, run_dir=tmp_path)
    monkeypatch.undo()
    e = info.value
    assert signal.getsignal(signum) is before      # the handler is restored
    assert (e.signal_name, e.step, e.exit_status) == (signal.Signals(signum).name, 23, status)
    assert e.checkpoint == tmp_path / "checkpoint.pt" and _step(e.checkpoint) == 23
    assert _step(tmp_path / "checkpoint.prev.pt") == 20
    assert f"trainer.resume={tmp_path}" in str(e)
    assert not (tmp_path / "results.json").exists()
    resumed = train_run("resumed", *COMMON, "trainer.resume=true", run_dir=tmp_path)
    same_run(resumed, full)


def _script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(("signum", "status"), [
    (signal.SIGINT, 130),
    # the same path with another number (the in-process test covers SIGTERM's handling)
    pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)], ids=["SIGINT", "SIGTERM"])
def test_the_command_line_stops_on_a_signal_and_prints_how_to_resume(tmp_path, signum, status):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "train.py"), *FAST, "data.n=600",
         "trainer.steps=1000000",
         "trainer.checkpoint_every=20", "trainer.bootstrap=0", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "checkpoint.pt").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == status, err[-3000:]
    step = _step(run_dir / "checkpoint.pt")
    assert f"{signal.Signals(signum).name} at step {step}: checkpoint " \
           f"{run_dir / 'checkpoint.pt'} holds step {step}" in err
    assert f"resume with: python scripts/train.py trainer.resume={run_dir}" in err
    assert "Traceback" not in err
    # the printed command, extended to a few more steps, finishes the run
    out = _script(f"trainer.resume={run_dir}", f"trainer.steps={step + 5}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["training"]["steps"] == step + 5


# --------------------------------------------------------------------------- resume a dir
def test_resume_from_a_directory_takes_the_stored_config(train_run, compose_cfg, full,
                                                         tmp_path, same_run):
    from fairgames.train import run

    train_run("stopped", *COMMON, "trainer.stop_after=47", run_dir=tmp_path)
    given = [f"trainer.resume={tmp_path}"]
    resumed = run(compose_cfg(*given), overrides=given)    # the defaults: Adult, ...
    assert resumed.run_dir == tmp_path
    assert resumed.results["config"]["data"]["name"] == "synthetic"
    assert resumed.results["config"]["trainer"]["resume"] == str(tmp_path)
    same_run(resumed, full)


def test_resume_refuses_an_explicit_override_that_differs(train_run, compose_cfg, tmp_path):
    from fairgames.train import run

    train_run("stopped", *COMMON, "trainer.stop_after=30", run_dir=tmp_path)
    given = [f"trainer.resume={tmp_path}", "problem.tolerance=0.1", "trainer.log_every=5",
             "model.dropout=0.3"]
    with pytest.raises(ConfigError) as info:
        run(compose_cfg(*given), overrides=given)
    lines = str(info.value).splitlines()
    assert lines[1:] == ["  model.dropout: 0.2 -> 0.3", "  problem.tolerance: 0.02 -> 0.1"]
    assert "stored -> given" in lines[0]


def test_resume_may_extend_the_steps(train_run, compose_cfg, tmp_path):
    from fairgames.train import run

    train_run("stopped", *COMMON, "trainer.stop_after=30", run_dir=tmp_path)
    given = [f"trainer.resume={tmp_path}", "trainer.steps=70"]
    resumed = run(compose_cfg(*given), overrides=given)
    assert resumed.results["training"]["steps"] == 70 == resumed.engine.step


def test_resuming_with_the_same_command_line_is_no_change(train_run, compose_cfg, tmp_path):
    """A data group's nulls (protected, target: the recipe's) and the model's ``output: auto``
    are stored as resolved; the same command line given again changes nothing."""
    from fairgames.train import run

    same = ["data=german", "problem=equal_opportunity", "model=mlp", "model.hidden=[4]",
            "trainer=smoke", "trainer.steps=12", "trainer.checkpoint_every=4",
            "trainer.bootstrap=0"]
    train_run("german", *same, "trainer.stop_after=8", fast=False, run_dir=tmp_path)
    again = [*same, "trainer.stop_after=8", f"run_dir={tmp_path}", f"trainer.resume={tmp_path}"]
    resumed = run(compose_cfg(*again), overrides=again)     # refused before the fix
    assert resumed.stopped and resumed.engine.step == 8
    given = [*same, f"run_dir={tmp_path}", f"trainer.resume={tmp_path}"]
    resumed = run(compose_cfg(*given), overrides=given)
    assert resumed.results["training"]["steps"] == 12
    assert resumed.results["config"]["data"]["protected"] == "sex"


def test_a_given_null_or_auto_matches_what_the_run_resolved_it_to():
    stored = {"data": {"name": "german", "protected": "sex", "target": "good_credit"},
              "model": {"output": "unit"}}
    given = {"data": {"name": "german", "protected": None, "target": None},
             "model": {"output": "auto"}}
    merged = resumed_config(stored, given, ["data=german", "model=mlp"])
    assert merged["data"] == stored["data"] and merged["model"] == stored["model"]
    with pytest.raises(ConfigError, match=r"data.protected: 'sex' -> 'age'"):
        resumed_config(stored, {**given, "data": {**given["data"], "protected": "age"}},
                       ["data=german"])


def test_a_group_override_compares_the_keys_under_it():
    stored = {"problem": {"name": "eo", "tolerance": 0.1}, "trainer": {"steps": 40}}
    given = {"problem": {"name": "eo", "tolerance": 0.05}, "trainer": {"steps": 10}}
    with pytest.raises(ConfigError, match=r"problem.tolerance: 0.1 -> 0.05"):
        resumed_config(stored, given, ["problem=eo"])
    merged = resumed_config(stored, given, ["trainer=smoke"])
    assert merged["trainer"]["steps"] == 10 and merged["problem"]["tolerance"] == 0.1


def test_the_command_line_resumes_a_directory_and_keeps_its_record(full, tmp_path):
    run_dir = tmp_path / "run"
    first = _script(*FAST, *COMMON, "trainer.stop_after=30", f"hydra.run.dir={run_dir}",
                    cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    hint = next(line for line in first.stdout.splitlines() if line.startswith("stopped at"))
    assert hint == (f"stopped at step 30 (trainer.stop_after): checkpoint "
                    f"{run_dir / 'checkpoint.pt'}; resume with: python scripts/train.py "
                    f"trainer.resume={run_dir}")
    assert _step(run_dir / "checkpoint.pt") == 30
    record = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    command = hint.split("resume with: python scripts/train.py ")[1].split()
    second = _script(*command, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]     # no new run directory
    res = json.loads((run_dir / "results.json").read_text())
    assert res["solutions"] == json.loads(json.dumps(full.results["solutions"]))


def test_hydra_arguments_keep_a_resumed_record(tmp_path):
    assert hydra_resume_args([f"trainer.resume={tmp_path}", "trainer.steps=9"]) == [
        f"trainer.resume={tmp_path}", "trainer.steps=9", "hydra.output_subdir=null",
        f"hydra.run.dir={tmp_path}"]
    assert hydra_resume_args(["trainer.resume=true", "hydra.run.dir=x"]) == [
        "trainer.resume=true", "hydra.run.dir=x", "hydra.output_subdir=null"]
    assert hydra_resume_args(["trainer.resume=false"]) == ["trainer.resume=false"]
    assert hydra_resume_args(["-m", f"trainer.resume={tmp_path}"]) == [
        "-m", f"trainer.resume={tmp_path}"]



def test_a_checkpoint_from_before_later_keys_resumes_as_it_trained(train_run, compose_cfg,
                                                                    tmp_path, same_run):
    """A run stored before ``trainer.early_stop`` and ``model.sparse_inputs`` existed (its
    config lacks them) resumes from its directory, and ends like the uninterrupted run: the
    missing keys read as what the old run did (no early stop, the dense kernels)."""
    from fairgames.train import run

    linear = ["problem=equal_opportunity", "trainer.steps=60", "trainer.checkpoint_every=20",
              "trainer.log_every=5", "trainer.bootstrap=0"]
    full = train_run("full_linear", *linear)
    train_run("old", *linear, "trainer.stop_after=40", run_dir=tmp_path)
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        state = torch.load(tmp_path / name, weights_only=False)
        config = state["run"]["config"]
        del config["trainer"]["early_stop"], config["model"]["sparse_inputs"]
        torch.save(state, tmp_path / name)
    given = [f"trainer.resume={tmp_path}"]
    resumed = run(compose_cfg(*given), overrides=given)
    assert "sparse_inputs" not in resumed.results["config"]["model"]
    same_run(resumed, full)
