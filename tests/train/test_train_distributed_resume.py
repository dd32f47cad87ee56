"""Stopping and resuming a data-parallel run (gloo, 2 CPU processes, one torch thread each):
a signal to one rank stops every rank at the same step with rank 0's checkpoint, and a
checkpoint made on 2 ranks resumes on 2 ranks bit for bit (tests/train/ddp_engine_worker.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trees import leaves

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import error_rate, positive_prediction_rate
from fairgames.train.loop.checkpoint import read_latest
from fairgames.train.loop.engine import Engine, GameData
from fairgames.train.loop.parallel import DataParallel

WORKER = Path(__file__).with_name("ddp_engine_worker.py")
ROOT = Path(__file__).resolve().parents[2]
T, LOG_EVERY = 10, 5


def _ranks(out: Path, mode: str) -> list[dict]:
    """Run the worker's ``mode`` on 2 ranks; each rank's saved outcome."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    store = str(out / f"store-{mode}")      # a fresh rendezvous file per launch
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(out), str(rank), "2", store,
                               mode], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    try:
        outputs = [p.communicate(timeout=180)[0] for p in procs]
    finally:       # a rank left waiting in a collective must not outlive the test
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, output in zip(procs, outputs, strict=True):
        assert p.returncode == 0, output
    return [torch.load(out / f"{mode}_rank{r}.pt", weights_only=False) for r in (0, 1)]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def _assert_bitwise(a: dict, b: dict, parts=("model", "game", "sampler", "step")) -> None:
    for part in parts:
        left, right = leaves(a[part], part), leaves(b[part], part)
        assert left.keys() == right.keys() and left, part
        for key in left:
            assert _same(left[key], right[key]), key


def test_a_sigterm_to_one_rank_stops_every_rank_at_the_same_step(tmp_path):
    # rank 1 alone is signalled after step T - 3; both ranks stop at the next log step (T),
    # neither waits in the game's collective, and rank 0 wrote the checkpoint of that step
    ranks = _ranks(tmp_path, "signal")
    assert [r["step"] for r in ranks] == [T, T]
    assert [r["signal"] for r in ranks] == ["SIGTERM", "SIGTERM"]
    assert ranks[0]["checkpoint"] == tmp_path / "run" / "checkpoint.pt"
    assert ranks[1]["checkpoint"] is None
    saved = read_latest(tmp_path / "run" / "checkpoint.pt")[1]["engine"]
    assert saved["step"] == T and saved["world_size"] == 2
    _assert_bitwise(saved, ranks[0]["state"])


def test_a_two_rank_checkpoint_resumes_on_two_ranks_bit_for_bit(tmp_path):
    straight = _ranks(tmp_path, "straight")
    stopped = _ranks(tmp_path, "stop")
    assert [r["step"] for r in stopped] == [T, T]
    resumed = _ranks(tmp_path, "resume")
    assert [r["step"] for r in straight] == [r["step"] for r in resumed] == [2 * T, 2 * T]
    game = straight[0]["state"]["game"]["players"]
    assert {"multipliers", "slacks", "theta"} <= set(game)      # λ, slacks and θ's optimizer
    assert straight[0]["state"]["sampler"]["steps"] == 2 * T
    for rank in (0, 1):         # every rank: θ, the game (λ, slacks), the sampler, the step
        _assert_bitwise(resumed[rank]["state"], straight[rank]["state"])
    _assert_bitwise(straight[1]["state"], straight[0]["state"])


@pytest.mark.parametrize("saved", [2, 1])
def test_a_checkpoint_resumes_on_its_own_world_size_only(saved):
    # a 2-rank checkpoint in one process, a 1-process one on 2 ranks: the error names both
    # counts and the remedy
    train = make_synthetic(n=200, d=3, seed=0).train
    model = torch.nn.Linear(3, 1)
    problem = Problem(error_rate(), [(positive_prediction_rate() >= 0.2).named("ppr")])
    copt = ConstrainedOptimizer(problem,
                                torch.optim.SGD(model.parameters(), lr=0.1))
    # a rank's place without a module: the engine plays the model itself (no process group
    # is needed to build it or to read a checkpoint)
    here = None if saved == 2 else DataParallel(rank=0, world_size=2)
    engine = Engine(model, copt, GameData(train, "group"), steps=4, parallel=here)
    state = engine.state_dict()
    state["world_size"] = saved
    with pytest.raises(ValueError, match=rf"on {saved} process\(es\), this run has "
                                         rf"{3 - saved}.*resume it on {saved}"):
        engine.load_state_dict(state)
