"""``trainer.distributed=true``: scripts/train.py under torchrun (gloo, 2 CPU processes) is the
one-process run, with one run directory written by rank 0; and its bad inputs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from script_loader import load_script
from trees import leaves, numbers

from fairgames.train import ConfigError, run, validate

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ("data=synthetic", "data.n=600", "trainer=smoke", "trainer.steps=10",
             "trainer.batch_size=96", "trainer.bootstrap=0")


def _env() -> dict[str, str]:
    """This checkout first on the path, one torch thread per process, no torchrun variables."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def test_torchrun_with_two_ranks_is_the_one_process_run(tmp_path):
    env = _env()
    work = tmp_path / "ddp"
    work.mkdir()
    commands = {
        "ddp": ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                 "--standalone",
                 str(ROOT / "scripts" / "train.py"), *OVERRIDES, "trainer.distributed=true",
                 # a directory per rank, as Hydra's ${now} may give them
                 "hydra.run.dir=runs/rank${oc.env:RANK}"], work),
        "single": ([sys.executable, str(ROOT / "scripts" / "train.py"), *OVERRIDES,
                    f"run_dir={tmp_path / 'single'}"], tmp_path)}
    procs = {name: subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name, (command, cwd) in commands.items()}
    out = {name: p.communicate(timeout=300) for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, out[name][1][-3000:]
    # rank 0 chose the run directory and wrote it; rank 1 wrote nothing and printed nothing
    runs = list((work / "runs").iterdir())
    assert runs == [work / "runs" / "rank0"]
    assert sorted(p.name for p in work.iterdir()) == ["runs"]
    assert out["ddp"][0].count("recommended (") == 1
    ours = json.loads((runs[0] / "results.json").read_text())
    theirs = json.loads((tmp_path / "single" / "results.json").read_text())
    assert ours["training"]["steps"] == theirs["training"]["steps"] == 10
    mine, reference = numbers(ours["solutions"]), numbers(theirs["solutions"])
    assert mine.keys() == reference.keys() and len(mine) > 20
    for key, value in reference.items():
        assert math.isclose(mine[key], value, rel_tol=0, abs_tol=1e-5), key
    # the global minibatch of 96 rows was split 48 / 48 and the game saw all of it: θ and
    # the multipliers at the last step are the one-process run's
    ckpt_ours = torch.load(runs[0] / "checkpoint.pt", weights_only=False)["engine"]
    ckpt_theirs = torch.load(tmp_path / "single" / "checkpoint.pt", weights_only=False)["engine"]
    assert ckpt_ours["step"] == ckpt_theirs["step"] == 10
    for part in ("model", "game"):
        a, b = _tensors(ckpt_ours[part]), _tensors(ckpt_theirs[part])
        assert a.keys() == b.keys() and a
        for key in b:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


def _tensors(tree):
    """Every floating-point tensor of a checkpoint's state, by path."""
    return {k: v for k, v in leaves(tree).items()
            if isinstance(v, torch.Tensor) and v.is_floating_point()}


def test_distributed_without_torchrun_is_a_config_error(compose_cfg, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    cfg = compose_cfg(*OVERRIDES, "trainer.distributed=true")
    with pytest.raises(ConfigError, match="torchrun.*RANK"):
        run(cfg)


def test_nccl_without_gpus_is_a_config_error(compose_cfg, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = compose_cfg(*OVERRIDES, "trainer.distributed=true", "trainer.device=cuda")
    with pytest.raises(ConfigError, match="NCCL.*GPUs"):
        run(cfg)


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.tune=validation", "tuned run"),
    ("algorithm=reduction", "reduction"),
])
def test_what_a_distributed_run_cannot_play_is_refused(compose_cfg, override, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_cfg(*OVERRIDES, "trainer.distributed=true", override))


def test_the_ddp_example_on_two_ranks_is_its_one_process_run(capsys):
    # examples/custom_module_ddp.py: a plain `python` plays a group of one in this process
    example = load_script(ROOT / "examples" / "custom_module_ddp.py")
    alone = example.main(["--quick"])
    assert alone["world_size"] == 1 and alone["multipliers_agree"]
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert not torch.distributed.is_initialized()
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--standalone",
         str(ROOT / "examples" / "custom_module_ddp.py"), "--quick"],
        env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert launched.returncode == 0, launched.stderr[-3000:]
    # rank 0 alone prints; the 2-rank game's multipliers agree and its test metrics are the
    # one-process run's (to the printed 4 decimals)
    assert launched.stdout.strip().splitlines()[-1] == line.replace("1 rank(s)", "2 rank(s)")


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_every_rank_with_a_checkpoint_that_resumes(tmp_path):
    # torchrun forwards SIGTERM to both ranks: they stop at the same log step, rank 0 writes
    # the checkpoint, no rank waits in a collective; the run resumes on 2 ranks from there
    work = tmp_path
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--standalone",
                str(ROOT / "scripts" / "train.py")]
    run_dir = work / "runs" / "rank0"
    proc = subprocess.Popen([*torchrun, *OVERRIDES[:3], "trainer.steps=100000",
                             "trainer.log_every=10", "trainer.batch_size=96",
                             "trainer.distributed=true", "hydra.run.dir=runs/rank${oc.env:RANK}"],
                            cwd=work, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        log = run_dir / "train.log"
        while not (log.exists() and "step 10/" in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert err.count("interrupted: SIGTERM at step") == 1, err[-3000:]   # rank 0 says so
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=False)["engine"]
    assert saved["step"] % 10 == 0 and 10 <= saved["step"] < 100000
    assert saved["world_size"] == 2
    assert f"SIGTERM at step {saved['step']}:" in err
    assert ("resume with: torchrun --nproc_per_node 2 scripts/train.py "
            f"trainer.distributed=true trainer.resume={run_dir}") in err
    resumed = subprocess.run([*torchrun,
                              "trainer.distributed=true", f"trainer.resume={run_dir}",
                              f"trainer.stop_after={saved['step'] + 10}"],
                             cwd=work, env=_env(), capture_output=True, text=True, timeout=300,
                             check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = torch.load(run_dir / "checkpoint.pt", weights_only=False)["engine"]
    assert again["step"] == saved["step"] + 10 and again["world_size"] == 2
    assert sorted(p.name for p in (work / "runs").iterdir()) == ["rank0"]
