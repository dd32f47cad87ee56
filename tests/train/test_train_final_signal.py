"""SIGINT / SIGTERM after the last step, while the run evaluates its solutions and writes
its report (issue 55: SIGTERM there exited 143 with no output at all): the run stops at once
with a checkpoint at the last step and says how to finish it; resuming evaluates and reports
without training again."""

from __future__ import annotations

import importlib
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

from fairgames.train import RunInterrupted

# the modules (``fairgames.train.run`` the attribute is the function)
run_module = importlib.import_module("fairgames.train.run")
game_module = importlib.import_module("fairgames.train.game")

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["data=synthetic", "data.n=600", "trainer=smoke", "trainer.steps=30",
         "trainer.log_every=10", "trainer.snapshot_every=10", "trainer.bootstrap=0",
         "trainer.plots=false", "trainer.tensorboard=false"]


def _step(path: Path) -> int:
    return torch.load(path, weights_only=True)["engine"]["step"]


@pytest.mark.parametrize(("where", "every"), [("evaluate_run", 0), ("score_candidates", 10)],
                         ids=["solutions-no-checkpoints", "candidates"])
def test_a_signal_after_the_last_step_checkpoints_it_and_resuming_finishes(
        train_run, tmp_path, monkeypatch, where, every):
    module = run_module if where == "evaluate_run" else game_module
    real = getattr(module, where)

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)          # the handler runs between bytecodes; it must not get here
        return real(*args, **kwargs)

    monkeypatch.setattr(module, where, signalled)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted) as info:
        train_run("final", *SHORT, f"trainer.checkpoint_every={every}", fast=False,
                  run_dir=tmp_path)
    monkeypatch.undo()
    e = info.value
    assert signal.getsignal(signal.SIGTERM) is before          # the handler is restored
    assert (e.signal_name, e.step, e.exit_status) == ("SIGTERM", 30, 143)
    assert e.checkpoint == tmp_path / "checkpoint.pt" and _step(e.checkpoint) == 30
    assert "after the last step" in str(e) and f"trainer.resume={tmp_path}" in str(e)
    assert not (tmp_path / "results.json").exists()
    resumed = train_run("resumed", *SHORT, f"trainer.checkpoint_every={every}",
                        "trainer.resume=true", fast=False, run_dir=tmp_path)
    assert resumed.results["training"]["steps"] == 30
    assert (tmp_path / "results.json").exists()


@pytest.mark.slow      # two runs of the script: about 55 s on two shared cores
def test_the_command_line_prints_the_resume_line_on_sigterm_during_evaluation(tmp_path):
    """The script itself, its final evaluation slowed by a wrapper (tests only), SIGTERM
    sent from outside while it evaluates: exit 143, what was saved, and the resume line."""
    run_dir, started = tmp_path / "run", tmp_path / "evaluating"
    wrapper = tmp_path / "slow_train.py"
    wrapper.write_text(textwrap.dedent(f"""
        import importlib, runpy, sys, time
        from pathlib import Path
        r = importlib.import_module("fairgames.train.run")
        real = r.evaluate_run
        def slow(*args, **kwargs):
            Path({str(started)!r}).write_text("x")
            time.sleep(120)
            return real(*args, **kwargs)
        r.evaluate_run = slow
        sys.argv = [{str(ROOT / "scripts" / "train.py")!r}, *sys.argv[1:]]
        runpy.run_path(sys.argv[0], run_name="__main__")
    """))
    proc = subprocess.Popen([sys.executable, str(wrapper), *SHORT, "trainer.checkpoint_every=0",
                             f"hydra.run.dir={run_dir}"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    assert "interrupted: SIGTERM after the last step (30)" in err, err[-3000:]
    assert f"checkpoint {run_dir / 'checkpoint.pt'} holds step 30" in err
    assert f"resume with: python scripts/train.py trainer.resume={run_dir}" in err
    assert "Traceback" not in err
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"),
                          f"trainer.resume={run_dir}"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["training"]["steps"] == 30
