"""``trainer.distributed=true``: one run on several processes launched by ``torchrun``.

Every rank loads the same splits and draws the same global minibatch indices (same seed);
it plays the game on its shard of them (:func:`shard`: every ``world_size``-th row from its
rank), θ under ``DistributedDataParallel`` and the other players on the global rates
(:mod:`fairgames.game.distributed`: one all-reduce per step). ``trainer.batch_size`` is the
global batch. Rank 0 chooses the run directory (Hydra's ``${now}`` differs per rank) and
sends it to the others (:func:`shared_run_dir`); only rank 0 writes logs, checkpoints and
reports. The backend is gloo on CPU and NCCL on CUDA (one GPU per rank, ``LOCAL_RANK``).

Example:
    >>> import torch
    >>> shard(torch.arange(7), DataParallel(rank=1, world_size=3)).tolist()
    [1, 4]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ..config import ConfigError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DataParallel:
    """This process's place in a data-parallel run, and θ's DDP module (``None``: the
    engine scores with the model itself).

    Example:
        >>> DataParallel(rank=0, world_size=2).writes
        True
    """

    rank: int
    world_size: int
    module: torch.nn.Module | None = None

    @property
    def writes(self) -> bool:
        """Whether this rank writes the run's files (rank 0)."""
        return self.rank == 0


def join(device: torch.device) -> tuple[DataParallel, torch.device]:
    """Join torchrun's process group (gloo on CPU, NCCL on CUDA; an existing default group
    is used as it is) and return this rank's place and device.

    Raises:
        ConfigError: torchrun's environment variables are missing and no process group is
            initialised (NCCL without GPUs is refused by the config's validation).
    """
    if not dist.is_initialized():
        missing = [v for v in TORCHRUN_VARIABLES if v not in os.environ]
        if missing:
            raise ConfigError(
                "trainer.distributed=true needs torchrun's environment variables "
                f"({', '.join(missing)} missing) or an initialised torch.distributed process "
                "group: launch with torchrun --nproc_per_node N scripts/train.py "
                "trainer.distributed=true ..., or drop trainer.distributed")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DataParallel(dist.get_rank(), dist.get_world_size()), device


def shared_run_dir(directory: str | Path | None) -> Path | None:
    """Rank 0's run directory, on every rank (one ``broadcast_object_list``)."""
    box = [str(directory) if directory is not None else None]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0]) if box[0] is not None else None


def writes_outputs() -> bool:
    """Whether this process writes a run's files: rank 0 of a process group, or the only
    process."""
    return not dist.is_initialized() or dist.get_rank() == 0


def hydra_args(argv: list[str], rank: str | None) -> list[str]:
    """A torchrun launch's command line for Hydra (``rank``: torchrun's ``RANK``): on ranks
    other than 0 Hydra writes nothing (no ``.hydra/``, no log file, its run directory the
    current one); rank 0's run directory is sent to them (:func:`shared_run_dir`).

    Example:
        >>> hydra_args(["trainer.distributed=true"], "1")[1:]   # doctest: +NORMALIZE_WHITESPACE
        ['hydra.output_subdir=null', 'hydra/job_logging=disabled',
         'hydra.job_logging.root.handlers=[]', 'hydra/hydra_logging=disabled',
         'hydra.run.dir=.']
        >>> hydra_args(["trainer.distributed=true"], "0")
        ['trainer.distributed=true']
    """
    distributed = any(a.split("=", 1)[0].lstrip("+") == "trainer.distributed"
                      and a.split("=", 1)[-1].lower() == "true" for a in argv)
    if rank in (None, "0") or not distributed:
        return argv
    # (the root logger's file handler of configs/train.yaml does not exist once disabled)
    return [*argv, "hydra.output_subdir=null", "hydra/job_logging=disabled",
            "hydra.job_logging.root.handlers=[]", "hydra/hydra_logging=disabled",
            "hydra.run.dir=."]


def agree_to_stop(received: int | None, device: torch.device) -> int | None:
    """The stop signal every rank acts on: the largest signal number any rank received
    (``None``: none did), from one ``all_reduce(MAX)`` of one integer on ``device``. Called
    by every rank at the same steps (log and checkpoint steps), so that a SIGTERM to one
    rank, or torchrun's to all, stops them all at the same step."""
    flag = torch.tensor([received or 0], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item()) or None


def leave(*, finished: bool = True) -> None:
    """Leave the process group at the end of a run (if one was joined). A run every rank
    ``finished`` together (done, or stopped at the step they agreed on) first waits for the
    others: a rank that tears its connections down while a peer is still finishing its last
    collective can make that peer's communication thread abort the process (seen: 1 stop in
    20 of a 2-rank gloo run ended in SIGABRT). A rank leaving on an error does not wait: its
    peers may never reach the barrier."""
    if dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def shard(index: torch.Tensor, parallel: DataParallel) -> torch.Tensor:
    """This rank's rows of a global batch ``index``: every ``world_size``-th from its rank
    (a strided view: no copy, no sync)."""
    return index[parallel.rank::parallel.world_size]


def wrap(model: torch.nn.Module, parallel: DataParallel) -> DataParallel:
    """``parallel`` with θ's ``DistributedDataParallel`` module around ``model``."""
    device = _device(model)
    ids = [device.index] if device.type == "cuda" else None     # one GPU per rank
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    return DataParallel(parallel.rank, parallel.world_size, ddp)


def _device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")
