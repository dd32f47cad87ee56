"""One rank of the data-parallel engine tests (tests/train/test_train_distributed_resume.py).

``python ddp_engine_worker.py OUT RANK WORLD STORE MODE`` trains a linear model on a synthetic
split with the :class:`~fairgames.train.loop.engine.Engine` (minibatches of 64 global rows, the
proxy-Lagrangian with ratio slacks on F1 parity, gloo, one torch thread) under
``DistributedDataParallel``, rank 0 writing checkpoints to ``OUT/run``. ``MODE``:

* ``straight``: ``2T`` steps;
* ``stop``: ``T`` steps (``stop_after``: a checkpoint at ``T``);
* ``resume``: every rank loads ``OUT/run/checkpoint.pt`` and trains on to ``2T``;
* ``signal``: ``2T`` steps, but rank 1 (only) sends itself SIGTERM after step ``T - 3``.

The ranks meet through the file ``STORE`` (a gloo ``file://`` rendezvous: no port to
race for on a shared machine). Each rank saves its engine state (θ, the game, the sampler)
and how it ended to ``OUT/<MODE>_rank<RANK>.pt``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import error_rate, fmeasure, group
from fairgames.train.loop.checkpoint import read_latest
from fairgames.train.loop.engine import (
    BatchSettings,
    CheckpointSettings,
    Engine,
    GameData,
    LogSettings,
    RunInterrupted,
)
from fairgames.train.loop.parallel import DataParallel, leave, wrap

T = 10
LOG_EVERY = 5


def engine(out: Path, rank: int, world: int) -> Engine:
    train = make_synthetic(n=600, d=4, seed=0).train
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    problem = Problem(error_rate(), [
        (fmeasure(group("group", "1")) >= fmeasure(group("group", "0")) - 0.05).named("f1")])
    copt = ConstrainedOptimizer(problem, torch.optim.Adam(model.parameters(), lr=0.05),
                                preset="proxy_lagrangian", ratio_slacks="num_den",
                                process_group="default")
    return Engine(model, copt, GameData(train, "group"), steps=2 * T,
                  batches=BatchSettings(size=64, seed=3), logging=LogSettings(every=LOG_EVERY),
                  checkpoints=CheckpointSettings(run_dir=out / "run" if rank == 0 else None),
                  parallel=wrap(model, DataParallel(rank, world)))


def main() -> None:
    out, rank, world, store, mode = (Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                    sys.argv[4], sys.argv[5])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    finished = False
    try:
        e = engine(out, rank, world)
        if mode == "resume":
            e.load_state_dict(read_latest(out / "run" / "checkpoint.pt")[1]["engine"])
        if mode == "signal" and rank == 1:
            step = e.train_step

            def signalled_step() -> None:
                step()
                if e.step == T - 3:
                    os.kill(os.getpid(), signal.SIGTERM)

            e.train_step = signalled_step
        ended = {"signal": None}
        try:
            e.run(stop_after=T if mode == "stop" else None)
        except RunInterrupted as stopped:
            ended = {"signal": stopped.signal_name, "checkpoint": stopped.checkpoint}
        torch.save({"state": e.state_dict(), "step": e.step, **ended},
                   out / f"{mode}_rank{rank}.pt")
        finished = True
    finally:
        leave(finished=finished)     # the library's own teardown (a barrier, then destroy)


if __name__ == "__main__":
    main()
