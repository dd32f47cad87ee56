"""Your own loop under ``DistributedDataParallel``: a data-parallel game.

Every rank draws the same global minibatch (same sampler seed) and scores its shard of it
through DDP; ``ConstrainedOptimizer(..., process_group="default")`` all-reduces the fused
pass's per-cell sums once per step, so every rank sees the global rates, plays the same
multipliers, and DDP's averaged gradient is the one of the global batch.

    torchrun --nproc_per_node 2 examples/custom_module_ddp.py           # 2 CPU processes
    torchrun --nproc_per_node 2 examples/custom_module_ddp.py --quick   # a few steps
    python examples/custom_module_ddp.py --quick                        # one process

On GPUs (one per rank) the same script runs with ``--backend nccl``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from fairgames.data import MinibatchSampler, make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import Batch, RateEvaluator, error_rate, group, true_positive_rate


def batch_of(ds, scores, index=None) -> Batch:
    sel = slice(None) if index is None else index
    return Batch(scores=scores, labels=ds.labels[sel], groups={"group": ds.groups["group"][sel]},
                 group_values=ds.group_names)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="20 steps")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    args = parser.parse_args(argv)
    if "RANK" in os.environ:                   # launched by torchrun: its variables
        dist.init_process_group(args.backend)
    else:                                      # a plain `python`: a group of one
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        out = train(20 if args.quick else args.steps, args.backend)
    except BaseException:
        dist.destroy_process_group()   # no barrier: a peer may never reach it
        raise
    # Wait for every rank before tearing the connections down: a rank that leaves while a
    # peer still finishes its last collective can make the peer's gloo thread abort it.
    dist.barrier()
    dist.destroy_process_group()
    return out


def train(steps: int, backend: str) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if backend == "nccl" else torch.device("cpu")
    torch.manual_seed(0)                       # the same data and initial θ on every rank
    splits = make_synthetic(n=4000, d=10, group_shift=1.5, seed=0).to(device)
    train_split, test = splits.train, splits.test
    tpr = true_positive_rate
    problem = Problem(error_rate(), [(tpr(group("group", g)) >= tpr() - 0.02).named(f"tpr_{g}")
                                     for g in train_split.group_names["group"]])
    model = nn.Sequential(nn.Linear(train_split.num_features, 32), nn.ReLU(),
                          nn.Linear(32, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None)
    copt = ConstrainedOptimizer(problem, torch.optim.Adam(model.parameters(), lr=0.01),
                                process_group="default")
    sampler = MinibatchSampler(train_split, batch_size=256, seed=0)   # the global batches
    for step in range(1, steps + 1):
        index = next(sampler)[rank::world]     # this rank's shard of the global batch
        scores = ddp(train_split.features[index]).squeeze(-1)
        copt.zero_grad()
        copt.lagrangian(batch_of(train_split, scores, index)).backward()
        copt.step()
        if step % max(1, steps // 4) == 0 and rank == 0:   # reading values syncs
            rec = copt.last
            print(f"step {step}: error {float(rec.objective_true):.4f} (global batch), worst "
                  f"constraint {float(rec.constraints_true.max()):+.4f}")
    # No broadcast was needed: every rank played the same multipliers.
    lam = copt.weights()[1]
    every = [torch.empty_like(lam) for _ in range(world)]
    dist.all_gather(every, lam)
    agree = all(torch.equal(other, lam) for other in every)
    evaluator = RateEvaluator([problem.objective, *problem.constraints.values()])
    with torch.no_grad():
        values = evaluator.evaluate_split([batch_of(test, model(test.features).squeeze(-1))])
    out = {"rank": rank, "world_size": world, "multipliers_agree": agree,
           "error": float(problem.objective.evaluate(values)),
           "worst_constraint": max(float(c.value(values))
                                   for c in problem.constraints.values())}
    if rank == 0:
        print(f"multipliers agree across {world} rank(s): {agree}; on test: error "
              f"{out['error']:.4f}, worst constraint {out['worst_constraint']:+.4f}")
    return out


if __name__ == "__main__":
    main()
